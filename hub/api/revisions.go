package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fleetmq/fleet/schema"
)

// revisionRoutes adds the routes of deployment revisions and rollback.
func (s *Server) revisionRoutes() {
	s.Handle("/v1/deployments/{name}/revisions", methods{http.MethodGet: s.listRevisions})
	s.Handle("/v1/deployments/{name}/revisions/{revision}", methods{http.MethodGet: s.getRevision})
	s.Handle("/v1/deployments/{name}/rollback", methods{http.MethodPost: s.rollback})
}

// listRevisions handles GET /v1/deployments/{name}/revisions.
func (s *Server) listRevisions(w http.ResponseWriter, r *http.Request) {
	revs, err := s.store.DeploymentRevisions(r.Context(), r.PathValue("name"))
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if revs == nil {
		revs = []schema.DeploymentRevision{}
	}
	WriteJSON(w, http.StatusOK, schema.DeploymentRevisionList{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentRevisionList"},
		Items:    revs,
	})
}

// getRevision handles GET /v1/deployments/{name}/revisions/{revision}.
func (s *Server) getRevision(w http.ResponseWriter, r *http.Request) {
	v := r.PathValue("revision")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		WriteError(w, r, s.log, invalidParam("revision", "%q must be a revision number, 1 or more (fleet rollout history lists them)", schema.Truncate(v, 80, "...")))
		return
	}
	rev, err := s.store.DeploymentRevision(r.Context(), r.PathValue("name"), n)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	WriteJSON(w, http.StatusOK, rev)
}

// rollback handles POST /v1/deployments/{name}/rollback[?resourceVersion=N][&dryRun=server]
// with a schema.RollbackRequest body (which may be empty).
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	dry, err := dryRun(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	rv, hasRV, err := parseRV(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	req, err := decodeRollback(body)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	want := ""
	if hasRV {
		want = strconv.FormatUint(rv, 10)
	}
	name := r.PathValue("name")
	res, err := s.store.Rollback(r.Context(), name, req.ToRevision, want, dry)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	if !dry && !res.Unchanged {
		s.log.Info("rolled back", "kind", schema.KindDeployment, "name", name, "from", res.From, "to", res.To,
			"resourceVersion", res.Deployment.Metadata.ResourceVersion)
	}
	WriteJSON(w, http.StatusOK, schema.RollbackResponse{
		Deployment: *res.Deployment, FromRevision: res.From, ToRevision: res.To,
		Unchanged: res.Unchanged, DryRun: dry,
	})
}

// decodeRollback parses a rollback body: {"toRevision": N}, or nothing.
// An unknown field or a toRevision that is not a whole number is a 400
// naming the field.
func decodeRollback(body []byte) (schema.RollbackRequest, error) {
	var req schema.RollbackRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &te) && te.Field != "":
		return req, invalidParam(te.Field, "must be a whole number (a revision from fleet rollout history, or 0 for the previous one), got a JSON %s", te.Value)
	default:
		if field, ok := unknownField(err); ok {
			return req, invalidParam(field, "unknown field: the body is {\"toRevision\": N}")
		}
		return req, badRequest("rollback body: %v: want {\"toRevision\": N}", err)
	}
	if dec.More() {
		return req, badRequest("rollback body: want one JSON object, {\"toRevision\": N}")
	}
	if req.ToRevision < 0 {
		return req, invalidParam("toRevision", "%d: must be a revision number, or 0 for the previous one", req.ToRevision)
	}
	return req, nil
}

// unknownField extracts the field of encoding/json's "unknown field"
// error.
func unknownField(err error) (string, bool) {
	var field string
	if _, scanErr := fmt.Sscanf(err.Error(), "json: unknown field %q", &field); scanErr != nil {
		return "", false
	}
	return field, true
}
