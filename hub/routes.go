package hub

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/dashboard"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// statusView gives the API the status the hub derives from agent reports,
// from the fleet model.
type statusView struct{ m *fleetmodel.Model }

var _ api.StatusSource = statusView{}

func (v statusView) DeviceStatusJSON(name string) []byte {
	uid, _, _ := v.m.Device(name)
	return v.m.DeviceInfoJSON(name, uid)
}

func (v statusView) DeploymentStatusJSON(name string) []byte {
	s, ok := v.m.DeploymentStatus(name)
	if !ok {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	return b
}

// routes adds the hub's own routes to the API, and the dashboard's.
func (h *Hub) routes() error {
	h.api.Handle("/v1/info", api.Methods{http.MethodGet: h.serveInfo})
	h.api.Handle("/v1/signing-key/rotate", api.Methods{http.MethodPost: h.serveRotateSigningKey})
	h.api.Handle("/v1/devices/{name}/events", api.Methods{http.MethodGet: h.serveEvents})
	h.api.Handle("/v1/devices/{name}/certificate", api.Methods{http.MethodPost: h.serveDeviceCertificate})
	h.api.Handle("/v1/events", api.Methods{http.MethodGet: h.serveAllEvents})
	h.api.Handle("/v1/mosquitto/passwd", api.Methods{http.MethodGet: h.serveMosquitto(true)})
	h.api.Handle("/v1/mosquitto/acl", api.Methods{http.MethodGet: h.serveMosquitto(false)})
	h.api.Handle("/metrics", api.Methods{http.MethodGet: h.metrics.Handler().ServeHTTP})
	// Requests to devices: logs, exec, top, crash reports. Their streams
	// (and hijacked exec connections, which Shutdown does not wait for)
	// end when the listener closes.
	h.remote.Register(h.api)
	h.wrapListeners(h.remote.StopOnClose)

	// The dashboard at /, on the API's listener and tokens. Its live
	// streams end when the HTTP server closes the listener, first thing
	// in its shutdown, so that the shutdown does not wait for them.
	dash, err := dashboard.New(dashboard.Options{
		Model: h.model, Store: h.store, Logger: h.log.With("component", "dashboard"), Version: h.opts.Version,
	})
	if err != nil {
		return err
	}
	dash.Register(h.api)
	h.wrapListeners(dash.StopOnClose)
	return nil
}

// wrapListeners wraps each API listener that is on.
func (h *Hub) wrapListeners(wrap func(net.Listener) net.Listener) {
	if h.ln != nil {
		h.ln = wrap(h.ln)
	}
	if h.tlsLn != nil {
		h.tlsLn = wrap(h.tlsLn)
	}
}

func (h *Hub) hubInfo() schema.HubInfo {
	return schema.HubInfo{
		Version: h.opts.Version, Store: h.info.StoreID,
		MQTTURL: h.info.MQTTURL, ExternalBroker: h.broker == nil,
		MQTTPlainURL: h.info.MQTTPlainURL, HTTPSURL: h.info.HTTPSURL, CAHash: h.info.CAHash,
		SigningKey: schema.EncodeSigningKey(h.signer.PublicKey()), SigningKeyID: h.signer.KeyID(),
	}
}

func (h *Hub) serveInfo(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusOK, h.hubInfo())
}

// serveEvents answers the device's recent events, oldest first.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	obj, err := h.store.Get(r.Context(), schema.KindDevice, name)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, schema.EventList{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "EventList"},
		Items:    h.model.Events(name, obj.GetMetadata().UID),
	})
}

// serveAllEvents answers the recent events of every device the
// labelSelector selects, of one type if type is set, the newest limit
// (default schema.DefaultEventsLimit, 0 for all) of them, oldest first.
func (h *Hub) serveAllEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, err := api.ParseSelector(q.Get("labelSelector"))
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	typ := q.Get("type")
	if typ != "" && typ != schema.EventNormal && typ != schema.EventWarning {
		api.WriteError(w, r, h.log, &schema.ValidationError{Errors: []schema.FieldError{{Field: "type", Message: fmt.Sprintf("unsupported value %q: want Normal or Warning", typ)}}})
		return
	}
	limit := schema.DefaultEventsLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			api.WriteError(w, r, h.log, &schema.ValidationError{Errors: []schema.FieldError{{Field: "limit", Message: fmt.Sprintf("%q: want a number ≥ 0", v)}}})
			return
		}
	}
	var evs []schema.Event
	for _, d := range h.model.Devices(sel) {
		for _, ev := range h.model.Events(d.Name, d.UID) {
			if typ == "" || ev.Type == typ {
				evs = append(evs, ev)
			}
		}
	}
	api.WriteJSON(w, http.StatusOK, schema.EventList{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "EventList"},
		Items:    append([]schema.Event{}, schema.NewestEvents(evs, limit)...),
	})
}

// serveMosquitto answers the password file (admin only: it holds hashes)
// or the ACL file for an external Mosquitto.
func (h *Hub) serveMosquitto(passwd bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := api.CredentialFrom(r.Context()); passwd && c.Role != store.RoleAdmin {
			api.WriteStatus(w, api.NewStatus(http.StatusForbidden, api.ReasonForbidden,
				fmt.Sprintf("credential %q (role %s) may not read password hashes", c.Name, c.Role), nil))
			return
		}
		pw, acl, warnings, err := MosquittoFiles(r.Context(), h.store, h.opts.Topics, h.mqttAccount)
		if err != nil {
			api.WriteError(w, r, h.log, err)
			return
		}
		for _, warn := range warnings {
			h.log.Warn("mosquitto files: " + warn)
		}
		body := acl
		if passwd {
			body = pw
			w.Header().Set("Cache-Control", "no-store")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
}
