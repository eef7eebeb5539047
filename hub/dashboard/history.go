package dashboard

import (
	"fmt"
	"net/http"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// serveHistoryOnline answers GET /v1/dashboard/history/online: the
// devices online and offline over the history's window
// (history.Online).
func (d *Dashboard) serveHistoryOnline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, d.opts.History.Online())
}

// serveHistoryDevice answers GET /v1/dashboard/history/devices/{name}:
// what a registered device reported of its memory, disk and temperature
// (history.Device); 404 for a device that is not registered.
func (d *Dashboard) serveHistoryDevice(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, _, ok := d.opts.Model.Device(name); !ok {
		api.WriteError(w, r, d.log, fmt.Errorf("device %q: %w", name, store.ErrNotFound))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, d.opts.History.Device(name))
}

// serveHistoryDeployment answers GET
// /v1/dashboard/history/deployments/{name}: how the Deployment's rollout
// moved (history.Deployment); 404 for a Deployment that does not exist.
func (d *Dashboard) serveHistoryDeployment(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := d.opts.Store.Get(r.Context(), schema.KindDeployment, name); err != nil {
		api.WriteError(w, r, d.log, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, d.opts.History.Deployment(name))
}
