package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleet/broker"
)

// Listeners, the values of the listener label of the auth metrics.
const (
	ListenerHTTP = "http"
	ListenerMQTT = "mqtt"
)

// Abuse are the counters of refused logins and cut-off MQTT clients.
type Abuse struct {
	// AuthFailures counts credentials checked and refused, by listener.
	AuthFailures *prometheus.CounterVec
	// AuthThrottled counts attempts refused unchecked because their
	// source address failed too often, by listener.
	AuthThrottled *prometheus.CounterVec
	// ClientsCutOff counts MQTT clients disconnected for abuse, by reason
	// (broker.CutOff…).
	ClientsCutOff *prometheus.CounterVec
}

func newAbuse(reg *prometheus.Registry) Abuse {
	a := Abuse{
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_auth_failures_total",
			Help: "Failed authentications (wrong or missing credentials checked and refused), by listener (http, mqtt).",
		}, []string{"listener"}),
		AuthThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_auth_throttled_total",
			Help: "Authentication attempts refused without checking, because their source address failed too often, by listener (http, mqtt).",
		}, []string{"listener"}),
		ClientsCutOff: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_mqtt_clients_cut_off_total",
			Help: "MQTT clients the embedded broker disconnected for abuse, by reason (publish_rate, response_rate, packet_too_large).",
		}, []string{"reason"}),
	}
	for _, l := range []string{ListenerHTTP, ListenerMQTT} {
		a.AuthFailures.WithLabelValues(l)
		a.AuthThrottled.WithLabelValues(l)
	}
	for _, r := range []string{broker.CutOffPublishRate, broker.CutOffResponseRate, broker.CutOffPacketTooLarge} {
		a.ClientsCutOff.WithLabelValues(r)
	}
	reg.MustRegister(a.AuthFailures, a.AuthThrottled, a.ClientsCutOff)
	return a
}

// ClientCutOff counts one cut-off client; it is broker.Options.OnClientCutOff.
func (a Abuse) ClientCutOff(reason string) {
	a.ClientsCutOff.WithLabelValues(reason).Inc()
}
