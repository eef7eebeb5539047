package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Deployment revisions: every change of a Deployment's pod template is
// kept as a numbered schema.DeploymentRevision under
// v1/revisions/{deployment}/{revision, 20 digits}, written in the same
// transaction as the Deployment, so history and object never disagree. The
// Deployment's status.revision (stored with it) is the number of its
// current revision, always the highest one kept.

const prefixRevisions = "v1/revisions/"

// RevisionKey is where revision n of a deployment is kept.
func RevisionKey(deployment string, n int64) string {
	return fmt.Sprintf("%s%s/%020d", prefixRevisions, deployment, n)
}

// revisionPrefix is the prefix of every revision of a deployment.
func revisionPrefix(deployment string) string { return prefixRevisions + deployment + "/" }

type actorKey struct{}

// WithActor returns a context that names who writes through it ("admin
// (admin)"): revisions created by the write record it as their change
// cause when the Deployment has no change-cause annotation. The HTTP API
// sets it from the request's credential.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

func actorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// DeploymentRevisions returns a deployment's revisions, newest first, or an error
// wrapping ErrNotFound when the deployment does not exist.
func (s *Store) DeploymentRevisions(ctx context.Context, deployment string) ([]schema.DeploymentRevision, error) {
	var out []schema.DeploymentRevision
	err := s.View(ctx, func(t *Txn) error {
		if _, err := t.GetObject(schema.KindDeployment, deployment); err != nil {
			return err
		}
		revs, err := t.DeploymentRevisions(deployment)
		slices.Reverse(revs)
		out = revs
		return err
	})
	return out, err
}

// DeploymentRevision returns revision n of a deployment, or an error wrapping
// ErrNotFound that names what is missing.
func (s *Store) DeploymentRevision(ctx context.Context, deployment string, n int64) (*schema.DeploymentRevision, error) {
	var out *schema.DeploymentRevision
	err := s.View(ctx, func(t *Txn) error {
		if _, err := t.GetObject(schema.KindDeployment, deployment); err != nil {
			return err
		}
		var err error
		out, err = t.GetDeploymentRevision(deployment, n)
		return err
	})
	return out, err
}

// SetRevisionOutcome records how revision n of a deployment ended
// (Complete, Failed, RolledBack, or "" for unknown) and why, in one line
// ("" for no reason). It writes nothing when both are already that.
func (s *Store) SetRevisionOutcome(ctx context.Context, deployment string, n int64, outcome schema.RevisionOutcome, reason string) error {
	_, err := s.Write(ctx, func(t *Txn) error {
		r, err := t.GetDeploymentRevision(deployment, n)
		if err != nil {
			return err
		}
		if r.Outcome == outcome && r.Reason == reason {
			return nil
		}
		r.Outcome, r.Reason = outcome, reason
		return t.putRevision(r)
	})
	return err
}

// RollbackResult is what Rollback did.
type RollbackResult struct {
	// Deployment is the deployment as stored after the rollback.
	Deployment *schema.Deployment
	// From is the revision rolled back from, To the one whose template
	// the deployment has now (under its new number, Deployment's
	// status.revision).
	From, To int64
	// Unchanged: the deployment already had that template.
	Unchanged bool
}

// Rollback replaces a deployment's pod template with that of revision
// toRevision, as an ordinary write of the Deployment (its generation is
// bumped, the revision becomes the newest under a new number). toRevision
// 0 means the newest revision before the current one whose outcome is
// neither Failed nor RolledBack. The revision rolled back from is marked
// RolledBack unless it is marked Failed. A non-empty resourceVersion must
// be the deployment's current one (ErrConflict). A missing deployment or
// revision is ErrNotFound; no revision to go back to is schema.ErrInvalid
// naming toRevision.
func (s *Store) Rollback(ctx context.Context, name string, toRevision int64, resourceVersion string, dryRun bool) (RollbackResult, error) {
	var res RollbackResult
	_, err := s.write(ctx, dryRun, func(t *Txn) error {
		t.dryRun = dryRun
		var err error
		res, err = t.rollback(name, toRevision, resourceVersion)
		return err
	})
	return res, err
}

