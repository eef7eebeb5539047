package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// revSummary is "N:image:cause:outcome" of each revision, newest first.
func revSummary(t *testing.T, s *Store, name string) string {
	t.Helper()
	revs, err := s.DeploymentRevisions(t.Context(), name)
	if err != nil {
		t.Fatalf("DeploymentRevisions: %v", err)
	}
	parts := make([]string, len(revs))
	for i, r := range revs {
		if r.Hash != schema.TemplateHash(r.Template) {
			t.Errorf("revision %d: hash %s, want the template's %s", r.Revision, r.Hash, schema.TemplateHash(r.Template))
		}
		parts[i] = fmt.Sprintf("%d:%s:%s:%s", r.Revision, r.Template.Spec.Containers[0].Image, r.ChangeCause, r.Outcome)
	}
	return strings.Join(parts, " ")
}

func storedRevision(t *testing.T, s *Store, name string) int64 {
	t.Helper()
	o, err := s.Get(t.Context(), schema.KindDeployment, name)
	if err != nil {
		t.Fatal(err)
	}
	d := o.(*schema.Deployment)
	if d.Status == nil {
		return 0
	}
	return d.Status.Revision
}

func TestRevisions(t *testing.T) {
	s := openTest(t, Options{})
	ctx := WithActor(ctxT(t), "admin (admin)")
	limit := func(n int32) func(*schema.Deployment) {
		return func(d *schema.Deployment) { d.Spec.RevisionHistoryLimit = &n }
	}
	steps := []struct {
		name    string
		image   string
		mutate  func(*schema.Deployment)
		want    string // revSummary after the step
		wantRev int64  // status.revision
	}{
		{"create", "web:1", nil, "1:web:1:by admin (admin):", 1},
		{"identical re-apply makes no revision", "web:1", nil, "1:web:1:by admin (admin):", 1},
		{"template change", "web:2", func(d *schema.Deployment) {
			d.Metadata.Annotations = map[string]string{schema.AnnotationChangeCause: "bump to 2"}
		}, "2:web:2:bump to 2: 1:web:1:by admin (admin):", 2},
		{"selector change is not a revision", "web:2", func(d *schema.Deployment) {
			d.Metadata.Annotations = map[string]string{schema.AnnotationChangeCause: "bump to 2"}
			d.Spec.Selector.MatchLabels["tier"] = "x"
		}, "2:web:2:bump to 2: 1:web:1:by admin (admin):", 2},
		{"pause is not a revision", "web:2", func(d *schema.Deployment) {
			d.Metadata.Annotations = map[string]string{schema.AnnotationChangeCause: "bump to 2"}
			d.Spec.Paused = true
		}, "2:web:2:bump to 2: 1:web:1:by admin (admin):", 2},
		{"fleet/change-cause", "web:3", func(d *schema.Deployment) {
			d.Metadata.Annotations = map[string]string{schema.AnnotationFleetChangeCause: "three"}
		}, "3:web:3:three: 2:web:2:bump to 2: 1:web:1:by admin (admin):", 3},
		{"an old template is renumbered, not duplicated", "web:1", nil,
			"4:web:1:by admin (admin): 3:web:3:three: 2:web:2:bump to 2:", 4},
		{"template annotations are part of the template", "web:1", func(d *schema.Deployment) {
			d.Spec.Template.Metadata = &schema.TemplateMeta{Annotations: map[string]string{schema.AnnotationRestartedAt: "2025-01-01T00:00:00Z"}}
		}, "5:web:1:by admin (admin): 4:web:1:by admin (admin): 3:web:3:three: 2:web:2:bump to 2:", 5},
		{"a lower limit prunes the oldest without a template change", "web:1", func(d *schema.Deployment) {
			d.Spec.Template.Metadata = &schema.TemplateMeta{Annotations: map[string]string{schema.AnnotationRestartedAt: "2025-01-01T00:00:00Z"}}
			limit(2)(d)
		}, "5:web:1:by admin (admin): 4:web:1:by admin (admin):", 5},
		{"the limit holds on change", "web:6", limit(2), "6:web:6:by admin (admin): 5:web:1:by admin (admin):", 6},
	}
	for _, st := range steps {
		d := newDeployment("web", st.image)
		if st.mutate != nil {
			st.mutate(d)
		}
		if _, _, err := s.Apply(ctx, d, false); err != nil {
			t.Fatalf("%s: apply: %v", st.name, err)
		}
		if got := revSummary(t, s, "web"); got != st.want {
			t.Errorf("%s: revisions\n got  %s\n want %s", st.name, got, st.want)
		}
		if got := storedRevision(t, s, "web"); got != st.wantRev {
			t.Errorf("%s: status.revision %d, want %d", st.name, got, st.wantRev)
		}
	}

	// A dry run stores no revision.
	if _, _, err := s.Apply(ctx, newDeployment("web", "web:7"), true); err != nil {
		t.Fatal(err)
	}
	if got := storedRevision(t, s, "web"); got != 6 {
		t.Errorf("dry run: status.revision %d, want 6", got)
	}

	// Deleting the deployment deletes its revisions; a new one starts at 1.
	if _, err := s.Delete(ctx, schema.KindDeployment, "web", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeploymentRevisions(ctx, "web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revisions of a deleted deployment: %v, want ErrNotFound", err)
	}
	n := 0
	if err := s.View(ctx, func(tx *Txn) error {
		return tx.Scan(prefixRevisions, func(string, []byte) error { n++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d revision keys left after the delete", n)
	}
	if _, _, err := s.Apply(ctx, newDeployment("web", "web:9"), false); err != nil {
		t.Fatal(err)
	}
	if got := revSummary(t, s, "web"); got != "1:web:9:by admin (admin):" {
		t.Errorf("re-created: %s", got)
	}
}

// TestRevisionsOfAStoreWithout: a deployment stored before revisions were
// kept gets its old template recorded as revision 1 on its first change.
func TestRevisionsOfAStoreWithout(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	if _, _, err := s.Apply(ctx, newDeployment("web", "web:1"), false); err != nil {
		t.Fatal(err)
	}
	// Make it look like an old store: no revisions, no status.
	if _, err := s.Write(ctx, func(tx *Txn) error {
		if err := tx.deleteRevisions("web"); err != nil {
			return err
		}
		o, err := tx.GetObject(schema.KindDeployment, "web")
		if err != nil {
			return err
		}
		o.(*schema.Deployment).Status = nil
		return tx.storeObject(o, []byte("{}"))
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, newDeployment("web", "web:2"), false); err != nil {
		t.Fatal(err)
	}
	if got := revSummary(t, s, "web"); got != "2:web:2:: 1:web:1::" {
		t.Errorf("revisions %s, want the old template as 1 and the new one as 2", got)
	}
}

func TestRollback(t *testing.T) {
	s := openTest(t, Options{})
	ctx := WithActor(ctxT(t), "admin (admin)")
	for _, img := range []string{"web:1", "web:2", "web:3"} {
		if _, _, err := s.Apply(ctx, newDeployment("web", img), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetRevisionOutcome(ctx, "web", 2, schema.OutcomeFailed, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRevisionOutcome(ctx, "web", 9, schema.OutcomeFailed, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("outcome of a missing revision: %v, want ErrNotFound", err)
	}
	before, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil {
		t.Fatal(err)
	}

	// Errors first: nothing is written.
	for _, tc := range []struct {
		name    string
		to      int64
		rv      string
		target  string
		wantErr error
		inMsg   string
	}{
		{"missing revision", 7, "", "web", ErrNotFound, "revision 7 of deployment \"web\" not found (it keeps revisions 1, 2, 3)"},
		{"missing deployment", 0, "", "nope", ErrNotFound, "nope"},
		{"stale resourceVersion", 1, "1", "web", ErrConflict, "resourceVersion 1"},
		{"negative", -1, "", "web", schema.ErrInvalid, "toRevision"},
	} {
		_, err := s.Rollback(ctx, tc.target, tc.to, tc.rv, false)
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.inMsg) {
			t.Errorf("%s: %v, want %v containing %q", tc.name, err, tc.wantErr, tc.inMsg)
		}
	}
	if got := revSummary(t, s, "web"); got != "3:web:3:by admin (admin): 2:web:2:by admin (admin):Failed 1:web:1:by admin (admin):" {
		t.Fatalf("after failed rollbacks: %s", got)
	}

	// Undo skips the failed revision 2 and goes to 1.
	res, err := s.Rollback(ctx, "web", 0, before.GetMetadata().ResourceVersion, false)
	if err != nil {
		t.Fatal(err)
	}
	dep := res.Deployment
	if res.From != 3 || res.To != 1 || res.Unchanged || dep.Spec.Template.Spec.Containers[0].Image != "web:1" ||
		dep.Metadata.Generation != before.GetMetadata().Generation+1 || dep.Status.Revision != 4 {
		t.Errorf("undo: %+v, image %s, generation %d, revision %d; want 3 -> 1, web:1, a generation bump, revision 4",
			res, dep.Spec.Template.Spec.Containers[0].Image, dep.Metadata.Generation, dep.Status.Revision)
	}
	want := "4:web:1:rollback to revision 1 by admin (admin): 3:web:3:by admin (admin):RolledBack 2:web:2:by admin (admin):Failed"
	if got := revSummary(t, s, "web"); got != want {
		t.Errorf("after undo:\n got  %s\n want %s", got, want)
	}

	// Every older revision is failed or rolled back: nothing to undo to.
	_, err = s.Rollback(ctx, "web", 0, "", false)
	var ve *schema.ValidationError
	if !errors.As(err, &ve) || ve.Errors[0].Field != "toRevision" || !strings.Contains(err.Error(), "no previous revision") {
		t.Errorf("undo with nothing to go back to: %v, want a ValidationError naming toRevision", err)
	}

	// --to-revision goes exactly there, failed or not.
	res, err = s.Rollback(ctx, "web", 2, "", false)
	if err != nil || res.To != 2 || res.Deployment.Spec.Template.Spec.Containers[0].Image != "web:2" || res.Deployment.Status.Revision != 5 {
		t.Fatalf("rollback to 2: %+v, %v", res, err)
	}
	// To the current template: nothing written.
	rv := revision(t, s)
	res, err = s.Rollback(ctx, "web", 5, "", false)
	if err != nil || !res.Unchanged || revision(t, s) != rv {
		t.Errorf("rollback to the current revision: %+v, %v; store revision %d -> %d; want unchanged, nothing written", res, err, rv, revision(t, s))
	}
	// A dry run writes nothing.
	if _, err := s.Rollback(ctx, "web", 3, "", true); err != nil || revision(t, s) != rv {
		t.Errorf("dry run: %v, store revision %d -> %d", err, rv, revision(t, s))
	}
}
