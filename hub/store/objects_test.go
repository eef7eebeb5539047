package store

import (
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestApplyGenerationAndResourceVersion(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)

	type step struct {
		name       string
		mutate     func(d *schema.Deployment)
		wantAction string
		wantGen    int64
		wantWrite  bool
	}
	steps := []step{
		{"create", func(*schema.Deployment) {}, schema.ActionCreated, 1, true},
		{"same again", func(*schema.Deployment) {}, schema.ActionUnchanged, 1, false},
		{"explicit defaults are the same", func(d *schema.Deployment) {
			d.Spec.Template.Spec.RestartPolicy = schema.RestartAlways
			d.Spec.Strategy.Type = schema.StrategyAllAtOnce
		}, schema.ActionUnchanged, 1, false},
		{"label only", func(d *schema.Deployment) { d.Metadata.Labels = map[string]string{"team": "x"} }, schema.ActionConfigured, 1, true},
		{"annotation only", func(d *schema.Deployment) {
			d.Metadata.Labels = map[string]string{"team": "x"}
			d.Metadata.Annotations = map[string]string{"note": "hi"}
		}, schema.ActionConfigured, 1, true},
		{"spec change", func(d *schema.Deployment) {
			d.Metadata.Labels = map[string]string{"team": "x"}
			d.Metadata.Annotations = map[string]string{"note": "hi"}
			d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
		}, schema.ActionConfigured, 2, true},
		{"spec change again", func(d *schema.Deployment) {
			d.Metadata.Labels = map[string]string{"team": "x"}
			d.Metadata.Annotations = map[string]string{"note": "hi"}
			d.Spec.Template.Spec.Containers[0].Image = "nginx:3"
		}, schema.ActionConfigured, 3, true},
		{"hub fields sent by a client are ignored", func(d *schema.Deployment) {
			d.Metadata.Labels = map[string]string{"team": "x"}
			d.Metadata.Annotations = map[string]string{"note": "hi"}
			d.Spec.Template.Spec.Containers[0].Image = "nginx:3"
			d.Metadata.UID = "forged"
			d.Metadata.Generation = 99
			d.Status = &schema.DeploymentStatus{Targeted: 5}
		}, schema.ActionUnchanged, 3, false},
	}
	var uid string
	lastRV := ""
	for _, st := range steps {
		before := revision(t, s)
		maxVer := s.eng.(*badgerEngine).db.MaxVersion()
		d := newDeployment("web", "nginx:1")
		st.mutate(d)
		got, action, err := s.Apply(ctx, d, false)
		if err != nil {
			t.Fatalf("%s: Apply: %v", st.name, err)
		}
		md := got.GetMetadata()
		if action != st.wantAction {
			t.Errorf("%s: action %q, want %q", st.name, action, st.wantAction)
		}
		if md.Generation != st.wantGen {
			t.Errorf("%s: generation %d, want %d", st.name, md.Generation, st.wantGen)
		}
		after := revision(t, s)
		if st.wantWrite {
			if after != before+1 || md.ResourceVersion != strconv.FormatUint(after, 10) {
				t.Errorf("%s: revision %d -> %d, resourceVersion %s; want one bump", st.name, before, after, md.ResourceVersion)
			}
		} else {
			if after != before || md.ResourceVersion != lastRV || s.eng.(*badgerEngine).db.MaxVersion() != maxVer {
				t.Errorf("%s: wrote something: revision %d -> %d, resourceVersion %s (was %s)", st.name, before, after, md.ResourceVersion, lastRV)
			}
		}
		if uid == "" {
			uid = md.UID
		}
		if md.UID != uid || md.CreationTimestamp == nil {
			t.Errorf("%s: uid %q (want %q), creationTimestamp %v", st.name, md.UID, uid, md.CreationTimestamp)
		}
		// The hub stores only status.revision (here, every spec change
		// is a template change: the revision follows the generation).
		if dep := got.(*schema.Deployment); dep.Status == nil || !reflect.DeepEqual(*dep.Status, schema.DeploymentStatus{Revision: md.Generation}) {
			t.Errorf("%s: status %+v stored, want only revision %d (client-sent status is ignored)", st.name, dep.Status, md.Generation)
		}
		lastRV = md.ResourceVersion
	}
}

func TestApplyDoesNotChangeCallerObject(t *testing.T) {
	s := openTest(t, Options{})
	d := newDeployment("web", "nginx:1")
	if _, _, err := s.Apply(ctxT(t), d, false); err != nil {
		t.Fatal(err)
	}
	if d.Metadata.UID != "" || d.Spec.Template.Spec.RestartPolicy != "" {
		t.Errorf("Apply changed its argument: %+v", d.Metadata)
	}
}

