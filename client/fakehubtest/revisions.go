package fakehubtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// recordRevision keeps a deployment's revisions as the hub does: a changed
// template is the newest revision (an older one with the same template is
// renumbered), the oldest beyond the limit are dropped, and
// status.revision is set. Call with h.mu held.
func (h *Hub) recordRevision(d *schema.Deployment) {
	if h.revisions == nil {
		h.revisions = map[string][]schema.DeploymentRevision{}
	}
	name := d.Metadata.Name
	revs := h.revisions[name]
	if len(revs) == 0 || !schema.SameTemplate(revs[len(revs)-1].Template, d.Spec.Template) {
		next := int64(1)
		if len(revs) > 0 {
			next = revs[len(revs)-1].Revision + 1
		}
		revs = slices.DeleteFunc(revs, func(r schema.DeploymentRevision) bool {
			return schema.SameTemplate(r.Template, d.Spec.Template)
		})
		cause := schema.ChangeCause(d.Metadata.Annotations)
		if cause == "" {
			cause = "by admin (admin)"
		}
		revs = append(revs, schema.DeploymentRevision{
			TypeMeta:   schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeploymentRevision},
			Deployment: name, Revision: next, Template: d.Spec.Template,
			Hash: schema.TemplateHash(d.Spec.Template), CreatedAt: time.Now().UTC().Truncate(time.Second),
			ChangeCause: cause,
		})
	}
	if limit := d.Spec.HistoryLimit(); len(revs) > limit {
		revs = revs[len(revs)-limit:]
	}
	h.revisions[name] = revs
	st := schema.DeploymentStatus{}
	if d.Status != nil {
		st = *d.Status
	}
	st.Revision = revs[len(revs)-1].Revision
	d.Status = &st
}

// SetRevisionOutcome sets the outcome of a deployment's revision, as a
// rollout would. It fails for an unknown revision.
func (h *Hub) SetRevisionOutcome(name string, n int64, outcome schema.RevisionOutcome) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.revisions[name] {
		if r.Revision == n {
			h.revisions[name][i].Outcome = outcome
			return nil
		}
	}
	return fmt.Errorf("fakehubtest: deployment %q has no revision %d", name, n)
}

// serveRevisions answers /v1/deployments/{name}/revisions[/{n}] and
// /v1/deployments/{name}/rollback; false for other paths.
func (h *Hub) serveRevisions(w http.ResponseWriter, r *http.Request, parts []string) bool {
	if len(parts) < 3 || parts[0] != "deployments" || (parts[2] != "revisions" && parts[2] != "rollback") || len(parts) > 4 {
		return false
	}
	name := parts[1]
	h.mu.Lock()
	defer h.mu.Unlock()
	dep, ok := h.deployments[name]
	if !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("Deployment %q not found", name), nil)
		return true
	}
	revs := h.revisions[name]
	switch {
	case parts[2] == "revisions" && len(parts) == 3 && r.Method == http.MethodGet:
		items := slices.Clone(revs)
		slices.Reverse(items)
		if items == nil {
			items = []schema.DeploymentRevision{}
		}
		writeJSON(w, http.StatusOK, schema.DeploymentRevisionList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentRevisionList"}, Items: items})
	case parts[2] == "revisions" && len(parts) == 4 && r.Method == http.MethodGet:
		n, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil || n < 1 {
			writeStatus(w, http.StatusBadRequest, "Invalid", "revision: not a revision number", []schema.FieldError{{Field: "revision", Message: "not a revision number"}})
			return true
		}
		for _, rev := range revs {
			if rev.Revision == n {
				writeJSON(w, http.StatusOK, rev)
				return true
			}
		}
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("revision %d of deployment %q: not found", n, name), nil)
	case parts[2] == "rollback" && len(parts) == 3 && r.Method == http.MethodPost:
		h.rollback(w, r, dep, revs)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" "+r.URL.Path+" is not allowed", nil)
	}
	return true
}

// rollback is the hub's rollback. Call with h.mu held.
func (h *Hub) rollback(w http.ResponseWriter, r *http.Request, dep *schema.Deployment, revs []schema.DeploymentRevision) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	var req schema.RollbackRequest
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.ToRevision < 0 {
			writeStatus(w, http.StatusBadRequest, "Invalid", fmt.Sprintf("toRevision: %v", err), []schema.FieldError{{Field: "toRevision", Message: "must be a whole number"}})
			return
		}
	}
	if rv := r.URL.Query().Get("resourceVersion"); rv != "" && rv != dep.Metadata.ResourceVersion {
		writeStatus(w, http.StatusConflict, "Conflict", fmt.Sprintf("Deployment %q was modified", dep.Metadata.Name), nil)
		return
	}
	var current int64
	if dep.Status != nil {
		current = dep.Status.Revision
	}
	var target *schema.DeploymentRevision
	for i := len(revs) - 1; i >= 0; i-- {
		rev := &revs[i]
		if req.ToRevision > 0 && rev.Revision == req.ToRevision ||
			req.ToRevision == 0 && rev.Revision < current && rev.Outcome != schema.OutcomeFailed && rev.Outcome != schema.OutcomeRolledBack {
			target = rev
			break
		}
	}
	switch {
	case target == nil && req.ToRevision > 0:
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("revision %d of deployment %q not found", req.ToRevision, dep.Metadata.Name), nil)
		return
	case target == nil:
		msg := fmt.Sprintf("deployment %q has no previous revision to roll back to", dep.Metadata.Name)
		writeStatus(w, http.StatusBadRequest, "Invalid", msg, []schema.FieldError{{Field: "toRevision", Message: msg}})
		return
	}
	res := schema.RollbackResponse{FromRevision: current, ToRevision: target.Revision, DryRun: r.URL.Query().Get("dryRun") == "server"}
	if schema.SameTemplate(dep.Spec.Template, target.Template) {
		res.Deployment, res.Unchanged = *clone(dep), true
		writeJSON(w, http.StatusOK, res)
		return
	}
	if res.DryRun {
		res.Deployment = *clone(dep)
		res.Deployment.Spec.Template = target.Template
		writeJSON(w, http.StatusOK, res)
		return
	}
	for i := range revs {
		if revs[i].Revision == current && revs[i].Outcome != schema.OutcomeFailed {
			revs[i].Outcome = schema.OutcomeRolledBack
		}
	}
	d := clone(dep)
	d.Spec.Template = target.Template
	d.Metadata.Generation++
	h.recordRevision(d)
	h.deployments[d.Metadata.Name] = d
	h.record("deployments", schema.WatchModified, d)
	res.Deployment = *clone(d)
	writeJSON(w, http.StatusOK, res)
}