func (t *Txn) rollback(name string, toRevision int64, resourceVersion string) (RollbackResult, error) {
	obj, err := t.GetObject(schema.KindDeployment, name)
	if err != nil {
		return RollbackResult{}, err
	}
	dep := obj.(*schema.Deployment)
	if resourceVersion != "" && resourceVersion != dep.Metadata.ResourceVersion {
		return RollbackResult{}, fmt.Errorf("roll back deployment %q: resourceVersion %s is not the current %s: %w", name, resourceVersion, dep.Metadata.ResourceVersion, ErrConflict)
	}
	revs, err := t.DeploymentRevisions(name)
	if err != nil {
		return RollbackResult{}, err
	}
	var current int64
	if dep.Status != nil {
		current = dep.Status.Revision
	}
	target, err := rollbackTarget(name, revs, current, toRevision)
	if err != nil {
		return RollbackResult{}, err
	}
	res := RollbackResult{From: current, To: target.Revision}
	if schema.SameTemplate(dep.Spec.Template, target.Template) {
		res.Deployment, res.Unchanged = dep, true
		return res, nil
	}
	if cur := revisionOf(revs, current); cur != nil && cur.Outcome != schema.OutcomeFailed && cur.Outcome != schema.OutcomeRolledBack {
		cur.Outcome = schema.OutcomeRolledBack
		if err := t.putRevision(cur); err != nil {
			return RollbackResult{}, err
		}
	}
	t.changeCause = fmt.Sprintf("rollback to revision %d", target.Revision)
	if t.actor != "" {
		t.changeCause += " by " + t.actor
	}
	out, err := t.MutateObject(schema.KindDeployment, name, func(o schema.Object) error {
		o.(*schema.Deployment).Spec.Template = target.Template
		return nil
	})
	if err != nil {
		return RollbackResult{}, err
	}
	res.Deployment = out.(*schema.Deployment)
	return res, nil
}

// rollbackTarget picks the revision a rollback goes to (revs oldest
// first).
func rollbackTarget(name string, revs []schema.DeploymentRevision, current, toRevision int64) (*schema.DeploymentRevision, error) {
	if toRevision < 0 {
		return nil, &schema.ValidationError{Kind: schema.KindDeployment, Name: name, Errors: []schema.FieldError{
			{Field: "toRevision", Message: fmt.Sprintf("%d: must be a revision number (fleet rollout history lists them), or 0 for the previous one", toRevision)},
		}}
	}
	if toRevision > 0 {
		if r := revisionOf(revs, toRevision); r != nil {
			return r, nil
		}
		return nil, fmt.Errorf("revision %d of deployment %q not found (it keeps %s): %w", toRevision, name, keptRevisions(revs), ErrNotFound)
	}
	for i := len(revs) - 1; i >= 0; i-- {
		r := &revs[i]
		if r.Revision < current && r.Outcome != schema.OutcomeFailed && r.Outcome != schema.OutcomeRolledBack {
			return r, nil
		}
	}
	return nil, &schema.ValidationError{Kind: schema.KindDeployment, Name: name, Errors: []schema.FieldError{
		{Field: "toRevision", Message: fmt.Sprintf("deployment %q has no previous revision to roll back to (it keeps %s; failed and rolled-back revisions are skipped)", name, keptRevisions(revs))},
	}}
}

// keptRevisions describes the revision numbers kept: "revisions 3, 4, 5".
func keptRevisions(revs []schema.DeploymentRevision) string {
	switch len(revs) {
	case 0:
		return "no revision"
	case 1:
		return "only revision " + strconv.FormatInt(revs[0].Revision, 10)
	}
	nums := make([]string, len(revs))
	for i, r := range revs {
		nums[i] = strconv.FormatInt(r.Revision, 10)
	}
	return "revisions " + strings.Join(nums, ", ")
}

func revisionOf(revs []schema.DeploymentRevision, n int64) *schema.DeploymentRevision {
	for i := range revs {
		if revs[i].Revision == n {
			return &revs[i]
		}
	}
	return nil
}

