package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/dashboard"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/hub/pki"
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
	h.api.Handle("/v1/hubs", api.Methods{http.MethodGet: h.serveHubs}) // leader.go
	h.api.Handle("/v1/signing-key/rotate", api.Methods{http.MethodPost: h.serveRotateSigningKey})
	h.api.Handle("/v1/backup", api.Methods{http.MethodPost: h.serveBackup}) // backups.go, admin only
	h.api.Handle("/v1/devices/{name}/events", api.Methods{http.MethodGet: h.serveEvents})
	h.api.Handle("/v1/devices/{name}/certificate", api.Methods{http.MethodPost: h.serveDeviceCertificate})
	h.api.Handle("/v1/events", api.Methods{http.MethodGet: h.serveAllEvents})
	h.api.Handle("/v1/mosquitto/passwd", api.Methods{http.MethodGet: h.serveMosquitto(true)})
	h.api.Handle("/v1/mosquitto/acl", api.Methods{http.MethodGet: h.serveMosquitto(false)})
	h.api.Handle("/metrics", api.Methods{http.MethodGet: h.metrics.Handler().ServeHTTP})
	h.caRoutes() // carotation.go: /v1/ca, /v1/ca/rotate, /v1/ca/retire
	// Requests to devices: logs, exec, top, crash reports. Their streams
	// (and hijacked exec connections, which Shutdown does not wait for)
	// end when the listener closes.
	h.remote.Register(h.api)
	h.wrapListeners(h.remote.StopOnClose)

	// The dashboard at /, on the API's listener and tokens. Its live
	// streams end when the HTTP server closes the listener, first thing
	// in its shutdown, so that the shutdown does not wait for them.
	// The charts' history, filled from the model while the hub runs
	// (run.go).
	h.history = history.New(history.Options{Interval: h.opts.HistoryInterval})
	dash, err := dashboard.New(dashboard.Options{
		Model: h.model, Store: h.store, Logger: h.log.With("component", "dashboard"), Version: h.opts.Version,
		History: h.history,
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

func (h *Hub) hubInfo(ctx context.Context) schema.HubInfo {
	caHash := h.info.CAHash
	if h.tls.OwnCA() {
		caHash = h.tls.CAHash() // the active CA's, after a rotation too
	}
	return schema.HubInfo{
		Version: h.opts.Version, Store: h.info.StoreID,
		MQTTURL: h.info.MQTTURL, ExternalBroker: h.broker == nil,
		MQTTPlainURL: h.info.MQTTPlainURL, HTTPSURL: h.info.HTTPSURL, CAHash: caHash,
		SigningKey: schema.EncodeSigningKey(h.signer.PublicKey()), SigningKeyID: h.signer.KeyID(),
		Brokers: h.fleetBrokers(ctx), // leader.go
	}
}

func (h *Hub) serveInfo(w http.ResponseWriter, r *http.Request) {
	api.WriteJSON(w, http.StatusOK, h.hubInfo(r.Context()))
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

// maxCSRBody bounds the body of POST /v1/devices/{name}/certificate.
const maxCSRBody = 16 << 10

// serveDeviceCertificate handles POST /v1/devices/{name}/certificate
// (admin only): it signs the client certificate of an existing device
// for the CSR in the body. That is how a device added with a token
// (`fleet device add`, no enrollment) gets one: its agent writes the CSR
// as <state-dir>/client.csr.
func (h *Hub) serveDeviceCertificate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if h.clientCA == nil {
		api.WriteStatus(w, api.NewStatus(http.StatusConflict, api.ReasonConflict,
			"the hub has no CA of its own to sign client certificates with (run it without --tls-cert, or with --mqtt-client-certs)", nil))
		return
	}
	if _, err := h.store.Get(r.Context(), schema.KindDevice, name); err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	var req schema.DeviceCertificateRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCSRBody+1))
	if err == nil && len(body) > maxCSRBody {
		err = fmt.Errorf("body over %d bytes", maxCSRBody)
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		api.WriteError(w, r, h.log, fmt.Errorf("certificate request: %w: %w", schema.ErrInvalid, err))
		return
	}
	csr, err := pki.ParseCSR(req.CSR, name)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	certPEM, notAfter, err := h.clientCA.Sign(csr, name)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	h.log.Info("signed a device's client certificate", "device", name, "expires", notAfter.Format(time.DateOnly))
	api.WriteJSON(w, http.StatusOK, schema.DeviceCertificate{
		Device: name, Certificate: string(certPEM), NotAfter: notAfter, CA: string(h.clientCA.PEM()),
	})
}

// serveRotateSigningKey rotates the signing key of the running hub (POST
// /v1/signing-key/rotate, admin only) and republishes every desired
// state, signed by the new key with the old one's endorsement. It answers
// the hub's info with the new key.
func (h *Hub) serveRotateSigningKey(w http.ResponseWriter, r *http.Request) {
	_, _, shared := h.store.EtcdClient()
	if shared && !h.lead.elector.IsLeader() {
		// Only the leader publishes: it must sign with the new key.
		api.WriteStatus(w, api.NewStatus(http.StatusConflict, api.ReasonConflict,
			fmt.Sprintf("hub %s is a standby: rotate the signing key through the leader hub (fleet get hubs)", h.lead.id), nil))
		return
	}
	oldID, newID, err := h.signer.Rotate()
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	h.log.Info("signing key rotated; republishing every desired state", "old_key", oldID, "new_key", newID)
	h.ctrl.RepublishAll()
	if shared {
		// The other hubs of the fleet need the new key files (fleetsigning.go).
		if err := recordFleetSigningKey(r.Context(), h.store, newID); err != nil {
			api.WriteError(w, r, h.log, err)
			return
		}
	}
	api.WriteJSON(w, http.StatusOK, h.hubInfo(r.Context()))
}
