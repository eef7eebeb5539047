// Package storetest is the store's conformance suite: every guarantee the
// hub relies on (hub/store/doc.go), checked the same way on every engine
// the store runs on. storetest_test.go runs it against Badger on disk and
// against a real 3-member etcd cluster (test/etcdtest).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Backend is one engine's data, fresh for one test.
type Backend struct {
	// Open opens the store on this backend's data; after Close, Open again
	// sees the same data. It fills in the engine's part of opts (Dir, or
	// Etcd) and keeps the rest.
	Open func(t *testing.T, opts store.Options) (*store.Store, error)
	// AtRest are the directories whose files hold the engine's data on
	// disk (Badger's directory; every etcd member's data directory), read
	// raw to check what is stored in clear.
	AtRest []string
	// Disrupt, if set, kills part of the engine while the store is in use
	// (an etcd member, with SIGKILL) and returns a function that brings it
	// back. It is called more than once in a test.
	Disrupt func(t *testing.T) (restore func())
}

// NewBackend makes fresh data for one test.
type NewBackend func(t *testing.T) Backend

// Run checks every guarantee on backends made by nb.
func Run(t *testing.T, nb NewBackend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"CreateUpdateDeleteWithResourceVersion", testCRUD},
		{"StaleResourceVersionConflicts", testConflict},
		{"RevisionStrictlyIncreasingStoreWide", testRevisionOrder},
		{"ListConsistentAtOneRevision", testListConsistent},
		{"WatchFromRevisionEveryChangeOnceInOrder", testWatchResume},
		{"WatchFromTooOldRevisionExpired", testWatchExpired},
		{"TransactionsAllOrNothing", testAllOrNothing},
		{"ReopenKeepsEverything", testDurable},
		{"SecretsEncryptedAtRest", testSecretsAtRest},
		{"TokensHashed", testTokensHashed},
		{"ConcurrentWriters", testConcurrentWriters},
		{"DisruptionLosesNoAcknowledgedWrite", testDisruption},
		{"ListFromAfterName", testListFrom},
		{"RegisterDevicesWithTokens", testRegisterDevices},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, nb(t)) })
	}
}

// open opens b and closes the store when the test ends.
func open(t *testing.T, b Backend, opts store.Options) *store.Store {
	t.Helper()
	if opts.GCInterval == 0 {
		opts.GCInterval = -1
	}
	s, err := b.Open(t, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Deployment is a minimal valid Deployment.
func Deployment(name, image string) *schema.Deployment {
	return &schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: name},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: map[string]string{"site": "a"}},
			Template: schema.PodTemplate{Spec: schema.PodSpec{
				Containers: []schema.Container{{Name: "app", Image: image}},
			}},
		},
	}
}

// Device is a minimal valid Device.
func Device(name string) *schema.Device {
	return &schema.Device{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
		Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{"site": "a"}},
	}
}

func rv(t *testing.T, o schema.Object) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(o.GetMetadata().ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", o.GetMetadata().ResourceVersion, err)
	}
	return n
}

func testCRUD(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	created, err := s.Create(ctx, Deployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	r1 := rv(t, created)
	if _, err := s.Create(ctx, Deployment("web", "nginx:1"), false); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second Create: %v, want ErrAlreadyExists", err)
	}
	upd := Deployment("web", "nginx:2")
	upd.Metadata.ResourceVersion = created.GetMetadata().ResourceVersion
	updated, err := s.Update(ctx, upd, false)
	if err != nil {
		t.Fatal(err)
	}
	if r2 := rv(t, updated); r2 <= r1 || updated.GetMetadata().Generation != created.GetMetadata().Generation+1 {
		t.Fatalf("update: rv %d after %d, generation %d after %d", r2, r1, updated.GetMetadata().Generation, created.GetMetadata().Generation)
	}
	got, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil || got.(*schema.Deployment).Spec.Template.Spec.Containers[0].Image != "nginx:2" || got.GetMetadata().ResourceVersion != updated.GetMetadata().ResourceVersion {
		t.Fatalf("Get after update: %+v, %v", got, err)
	}
	deleted, err := s.Delete(ctx, schema.KindDeployment, "web", updated.GetMetadata().ResourceVersion, false)
	if err != nil {
		t.Fatal(err)
	}
	if rv(t, deleted) <= rv(t, updated) {
		t.Fatalf("delete rv %s not after %s", deleted.GetMetadata().ResourceVersion, updated.GetMetadata().ResourceVersion)
	}
	if _, err := s.Get(ctx, schema.KindDeployment, "web"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Delete(ctx, schema.KindDeployment, "web", "", false); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
}

func testConflict(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	created, err := s.Create(ctx, Deployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, Deployment("web", "nginx:2"), false); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Revision(ctx)
	stale := Deployment("web", "nginx:3")
	stale.Metadata.ResourceVersion = created.GetMetadata().ResourceVersion
	if _, err := s.Update(ctx, stale, false); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update with a stale resourceVersion: %v, want ErrConflict", err)
	}
	if _, err := s.Delete(ctx, schema.KindDeployment, "web", created.GetMetadata().ResourceVersion, false); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete with a stale resourceVersion: %v, want ErrConflict", err)
	}
	after, _ := s.Revision(ctx)
	got, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil || after != before || got.(*schema.Deployment).Spec.Template.Spec.Containers[0].Image != "nginx:2" {
		t.Fatalf("a refused write changed the store: revision %d → %d, %+v, %v", before, after, got, err)
	}
}

