package hub

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/mosquitto"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// mosquittoSync is the hub's sync of an external Mosquitto's files
// (hub/mosquitto.FileSync), under the names setupMosquittoSync and
// observeRequest (abuse.go) call it by.
type mosquittoSync struct{ *mosquitto.FileSync }

func newMosquittoSync(st *store.Store, topics schema.Topics, hub broker.MosquittoAccount, dir, pidFile string, log *slog.Logger) *mosquittoSync {
	return &mosquittoSync{mosquitto.NewFileSync(st, topics, hub, dir, pidFile, log)}
}

// observeRequest triggers a sync after an API write that changes accounts.
func (m *mosquittoSync) observeRequest(route string, code int) { m.ObserveRequest(route, code) }

// serveMosquitto answers the password file (admin only: it holds hashes)
// or the ACL file for an external Mosquitto.
func (h *Hub) serveMosquitto(passwd bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := api.CredentialFrom(r.Context()); passwd && c.Role != store.RoleAdmin {
			api.WriteStatus(w, api.NewStatus(http.StatusForbidden, api.ReasonForbidden,
				fmt.Sprintf("credential %q (role %s) may not read password hashes", c.Name, c.Role), nil))
			return
		}
		pw, acl, warnings, err := mosquitto.Files(r.Context(), h.store, h.opts.Topics, h.mqttAccount)
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
