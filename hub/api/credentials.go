package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// ReservedNames are MQTT usernames that no credential may take (the hub's
// own account on an external broker); set by the hub.
type ReservedNames func(name string) bool

// listCredentials handles GET /v1/credentials: names and roles, never
// tokens.
func (s *Server) listCredentials(w http.ResponseWriter, r *http.Request) {
	creds, err := s.store.Credentials(r.Context())
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	out := schema.CredentialList{Items: make([]schema.Credential, 0, len(creds))}
	for _, c := range creds {
		out.Items = append(out.Items, schema.Credential{Name: c.Name, Role: c.Role})
	}
	WriteJSON(w, http.StatusOK, out)
}

// createCredential handles POST /v1/credentials: a credential of role
// monitor, viewer or admin whose token is in the answer, once.
func (s *Server) createCredential(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	var in schema.Credential
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		WriteError(w, r, s.log, badRequest("decode credential: %v", err))
		return
	}
	if dec.More() {
		WriteError(w, r, s.log, badRequest("decode credential: more than one JSON value in the body"))
		return
	}
	var details []schema.FieldError
	if err := schema.ValidateName(in.Name); err != nil {
		details = append(details, schema.FieldError{Field: "name", Message: err.Error()})
	} else if s.opts.Reserved != nil && s.opts.Reserved(in.Name) {
		details = append(details, schema.FieldError{Field: "name", Message: fmt.Sprintf("%q is reserved for the hub's own MQTT account", in.Name)})
	}
	if !store.ValidRole(in.Role) {
		details = append(details, schema.FieldError{Field: "role", Message: fmt.Sprintf("must be %q, %q or %q", schema.RoleMonitor, schema.RoleViewer, schema.RoleAdmin)})
	}
	if in.Token != "" {
		details = append(details, schema.FieldError{Field: "token", Message: "is issued by the hub: leave it out"})
	}
	if details != nil {
		WriteError(w, r, s.log, &schema.ValidationError{Kind: "Credential", Name: in.Name, Errors: details})
		return
	}
	// A device of the same name would share the MQTT username.
	if _, err := s.store.Get(r.Context(), schema.KindDevice, in.Name); err == nil {
		WriteError(w, r, s.log, fmt.Errorf("credential %q: a device of that name exists, and MQTT usernames must be unique: %w", in.Name, store.ErrAlreadyExists))
		return
	}
	token, err := s.store.CreateCredential(r.Context(), in.Name, in.Role)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	noteAudit(r, "credentials/"+in.Name, "role "+in.Role)
	s.log.Info("created credential", "name", in.Name, "role", in.Role)
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusCreated, schema.Credential{Name: in.Name, Role: in.Role, Token: token})
}

// deleteCredential handles DELETE /v1/credentials/{name}; the store's
// auth hooks disconnect its MQTT sessions before the answer. The hub's
// own admin credential (store.AdminCredential) is refused.
func (s *Server) deleteCredential(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	creds, err := s.store.Credentials(r.Context())
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	var found *store.Credential
	for i := range creds {
		if creds[i].Name == name {
			found = &creds[i]
		}
	}
	if found == nil {
		WriteError(w, r, s.log, fmt.Errorf("credential %q: %w", name, store.ErrNotFound))
		return
	}
	if found.Name == store.AdminCredential {
		WriteStatus(w, NewStatus(http.StatusForbidden, ReasonForbidden,
			fmt.Sprintf("credential %q is the hub's own admin credential: replace it with `fleet-hub admin-token --rotate` while the hub is stopped", name), nil))
		return
	}
	if err := s.store.DeleteCredential(r.Context(), name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("credential %q: %w", name, store.ErrNotFound)
		}
		WriteError(w, r, s.log, err)
		return
	}
	s.log.Info("deleted credential", "name", name, "role", found.Role)
	WriteJSON(w, http.StatusOK, schema.Credential{Name: name, Role: found.Role})
}