// DeploymentRevisions returns a deployment's revisions, oldest first.
func (t *Txn) DeploymentRevisions(deployment string) ([]schema.DeploymentRevision, error) {
	var out []schema.DeploymentRevision
	err := t.Scan(revisionPrefix(deployment), func(key string, val []byte) error {
		var r schema.DeploymentRevision
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("decode stored revision %s: %w", key, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// GetDeploymentRevision returns revision n of a deployment (ErrNotFound naming it).
func (t *Txn) GetDeploymentRevision(deployment string, n int64) (*schema.DeploymentRevision, error) {
	raw, err := t.Get(RevisionKey(deployment, n))
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("revision %d of deployment %q: %w", n, deployment, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var r schema.DeploymentRevision
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode revision %d of deployment %q: %w", n, deployment, err)
	}
	return &r, nil
}

func (t *Txn) putRevision(r *schema.DeploymentRevision) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode revision %d of deployment %q: %w", r.Revision, r.Deployment, err)
	}
	return t.set(RevisionKey(r.Deployment, r.Revision), raw)
}

// objectRevisions runs syncRevisions for a Deployment whose spec is
// written (prev nil when it is new).
func (t *Txn) objectRevisions(obj, prev schema.Object) error {
	d, ok := obj.(*schema.Deployment)
	if !ok {
		return nil
	}
	p, _ := prev.(*schema.Deployment)
	return t.syncRevisions(d, p)
}

// syncRevisions keeps a deployment's revisions in step with a write of it
// (prev is the stored deployment before, nil for a new one): a changed
// template becomes the newest revision (an older revision with the same
// template is renumbered, not duplicated), the oldest beyond
// spec.revisionHistoryLimit are deleted, and d's status.revision is set.
// A deployment stored before revisions existed gets its template recorded
// on its first write.
func (t *Txn) syncRevisions(d, prev *schema.Deployment) error {
	name := d.Metadata.Name
	revs, err := t.DeploymentRevisions(name)
	if err != nil {
		return err
	}
	if len(revs) == 0 || !schema.SameTemplate(revs[len(revs)-1].Template, d.Spec.Template) {
		if len(revs) == 0 && prev != nil && !schema.SameTemplate(prev.Spec.Template, d.Spec.Template) {
			// Stored before revisions were kept: its template is the
			// first revision.
			r := t.newRevision(prev, 1, schema.ChangeCause(prev.Metadata.Annotations))
			if err := t.putRevision(&r); err != nil {
				return err
			}
			revs = append(revs, r)
		}
		next := int64(1)
		if len(revs) > 0 {
			next = revs[len(revs)-1].Revision + 1
		}
		// The same template as an older revision: that revision becomes
		// the newest, under the new number.
		kept := revs[:0]
		for _, r := range revs {
			if schema.SameTemplate(r.Template, d.Spec.Template) {
				if err := t.del(RevisionKey(name, r.Revision)); err != nil {
					return err
				}
				continue
			}
			kept = append(kept, r)
		}
		revs = kept
		cause := t.changeCause
		if cause == "" {
			cause = schema.ChangeCause(d.Metadata.Annotations)
		}
		if cause == "" && t.actor != "" {
			cause = "by " + t.actor
		}
		r := t.newRevision(d, next, cause)
		if err := t.putRevision(&r); err != nil {
			return err
		}
		revs = append(revs, r)
	}
	for limit := d.Spec.HistoryLimit(); len(revs) > limit; revs = revs[1:] {
		if err := t.del(RevisionKey(name, revs[0].Revision)); err != nil {
			return err
		}
	}
	if d.Status == nil {
		d.Status = &schema.DeploymentStatus{}
	}
	d.Status.Revision = revs[len(revs)-1].Revision
	return nil
}

func (t *Txn) newRevision(d *schema.Deployment, n int64, cause string) schema.DeploymentRevision {
	return schema.DeploymentRevision{
		TypeMeta:    schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeploymentRevision},
		Deployment:  d.Metadata.Name,
		Revision:    n,
		Template:    d.Spec.Template,
		Hash:        schema.TemplateHash(d.Spec.Template),
		CreatedAt:   t.s.now().UTC().Truncate(time.Second),
		ChangeCause: cause,
	}
}

// deleteRevisions deletes every revision of a deployment, and the state
// of its staged rollout.
func (t *Txn) deleteRevisions(deployment string) error {
	keys := []string{RolloutKey(deployment)}
	err := t.Scan(revisionPrefix(deployment), func(key string, _ []byte) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := t.del(k); err != nil {
			return err
		}
	}
	return nil
}