func testRevisionOrder(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	var last uint64
	check := func(o schema.Object, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r := rv(t, o); r <= last {
			t.Fatalf("%s/%s: resourceVersion %d after %d", o.GetTypeMeta().Kind, o.GetMetadata().Name, r, last)
		} else {
			last = r
		}
	}
	for i := range 5 {
		check(s.Create(ctx, Device(fmt.Sprintf("d%d", i)), false))
		check(s.Create(ctx, Deployment(fmt.Sprintf("w%d", i), "nginx:1"), false))
		check(s.Update(ctx, Deployment(fmt.Sprintf("w%d", i), "nginx:2"), false))
	}
	check(s.Delete(ctx, schema.KindDevice, "d0", "", false))
	if rev, err := s.Revision(ctx); err != nil || rev != last {
		t.Fatalf("Revision = %d, %v; last write %d", rev, err, last)
	}
	// A write that changes nothing takes no revision.
	if _, _, err := s.Apply(ctx, Deployment("w1", "nginx:2"), false); err != nil {
		t.Fatal(err)
	}
	if rev, _ := s.Revision(ctx); rev != last {
		t.Fatalf("an unchanged apply moved the revision %d → %d", last, rev)
	}
}

// testListConsistent: while a writer creates devices in order, every list
// holds a prefix of them, and none newer than the list's revision.
func testListConsistent(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	const n = 60
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := s.Create(ctx, Device(fmt.Sprintf("d%03d", i)), false); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	lists := 0
	for finished := false; !finished; lists++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		objs, rev, err := s.List(ctx, schema.KindDevice, nil)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, o := range objs {
			have[o.GetMetadata().Name] = true
			if rv(t, o) > rev {
				t.Fatalf("list at revision %d holds %s at %s", rev, o.GetMetadata().Name, o.GetMetadata().ResourceVersion)
			}
		}
		for i := range len(objs) {
			if !have[fmt.Sprintf("d%03d", i)] {
				t.Fatalf("list at revision %d holds %d devices but not d%03d: not one snapshot", rev, len(objs), i)
			}
		}
		if finished && len(objs) != n {
			t.Fatalf("final list holds %d devices, want %d", len(objs), n)
		}
	}
	t.Logf("%d lists during %d creates", lists, n)
}

