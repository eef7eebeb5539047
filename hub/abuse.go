package hub

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
)

// authLimiter returns the limiter of failed logins on one listener
// (metrics.ListenerHTTP or ListenerMQTT), counting into the metrics.
func authLimiter(m *metrics.Metrics, listener string) *ratelimit.AuthLimiter {
	return ratelimit.NewAuthLimiter(ratelimit.AuthOptions{
		OnFailure:   m.Abuse.AuthFailures.WithLabelValues(listener).Inc,
		OnThrottled: m.Abuse.AuthThrottled.WithLabelValues(listener).Inc,
	})
}

// observeRequest records an API request in the metrics and lets the
// Mosquitto sync see the writes that change accounts.
func (h *Hub) observeRequest(route string, code int, d time.Duration) {
	h.metrics.ObserveRequest(route, code, d)
	if h.mosq != nil {
		h.mosq.observeRequest(route, code)
	}
}

// setupMosquittoSync creates the sync of an external Mosquitto's files
// when Options.MosquittoConfigDir is set: every replaced or deleted token
// or credential, every device added or deleted, and every account write
// through the API triggers it.
func (h *Hub) setupMosquittoSync() error {
	o := h.opts
	switch {
	case o.MosquittoConfigDir == "" && o.MosquittoPIDFile != "":
		return errors.New("--mosquitto-pid-file needs --mosquitto-config-dir")
	case o.MosquittoConfigDir == "":
		return nil
	case o.Broker == "":
		return errors.New("--mosquitto-config-dir is for an external Mosquitto (--broker); the embedded broker needs no files")
	}
	dir, err := filepath.Abs(o.MosquittoConfigDir)
	if err != nil {
		return fmt.Errorf("--mosquitto-config-dir: %w", err)
	}
	h.mosq = newMosquittoSync(h.store, o.Topics, h.mqttAccount, dir, o.MosquittoPIDFile, h.log.With("component", "mosquitto-sync"))
	h.store.OnAuthChange(func(store.AuthChangeKind, string) { h.mosq.Trigger() })
	return nil
}
