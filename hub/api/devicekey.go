package api

import (
	"net/http"

	"github.com/fleetmq/fleet/schema"
)

// DeviceRekey is the answer of POST /v1/devices/{name}/rekey (`fleet device
// rekey NAME`): the device's next reported public key, if it is not the
// bound one, replaces it once.
type DeviceRekey struct {
	// Name is the device's.
	Name string `json:"name"`
	// KeyID is schema.DeviceKeyID of the key bound now ("" if none).
	KeyID string `json:"keyId,omitempty"`
	// RekeyPending is true: the next other key the device reports is
	// bound, with a DeviceKeyRebound event.
	RekeyPending bool `json:"rekeyPending"`
}

// deviceKeyRoutes registers the device key routes: only an admin may POST
// (roles.go), and every request is in the audit trail.
func (s *Server) deviceKeyRoutes() {
	s.Handle("/v1/devices/{name}/rekey", methods{http.MethodPost: s.rekeyDevice})
}

// rekeyDevice handles POST /v1/devices/{name}/rekey.
func (s *Server) rekeyDevice(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := schema.ValidateName(name); err != nil {
		WriteError(w, r, s.log, badRequest("device name %q: %v", schema.Truncate(name, 64, "..."), err))
		return
	}
	rec, err := s.store.RekeyDevice(r.Context(), name)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	out := DeviceRekey{Name: name, RekeyPending: true}
	if rec.PublicKey != "" {
		out.KeyID = schema.DeviceKeyID(rec.PublicKey)
	}
	s.log.Info("device rekeyed: the next public key it reports replaces its bound key", "device", name, "key_id", out.KeyID)
	WriteJSON(w, http.StatusOK, out)
}