func TestDeviceLabels(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	got, _, err := s.Apply(ctx, newDevice("pi-1", map[string]string{"site": "a"}), false)
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetMetadata().Labels; l[schema.LabelDevice] != "pi-1" || l["site"] != "a" {
		t.Fatalf("labels %v", l)
	}
	// The hub learns the arch from the agent.
	got, err = s.Mutate(ctx, schema.KindDevice, "pi-1", func(o schema.Object) error {
		o.GetMetadata().Labels[schema.LabelArch] = "arm64"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMetadata().Generation != 1 {
		t.Errorf("label change bumped generation to %d", got.GetMetadata().Generation)
	}
	rv := got.GetMetadata().ResourceVersion
	// Re-applying the user's manifest keeps the arch and changes nothing.
	got, action, err := s.Apply(ctx, newDevice("pi-1", map[string]string{"site": "a"}), false)
	if err != nil {
		t.Fatal(err)
	}
	if action != schema.ActionUnchanged || got.GetMetadata().ResourceVersion != rv {
		t.Errorf("action %s rv %s, want unchanged at %s", action, got.GetMetadata().ResourceVersion, rv)
	}
	if got.GetMetadata().Labels[schema.LabelArch] != "arm64" {
		t.Errorf("fleet/arch dropped: %v", got.GetMetadata().Labels)
	}
	// A user label change keeps the hub labels too.
	got, action, err = s.Apply(ctx, newDevice("pi-1", map[string]string{"site": "b"}), false)
	if err != nil {
		t.Fatal(err)
	}
	l := got.GetMetadata().Labels
	if action != schema.ActionConfigured || l[schema.LabelArch] != "arm64" || l[schema.LabelDevice] != "pi-1" || l["site"] != "b" {
		t.Errorf("action %s labels %v", action, l)
	}
	// A mutate that changes nothing writes nothing.
	before := revision(t, s)
	if _, err := s.Mutate(ctx, schema.KindDevice, "pi-1", func(schema.Object) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if after := revision(t, s); after != before {
		t.Errorf("no-op Mutate bumped the revision %d -> %d", before, after)
	}
}

func TestErrors(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	created, err := s.Create(ctx, newDeployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	rv := created.GetMetadata().ResourceVersion
	if _, err := s.Update(ctx, newDeployment("web", "nginx:2"), false); err != nil {
		t.Fatal(err) // no resourceVersion: unconditional
	}
	stale := newDeployment("web", "nginx:3")
	stale.Metadata.ResourceVersion = rv
	missing := newDeployment("nope", "nginx:1")
	missingRV := newDeployment("nope", "nginx:1")
	missingRV.Metadata.ResourceVersion = "1"
	bad := newDeployment("web", "")

	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"create existing", func() error { _, err := s.Create(ctx, newDeployment("web", "x:1"), false); return err }, ErrAlreadyExists},
		{"update stale", func() error { _, err := s.Update(ctx, stale, false); return err }, ErrConflict},
		{"apply stale", func() error { _, _, err := s.Apply(ctx, stale, false); return err }, ErrConflict},
		{"apply with rv of deleted object", func() error { _, _, err := s.Apply(ctx, missingRV, false); return err }, ErrConflict},
		{"update missing", func() error { _, err := s.Update(ctx, missing, false); return err }, ErrNotFound},
		{"get missing", func() error { _, err := s.Get(ctx, schema.KindDeployment, "nope"); return err }, ErrNotFound},
		{"get unknown kind", func() error { _, err := s.Get(ctx, "Pod", "x"); return err }, ErrNotFound},
		{"delete missing", func() error { _, err := s.Delete(ctx, schema.KindDeployment, "nope", "", false); return err }, ErrNotFound},
		{"delete stale", func() error { _, err := s.Delete(ctx, schema.KindDeployment, "web", rv, false); return err }, ErrConflict},
		{"invalid", func() error { _, _, err := s.Apply(ctx, bad, false); return err }, schema.ErrInvalid},
		{"nil object", func() error { _, _, err := s.Apply(ctx, nil, false); return err }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := revision(t, s)
			err := tt.run()
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if after := revision(t, s); after != before {
				t.Errorf("a failed write bumped the revision %d -> %d", before, after)
			}
		})
	}
	var ve *schema.ValidationError
	_, _, err = s.Apply(ctx, bad, false)
	if !errors.As(err, &ve) || len(ve.Errors) == 0 || ve.Errors[0].Field != "spec.template.spec.containers[0].image" {
		t.Errorf("invalid apply: %v, want a ValidationError naming the image", err)
	}
}

func TestConcurrentUpdatesOneWins(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	created, err := s.Create(ctx, newDeployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	rv := created.GetMetadata().ResourceVersion
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			d := newDeployment("web", "nginx:"+strconv.Itoa(i+10))
			d.Metadata.ResourceVersion = rv
			_, errs[i] = s.Update(ctx, d, false)
		})
	}
	wg.Wait()
	wins, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, ErrConflict):
			conflicts++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 || conflicts != n-1 {
		t.Errorf("%d wins and %d conflicts, want 1 and %d", wins, conflicts, n-1)
	}
	got, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil {
		t.Fatal(err)
	}
	if g := got.GetMetadata().Generation; g != 2 {
		t.Errorf("generation %d, want 2", g)
	}
}

