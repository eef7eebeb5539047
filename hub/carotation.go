package hub

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleet/hub/adminconf"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/schema"
)

// caCheckInterval is how often, during a CA rotation, the hub looks
// whether every device reported the new CA.
const caCheckInterval = time.Second

// caRotation drives a rotation of the hub's own CA (pki.CAs) across the
// fleet: every desired state carries the CA bundle, so a rotation
// republishes them all; the devices report the CAs they trust
// (DeviceStatus.TrustedCAs), and once every registered device lists the
// new one the rotation completes by itself: the new CA signs the server
// certificate and the old one is refused. Devices that are offline are
// waited for (and listed by GET /v1/ca), never forgotten; an operator
// may complete without them (POST /v1/ca/retire?force=true), and they
// then need their CA given again.
type caRotation struct {
	cas       *pki.CAs
	model     *fleetmodel.Model
	republish func()
	log       *slog.Logger
	pending   atomic.Int64
}

// newCARotation wires the rotation of cas: a change republishes every
// desired state (the bundle changed), and the pending-devices gauge is
// registered on reg.
func newCARotation(cas *pki.CAs, model *fleetmodel.Model, republish func(), adminConf string, reg *prometheus.Registry, log *slog.Logger) *caRotation {
	c := &caRotation{cas: cas, model: model, republish: republish, log: log}
	cas.OnChange(func() {
		c.republish()
		c.updateAdminConf(adminConf)
	})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fleet_hub_ca_rotation_pending_devices",
		Help: "Devices that have not yet reported trusting the new CA of the CA rotation under way (0 when none is).",
	}, func() float64 { return float64(c.pending.Load()) }))
	return c
}

// registerRenewals exposes how many server certificates the hub issued
// itself since it started.
func registerRenewals(t *pki.ServerTLS, reg *prometheus.Registry) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "fleet_hub_server_certificate_renewals_total",
		Help: "Server certificates the hub issued itself since it started (the first included when there was none): renewals before expiry and after a CA rotation.",
	}, func() float64 { return float64(t.Renewals()) }))
}

// updateAdminConf gives admin.conf the CAs of the moment (both during a
// rotation), so that the CLI keeps trusting the hub's HTTPS listener.
func (c *caRotation) updateAdminConf(path string) {
	conf, err := adminconf.Read(path)
	if err != nil {
		c.log.Warn("admin config not updated with the hub's CAs", "path", path, "err", err)
		return
	}
	conf.CA = string(c.cas.BundlePEM())
	if err := adminconf.Write(path, conf); err != nil {
		c.log.Warn("admin config not updated with the hub's CAs", "path", path, "err", err)
	}
}

// bundle is the CA bundle of every desired state: none on a hub whose
// CA never rotated (devices trust the CA they pinned, and 750 bytes per
// CA stay out of every retained state), both CAs during a rotation, the
// active one after (so that devices drop the retired one, also those
// that come back late).
func (c *caRotation) bundle() string {
	if st := c.cas.Status(); st.Next == "" && len(st.Retired) == 0 {
		return ""
	}
	return string(c.cas.BundlePEM())
}

// status says where the rotation stands, device by device.
func (c *caRotation) status() schema.CARotationStatus {
	cs := c.cas.Status()
	st := schema.CARotationStatus{Active: cs.Active, ActiveExpires: cs.ActiveExpires, Next: cs.Next, Retired: cs.Retired,
		Rotating: cs.Next != "", Devices: []schema.CADevice{}}
	want := st.Next
	if want == "" {
		want = st.Active
	}
	for _, d := range c.model.Devices(schema.LabelSelector{}) {
		ds, online := c.model.DeviceState(d.Name, d.UID)
		dev := schema.CADevice{Name: d.Name, Online: online, TrustedCAs: []string{}}
		if ds != nil && ds.TrustedCAs != nil {
			dev.TrustedCAs = ds.TrustedCAs
		}
		dev.HasNext = slices.Contains(dev.TrustedCAs, want)
		if !dev.HasNext {
			st.Pending++
		}
		st.Devices = append(st.Devices, dev)
	}
	if !st.Rotating {
		c.pending.Store(0)
	} else {
		c.pending.Store(int64(st.Pending))
	}
	return st
}

// run completes a rotation under way once no device is pending, until
// ctx is done.
func (c *caRotation) run(ctx context.Context) {
	t := time.NewTicker(caCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.cas.Status().Next == "" {
			continue // no rotation: nothing to look at
		}
		if st := c.status(); st.Rotating && st.Pending == 0 {
			if _, err := c.cas.Complete(); err != nil && !errors.Is(err, pki.ErrNoRotation) {
				c.log.Error("complete the CA rotation", "err", err)
			}
		}
	}
}

// caRoutes adds the CA rotation's routes; a hub without a CA of its own
// answers them 404, saying why.
func (h *Hub) caRoutes() {
	if h.cas != nil {
		h.cas.routes(h.api, h.log)
		return
	}
	none := func(w http.ResponseWriter, _ *http.Request) {
		api.WriteStatus(w, api.NewStatus(http.StatusNotFound, api.ReasonNotFound,
			"the hub has no CA of its own (it presents --tls-cert, or has no TLS listener): there is no CA to rotate", nil))
	}
	h.api.Handle("/v1/ca", api.Methods{http.MethodGet: none})
	h.api.Handle("/v1/ca/rotate", api.Methods{http.MethodPost: none})
	h.api.Handle("/v1/ca/retire", api.Methods{http.MethodPost: none})
}

// routes adds GET /v1/ca, POST /v1/ca/rotate and POST /v1/ca/retire
// (admin only, as every POST).
func (c *caRotation) routes(srv *api.Server, logger *slog.Logger) {
	srv.Handle("/v1/ca", api.Methods{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, http.StatusOK, c.status())
	}})
	srv.Handle("/v1/ca/rotate", api.Methods{http.MethodPost: func(w http.ResponseWriter, r *http.Request) {
		if _, err := c.cas.Rotate(); err != nil {
			writeCAError(w, r, logger, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, c.status())
	}})
	srv.Handle("/v1/ca/retire", api.Methods{http.MethodPost: func(w http.ResponseWriter, r *http.Request) {
		force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
		if st := c.status(); st.Rotating && st.Pending > 0 && !force {
			var names []string
			for _, d := range st.Devices {
				if !d.HasNext {
					names = append(names, d.Name)
				}
			}
			api.WriteStatus(w, api.NewStatus(http.StatusConflict, api.ReasonConflict,
				strconv.Itoa(st.Pending)+" device(s) do not trust the new CA yet ("+joinMax(names, 10)+"): wait for them (fleet-hub ca status), or retire with --force and give them the new CA by hand", nil))
			return
		}
		if _, err := c.cas.Complete(); err != nil {
			writeCAError(w, r, logger, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, c.status())
	}})
}

func writeCAError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	if errors.Is(err, pki.ErrRotating) || errors.Is(err, pki.ErrNoRotation) {
		api.WriteStatus(w, api.NewStatus(http.StatusConflict, api.ReasonConflict, err.Error(), nil))
		return
	}
	api.WriteError(w, r, logger, err)
}

// joinMax joins up to n names, then says how many more.
func joinMax(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + " and " + strconv.Itoa(len(names)-n) + " more"
}
