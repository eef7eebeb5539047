package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// DefaultBootstrapTTL is the lifetime of a bootstrap token created without
// a ttl.
const DefaultBootstrapTTL = 24 * time.Hour

// bootstrapRoutes adds the bootstrap token routes (admins and viewers
// read, admins write; never monitors: a token's labels say what an
// enrolling device gets). The
// enrollment itself goes over MQTT (hub/enroll.go).
func (s *Server) bootstrapRoutes() {
	s.Handle("/v1/bootstrap-tokens", methods{
		http.MethodGet:  s.adminOnly(s.listBootstrapTokens),
		http.MethodPost: s.createBootstrapToken,
	})
	s.Handle("/v1/bootstrap-tokens/{id}", methods{http.MethodDelete: s.deleteBootstrapToken})
}

// adminOnly refuses a credential that is neither an admin nor a viewer
// (Handle already limits them to GET and HEAD, and monitors to their
// routes).
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := CredentialFrom(r.Context()); c.Role != store.RoleAdmin && c.Role != store.RoleViewer {
			WriteStatus(w, NewStatus(http.StatusForbidden, ReasonForbidden,
				fmt.Sprintf("credential %q (role %s) may not read bootstrap tokens", c.Name, c.Role), nil))
			return
		}
		h(w, r)
	}
}

// bootstrapTokenJSON is the API form of a stored bootstrap token.
func bootstrapTokenJSON(b store.BootstrapToken, now time.Time) schema.BootstrapToken {
	out := schema.BootstrapToken{
		ID: b.ID, Description: b.Description, Labels: b.Labels,
		Uses: b.Uses, Used: b.Used, Created: b.Created, Status: b.Status(now),
	}
	if !b.Expires.IsZero() {
		exp := b.Expires
		out.Expires = &exp
	}
	return out
}

// createBootstrapToken handles POST /v1/bootstrap-tokens: the token is in
// the answer, once.
func (s *Server) createBootstrapToken(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	var in schema.BootstrapTokenRequest
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			WriteError(w, r, s.log, badRequest("decode bootstrap token request: %v", err))
			return
		}
		if dec.More() {
			WriteError(w, r, s.log, badRequest("decode bootstrap token request: more than one JSON value in the body"))
			return
		}
	}
	details := schema.ValidateBootstrapLabels(in.Labels)
	ttl := DefaultBootstrapTTL
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		switch {
		case err != nil:
			details = append(details, schema.FieldError{Field: "ttl", Message: fmt.Sprintf("%q is not a duration such as 24h or 30m", in.TTL)})
		case d < 0 || (d > 0 && d < time.Second):
			details = append(details, schema.FieldError{Field: "ttl", Message: "must be at least 1s, or 0 for a token that never expires"})
		default:
			ttl = d
		}
	}
	if in.Uses < 0 {
		details = append(details, schema.FieldError{Field: "uses", Message: "must be 0 (no limit) or more"})
	}
	if len(in.Description) > 1024 {
		details = append(details, schema.FieldError{Field: "description", Message: "must be at most 1024 bytes"})
	}
	if len(details) > 0 {
		WriteError(w, r, s.log, &schema.ValidationError{Kind: "BootstrapToken", Errors: details})
		return
	}
	token, bt, err := s.store.CreateBootstrapToken(r.Context(), store.BootstrapTokenSpec{
		Description: in.Description, Labels: in.Labels, TTL: ttl, Uses: in.Uses,
	})
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	noteAudit(r, "bootstrap-tokens/"+bt.ID, fmt.Sprintf("uses %d, expires %s", bt.Uses, bt.Expires.Format(time.RFC3339)))
	s.log.Info("created bootstrap token", "id", bt.ID, "labels", bt.Labels, "uses", bt.Uses, "expires", bt.Expires)
	out := bootstrapTokenJSON(bt, time.Now())
	out.Token = token
	out.CAHash = s.opts.CAHash
	if s.opts.CAHashFunc != nil {
		out.CAHash = s.opts.CAHashFunc()
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusCreated, out)
}

// listBootstrapTokens handles GET /v1/bootstrap-tokens: never the tokens.
func (s *Server) listBootstrapTokens(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.BootstrapTokens(r.Context())
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	now := time.Now()
	out := schema.BootstrapTokenList{Items: make([]schema.BootstrapToken, 0, len(list))}
	for _, b := range list {
		out.Items = append(out.Items, bootstrapTokenJSON(b, now))
	}
	WriteJSON(w, http.StatusOK, out)
}

// deleteBootstrapToken handles DELETE /v1/bootstrap-tokens/{id}. Devices
// that enrolled with the token keep their own tokens.
func (s *Server) deleteBootstrapToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := schema.ValidateBootstrapTokenID(id); err != nil {
		WriteError(w, r, s.log, fmt.Errorf("%w (the part of the token before the '.')", notFound("bootstrap token %q", id)))
		return
	}
	bt, err := s.store.DeleteBootstrapToken(r.Context(), id)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if s.opts.BootstrapTokenDeleted != nil {
		s.opts.BootstrapTokenDeleted(id)
	}
	s.log.Info("deleted bootstrap token", "id", id, "used", bt.Used)
	WriteJSON(w, http.StatusOK, bootstrapTokenJSON(bt, time.Now()))
}