func TestDryRun(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	before := revision(t, s)
	got, action, err := s.Apply(ctx, newDeployment("web", "nginx:1"), true)
	if err != nil || action != schema.ActionCreated || got.GetMetadata().Generation != 1 {
		t.Fatalf("dry-run apply: %v %s %+v", err, action, got)
	}
	if _, err := s.Get(ctx, schema.KindDeployment, "web"); !errors.Is(err, ErrNotFound) {
		t.Errorf("dry run stored the object: %v", err)
	}
	if _, err := s.Create(ctx, newDeployment("web", "nginx:1"), true); err != nil {
		t.Fatal(err)
	}
	if after := revision(t, s); after != before {
		t.Errorf("dry run bumped the revision %d -> %d", before, after)
	}
	stored, err := s.Create(ctx, newDeployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	rv := stored.GetMetadata().ResourceVersion
	got, action, err = s.Apply(ctx, newDeployment("web", "nginx:2"), true)
	if err != nil || action != schema.ActionConfigured || got.GetMetadata().Generation != 2 || got.GetMetadata().ResourceVersion != rv {
		t.Fatalf("dry-run change: %v %s %+v", err, action, got.GetMetadata())
	}
	if _, err := s.Delete(ctx, schema.KindDeployment, "web", "", true); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil || cur.GetMetadata().ResourceVersion != rv {
		t.Errorf("after dry runs: %v %+v", err, cur)
	}
}

func TestApplyAllIsAtomic(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	before := revision(t, s)
	_, err := s.ApplyAll(ctx, []schema.Object{newDeployment("a", "nginx:1"), newDeployment("b", "")}, false)
	if !errors.Is(err, schema.ErrInvalid) {
		t.Fatalf("err %v, want invalid", err)
	}
	if _, err := s.Get(ctx, schema.KindDeployment, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("first object stored although the second was invalid")
	}
	_, err = s.ApplyAll(ctx, []schema.Object{newDeployment("a", "nginx:1"), newDeployment("a", "nginx:2")}, false)
	if !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("duplicate objects: %v, want invalid", err)
	}
	if after := revision(t, s); after != before {
		t.Errorf("revision moved %d -> %d", before, after)
	}
	res, err := s.ApplyAll(ctx, []schema.Object{newDeployment("a", "nginx:1"), newDevice("pi", nil)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Object.GetMetadata().ResourceVersion != res[1].Object.GetMetadata().ResourceVersion {
		t.Errorf("one transaction should give one revision: %+v", res)
	}
	if after := revision(t, s); after != before+1 {
		t.Errorf("revision %d -> %d, want one bump", before, after)
	}
}

func TestListSelector(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	for i, site := range []string{"a", "b", "a"} {
		if _, err := s.Create(ctx, newDevice("pi-"+strconv.Itoa(i), map[string]string{"site": site}), false); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		sel  map[string]string
		want int
	}{
		{nil, 3},
		{map[string]string{"site": "a"}, 2},
		{map[string]string{"site": "a", schema.LabelDevice: "pi-2"}, 1},
		{map[string]string{"site": "c"}, 0},
	}
	for _, tt := range tests {
		devs, rev, err := s.ListDevices(ctx, tt.sel)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != tt.want || rev != 3 {
			t.Errorf("selector %v: %d devices at %d, want %d at 3", tt.sel, len(devs), rev, tt.want)
		}
	}
}

func TestDeleteDevice(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	if _, err := s.Create(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	tok, err := s.IssueToken(ctx, "pi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, func(t *Txn) error { return t.Set(StatusKey("pi"), []byte(`{}`)) }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Delete(ctx, schema.KindDevice, "pi", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if rv := got.GetMetadata().ResourceVersion; rv != strconv.FormatUint(revision(t, s), 10) {
		t.Errorf("deleted object rv %s, want the deletion's revision", rv)
	}
	if s.VerifyToken("pi", tok) {
		t.Error("token still valid after the device was deleted")
	}
	err = s.View(ctx, func(t *Txn) error {
		for _, k := range []string{TokenKey("pi"), StatusKey("pi")} {
			if _, err := t.Get(k); !errors.Is(err, ErrNotFound) {
				return errors.New(k + " survived the device")
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