func testWatchResume(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	from, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := range 6 {
		o, err := s.Create(ctx, Deployment(fmt.Sprintf("w%d", i), "nginx:1"), false)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rv(t, o))
	}
	// Resume from the middle: only what came after, then live changes.
	mid := want[2]
	ch, err := s.Watch(ctx, schema.KindDeployment, mid)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Delete(ctx, schema.KindDeployment, "w0", "", false)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, rv(t, o))
	expect := want[3:]
	for i, w := range expect {
		select {
		case ev, ok := <-ch:
			if !ok || ev.Type == store.EventError {
				t.Fatalf("watch ended after %d events: %+v", i, ev)
			}
			if ev.Revision != w {
				t.Fatalf("event %d at revision %d, want %d (from %d)", i, ev.Revision, w, mid)
			}
		case <-ctx.Done():
			t.Fatalf("waited for event %d (revision %d)", i, w)
		}
	}
	// Exactly once: a write of another kind goes by, nothing else comes.
	if _, err := s.Create(ctx, Device("d"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, Deployment("last", "nginx:1"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Name != "last" {
			t.Fatalf("after the expected events: %s %s at %d, want ADDED last", ev.Type, ev.Name, ev.Revision)
		}
	case <-ctx.Done():
		t.Fatal("no event for the last deployment")
	}
	// From the start: every change.
	all, err := s.Watch(ctx, "", from)
	if err != nil {
		t.Fatal(err)
	}
	var prev uint64
	for range len(want) + 2 {
		ev := <-all
		if ev.Revision <= prev {
			t.Fatalf("watch from %d: revision %d after %d", from, ev.Revision, prev)
		}
		prev = ev.Revision
	}
}

func testWatchExpired(t *testing.T, b Backend) {
	s := open(t, b, store.Options{WatchRing: 4})
	ctx := ctxT(t)
	first, err := s.Create(ctx, Deployment("w", "nginx:0"), false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := s.Update(ctx, Deployment("w", fmt.Sprintf("nginx:%d", i+1)), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Watch(ctx, "", rv(t, first)-1); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("watch from a revision the store no longer reaches: %v, want ErrExpired", err)
	}
	rev, _ := s.Revision(ctx)
	if _, err := s.Watch(ctx, "", rev); err != nil {
		t.Fatalf("watch from the current revision: %v", err)
	}
}

func testAllOrNothing(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	before, _ := s.Revision(ctx)
	bad := Deployment("bad", "")
	bad.Spec.Template.Spec.Containers = nil
	_, err := s.ApplyAll(ctx, []schema.Object{Deployment("a", "nginx:1"), Device("d1"), bad}, false)
	if err == nil {
		t.Fatal("ApplyAll with an invalid object succeeded")
	}
	if _, err := s.Get(ctx, schema.KindDeployment, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed ApplyAll left deployment a: %v", err)
	}
	boom := errors.New("boom")
	_, err = s.Write(ctx, func(tx *store.Txn) error {
		if _, err := tx.GetObject(schema.KindDevice, "nope"); !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := tx.Set(store.RolloutKey("x"), []byte("{}")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want boom", err)
	}
	if after, _ := s.Revision(ctx); after != before {
		t.Fatalf("failed transactions moved the revision %d → %d", before, after)
	}
	err = s.View(ctx, func(tx *store.Txn) error {
		_, err := tx.Get(store.RolloutKey("x"))
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an aborted Write left its key: %v", err)
	}
	res, err := s.ApplyAll(ctx, []schema.Object{Deployment("a", "nginx:1"), Device("d1")}, false)
	if err != nil || len(res) != 2 || res[0].Object.GetMetadata().ResourceVersion != res[1].Object.GetMetadata().ResourceVersion {
		t.Fatalf("ApplyAll: %+v, %v (want one revision for both)", res, err)
	}
}

func testDurable(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	dep, err := s.Create(ctx, Deployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, Device("d1"), false); err != nil {
		t.Fatal(err)
	}
	tok, err := s.IssueToken(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := s.IssueCredential(ctx, "ops", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, secret("creds", "durable-value"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(ctx, schema.AuditEntry{Actor: "ops", Action: "apply"}); err != nil {
		t.Fatal(err)
	}
	rev, _ := s.Revision(ctx)
	id := s.ID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, b, store.Options{})
	if s.ID() != id {
		t.Fatalf("store ID %s after reopen, was %s", s.ID(), id)
	}
	if r, _ := s.Revision(ctx); r != rev {
		t.Fatalf("revision %d after reopen, was %d", r, rev)
	}
	got, err := s.Get(ctx, schema.KindDeployment, "web")
	if err != nil || got.GetMetadata().ResourceVersion != dep.GetMetadata().ResourceVersion || got.GetMetadata().UID != dep.GetMetadata().UID {
		t.Fatalf("deployment after reopen: %+v, %v", got, err)
	}
	if !s.VerifyToken("d1", tok) {
		t.Fatal("device token not valid after reopen")
	}
	if role, ok := s.VerifyCredential("ops", cred); !ok || role != "admin" {
		t.Fatalf("credential after reopen: %q %v", role, ok)
	}
	var val string
	err = s.View(ctx, func(tx *store.Txn) error {
		sec, err := tx.GetSecretData("creds")
		if err == nil {
			val = string(sec.Data["v"])
		}
		return err
	})
	if err != nil || val != "durable-value" {
		t.Fatalf("secret after reopen: %q, %v", val, err)
	}
	entries, err := s.Audit(ctx, store.AuditQuery{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("audit after reopen: %+v, %v", entries, err)
	}
	if v, err := s.VerifyAudit(ctx); err != nil || !v.OK {
		t.Fatalf("audit chain after reopen: %+v, %v", v, err)
	}
}
