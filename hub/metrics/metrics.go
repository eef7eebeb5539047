// Package metrics holds the hub's Prometheus metrics, on a registry of its
// own (never the global one, so two hubs in one test process do not
// collide).
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Topic kinds, the values of the topic_kind label.
const (
	KindStatus  = "status"
	KindOnline  = "online"
	KindEvents  = "events"
	KindUnknown = "unknown"
)

// Reasons a well-formed payload is ignored, the values of the reason label
// of fleet_mqtt_ignored_payloads_total.
const (
	ReasonUnknownDevice = "unknown_device"
	// ReasonStale: a status older than the one the hub has.
	ReasonStale = "stale"
	// ReasonDuplicate: an event whose ID the hub has among the device's
	// recent events (a re-delivery).
	ReasonDuplicate = "duplicate"
)

// Metrics are the hub's metrics. The zero value is not usable: use New.
type Metrics struct {
	Registry *prometheus.Registry

	// DesiredPublishes counts DesiredState messages published (retained),
	// clears of deleted devices included.
	DesiredPublishes prometheus.Counter
	// DeploymentStatusPublishes counts deployment status messages.
	DeploymentStatusPublishes prometheus.Counter
	// StatusMessages counts accepted DeviceStatus payloads.
	StatusMessages prometheus.Counter
	// MQTTMessages counts every payload received on a device topic, by
	// topic kind, before any check.
	MQTTMessages *prometheus.CounterVec
	// Malformed counts payloads refused: undecodable, invalid, too large,
	// or naming another device than their topic.
	Malformed *prometheus.CounterVec
	// Ignored counts well-formed payloads that were dropped (unknown
	// device).
	Ignored *prometheus.CounterVec
	// APIRequestDuration is the HTTP API's latency by route pattern and
	// status code.
	APIRequestDuration *prometheus.HistogramVec
	// ReconcileDuration is how long one controller pass takes.
	ReconcileDuration prometheus.Histogram
	// StatusFlushes counts batched status writes to the store.
	StatusFlushes prometheus.Counter
	// DeviceKeyRefused counts device statuses whose public key was not
	// the device's bound key and was refused (hub/ingest, keys.go).
	DeviceKeyRefused prometheus.Counter

	// RemoteRequests counts requests to devices (logs, exec, top) when
	// they end, by op and result (ok, device error code in lower case,
	// timeout, offline, canceled, cutoff, unreachable).
	RemoteRequests *prometheus.CounterVec
	// RemoteResponsesDropped counts device responses the hub refused, by
	// reason (malformed, too_large, unknown_id, device_mismatch,
	// duplicate, window, late).
	RemoteResponsesDropped *prometheus.CounterVec
	// RemoteOpenStreams is the number of logs and exec streams open.
	RemoteOpenStreams prometheus.Gauge
	// RemoteBytes counts the bytes of output relayed from devices to
	// clients, by op.
	RemoteBytes *prometheus.CounterVec

	// Abuse counts refused logins and cut-off MQTT clients.
	Abuse Abuse
	// Backup are the scheduled backups' metrics (backup.go).
	Backup Backup
}

// Gauges are read at scrape time from the hub's state (the fleet model,
// which keeps its counts up to date as it changes: a scrape looks at no
// device).
type Gauges struct {
	Devices, Online, Converged func() float64
	// TopReports returns the last TopReport of every registered device
	// (nil: none), exported per device and container at scrape time, so
	// a deleted device's series vanish with it.
	TopReports func() []*schema.TopReport
	// Presences, Deployments and Certificates feed the per-object series
	// of fleet.go (nil: none).
	Presences    func() []fleetmodel.DevicePresence
	Deployments  func() []fleetmodel.NamedDeploymentStatus
	Certificates func() []CertificateExpiry
}

// New creates the metrics and registers them, the Go and process
// collectors and the gauges on a new registry.
func New(g Gauges) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		DesiredPublishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_desired_publishes_total",
			Help: "DesiredState messages published retained on the devices' desired topics (clears of deleted devices included).",
		}),
		DeploymentStatusPublishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_deployment_status_publishes_total",
			Help: "Deployment status messages published retained on the deployments' status topics.",
		}),
		StatusMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_status_messages_total",
			Help: "DeviceStatus payloads accepted from devices.",
		}),
		MQTTMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_mqtt_messages_received_total",
			Help: "Payloads received on device topics, before any check, by topic kind.",
		}, []string{"topic_kind"}),
		Malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_mqtt_malformed_payloads_total",
			Help: "Payloads refused as malformed (undecodable, invalid, too large, or naming another device than the topic), by topic kind.",
		}, []string{"topic_kind"}),
		Ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_mqtt_ignored_payloads_total",
			Help: "Well-formed payloads dropped, by topic kind and reason.",
		}, []string{"topic_kind", "reason"}),
		APIRequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_api_request_duration_seconds",
			Help:    "HTTP API request latency by route pattern and status code (watch streams: their whole life).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "code"}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleet_controller_reconcile_duration_seconds",
			Help:    "Duration of one controller pass over every device.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		StatusFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_status_flushes_total",
			Help: "Batched writes of device statuses to the store.",
		}),
		DeviceKeyRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_hub_device_key_refused_total",
			Help: "Device public keys refused in statuses: not the key bound at enrollment or first report, and no `fleet device rekey` pending.",
		}),
		RemoteRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_remote_requests_total",
			Help: "Requests to devices (logs, exec, top), counted when they end, by op and result.",
		}, []string{"op", "result"}),
		RemoteResponsesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_remote_responses_dropped_total",
			Help: "Device responses refused (malformed, unknown id, wrong device, duplicate, over the window, late), by reason.",
		}, []string{"reason"}),
		RemoteOpenStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_remote_open_streams",
			Help: "Logs and exec streams between clients and devices open now.",
		}),
		RemoteBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_remote_relayed_bytes_total",
			Help: "Bytes of output relayed from devices to clients, by op.",
		}, []string{"op"}),
	}
	m.Abuse = newAbuse(reg)
	m.Backup = newBackup(reg)
	for _, k := range []string{KindStatus, KindOnline, KindEvents, KindUnknown} {
		m.Malformed.WithLabelValues(k)
		m.MQTTMessages.WithLabelValues(k)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		if f == nil {
			f = func() float64 { return 0 }
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		m.DesiredPublishes, m.DeploymentStatusPublishes, m.StatusMessages, m.MQTTMessages,
		m.Malformed, m.Ignored, m.APIRequestDuration, m.ReconcileDuration, m.StatusFlushes, m.DeviceKeyRefused,
		m.RemoteRequests, m.RemoteResponsesDropped, m.RemoteOpenStreams, m.RemoteBytes,
		newTopCollector(g.TopReports), newFleetCollector(g),
		gauge("fleet_devices", "Registered devices.", g.Devices),
		gauge("fleet_devices_online", "Devices online (and not stale).", g.Online),
		gauge("fleet_devices_converged", "Devices whose report matches their latest desired state.", g.Converged),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// ObserveRequest records one API request.
func (m *Metrics) ObserveRequest(route string, code int, d time.Duration) {
	m.APIRequestDuration.WithLabelValues(route, strconv.Itoa(code)).Observe(d.Seconds())
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
