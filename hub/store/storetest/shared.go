package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// The part of the suite for engines that several hubs share (etcd): two
// stores, each with its own hub data directory (the same Secrets key), on
// one cluster and one prefix, must behave as one store seen from two
// places.

// SharedBackend is one engine's data that two hubs open at once.
type SharedBackend struct {
	// Open opens the store of hub 0 or hub 1 on the same data; opts as in
	// Backend.Open. Hub 1 is opened after hub 0 (it needs its Secrets
	// key file).
	Open func(t *testing.T, hub int, opts store.Options) (*store.Store, error)
}

// NewSharedBackend makes fresh shared data for one test.
type NewSharedBackend func(t *testing.T) SharedBackend

// RunShared checks, on two stores over one backend, that each sees the
// other's writes: watches, lists, conflicts, tokens and devices.
func RunShared(t *testing.T, nb NewSharedBackend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b *store.Store)
	}{
		{"WritesThroughBothWatchOnEachSeesAllInOneOrder", testSharedWatchOrder},
		{"ListOnOneAtRevisionThenWatchMissesNothing", testSharedList},
		{"StaleWriteAcrossStoresConflicts", testSharedConflict},
		{"TokenOnOneAuthenticatesOnOther", testSharedTokens},
		{"DeletedDeviceOnOneRefusedOnOther", testSharedDeletedDevice},
		{"AuditAppendsThroughBothKeepOneChain", testSharedAudit},
		{"CommitOnOneToWatchEventOnOtherLatency", testSharedLatency},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := nb(t)
			a := openShared(t, sb, 0)
			b := openShared(t, sb, 1)
			tc.fn(t, a, b)
		})
	}
}

func openShared(t *testing.T, sb SharedBackend, hub int) *store.Store {
	t.Helper()
	s, err := sb.Open(t, hub, store.Options{GCInterval: -1})
	if err != nil {
		t.Fatalf("open store of hub %d: %v", hub, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// seen is one event as a watcher got it, comparable across stores.
type seen struct {
	Type     store.EventType
	Kind     string
	Name     string
	Revision uint64
	Object   string
}

// collect reads n object events from ch.
func collect(t *testing.T, what string, ch <-chan store.Event, n int, deadline time.Duration) []seen {
	t.Helper()
	timeout := time.After(deadline)
	out := make([]seen, 0, n)
	for len(out) < n {
		select {
		case ev, ok := <-ch:
			if !ok || ev.Type == store.EventError {
				t.Fatalf("%s: watch ended after %d of %d events: %+v", what, len(out), n, ev)
			}
			if ev.Type == store.EventBookmark {
				continue
			}
			out = append(out, seen{ev.Type, ev.Kind, ev.Name, ev.Revision, string(ev.Object)})
		case <-timeout:
			t.Fatalf("%s: %d of %d events within %s", what, len(out), n, deadline)
		}
	}
	return out
}

func testSharedWatchOrder(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	from, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wa, err := a.Watch(ctx, "", from)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.Watch(ctx, "", from)
	if err != nil {
		t.Fatal(err)
	}
	// Each store creates, updates and deletes its own objects; both write
	// at once.
	const perStore = 20
	var mu sync.Mutex
	acked := map[uint64]string{} // revision → what was written
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range []*store.Store{a, b} {
		wg.Go(func() {
			for n := range perStore {
				name := fmt.Sprintf("s%d-%d", i, n)
				o, err := s.Create(ctx, Deployment(name, "nginx:1"), false)
				if err == nil {
					mu.Lock()
					acked[rvOf(o)] = "ADDED " + name
					mu.Unlock()
					o, err = s.Update(ctx, Deployment(name, "nginx:2"), false)
				}
				if err == nil {
					mu.Lock()
					acked[rvOf(o)] = "MODIFIED " + name
					mu.Unlock()
				}
				if err == nil && n%2 == 0 {
					o, err = s.Delete(ctx, schema.KindDeployment, name, "", false)
					if err == nil {
						mu.Lock()
						acked[rvOf(o)] = "DELETED " + name
						mu.Unlock()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("store %d, %s: %w", i, name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := len(acked)
	if total != 2*perStore*2+perStore {
		t.Fatalf("%d distinct revisions acknowledged, want %d: two writes got one revision", total, 2*perStore*2+perStore)
	}
	ea := collect(t, "watch on store 0", wa, total, time.Minute)
	eb := collect(t, "watch on store 1", wb, total, time.Minute)
	if !slices.Equal(ea, eb) {
		for i := range ea {
			if ea[i] != eb[i] {
				t.Fatalf("event %d differs: store 0 saw %s %s at %d, store 1 %s %s at %d", i, ea[i].Type, ea[i].Name, ea[i].Revision, eb[i].Type, eb[i].Name, eb[i].Revision)
			}
		}
	}
	var last uint64
	for i, ev := range ea {
		if ev.Revision <= last {
			t.Fatalf("event %d at revision %d after %d: not in order", i, ev.Revision, last)
		}
		last = ev.Revision
		if want := acked[ev.Revision]; want != string(ev.Type)+" "+ev.Name {
			t.Fatalf("event %d: %s %s at revision %d, but that write was %q", i, ev.Type, ev.Name, ev.Revision, want)
		}
		if got := rvInJSON(t, ev.Object); got != ev.Revision {
			t.Fatalf("event %d: object carries resourceVersion %d, event revision %d", i, got, ev.Revision)
		}
	}
	// Exactly once: nothing more comes on either.
	if _, err := a.Create(ctx, Device("after"), false); err != nil {
		t.Fatal(err)
	}
	for i, ch := range []<-chan store.Event{wa, wb} {
		if ev := collect(t, "last event", ch, 1, 30*time.Second)[0]; ev.Name != "after" {
			t.Fatalf("store %d: after every expected event came %s %s at %d, want ADDED after", i, ev.Type, ev.Name, ev.Revision)
		}
	}
}

func rvOf(o schema.Object) uint64 {
	var n uint64
	_, _ = fmt.Sscan(o.GetMetadata().ResourceVersion, &n)
	return n
}

func rvInJSON(t *testing.T, raw string) uint64 {
	t.Helper()
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("event object %s: %v", raw, err)
	}
	var n uint64
	_, _ = fmt.Sscan(m.Metadata.ResourceVersion, &n)
	return n
}

func testSharedList(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	var last schema.Object
	for i := range 5 {
		o, err := a.Create(ctx, Deployment(fmt.Sprintf("l%d", i), "nginx:1"), false)
		if err != nil {
			t.Fatal(err)
		}
		last = o
	}
	// Right after store 0 acknowledged, store 1 lists everything, at a
	// revision that includes it.
	objs, rev, err := b.List(ctx, schema.KindDeployment, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 || rev < rvOf(last) {
		t.Fatalf("store 1 lists %d deployments at revision %d, want 5 at %d or later", len(objs), rev, rvOf(last))
	}
	objsA, revA, err := a.List(ctx, schema.KindDeployment, nil)
	if err != nil {
		t.Fatal(err)
	}
	if revA != rev || !sameList(objs, objsA) {
		t.Fatalf("the two stores list differently: at %d and %d", rev, revA)
	}
	// A watch on store 1 from its list's revision sees every later change
	// made through store 0, and nothing from before.
	ch, err := b.Watch(ctx, schema.KindDeployment, rev)
	if err != nil {
		t.Fatalf("watch on store 1 from its list's revision %d: %v", rev, err)
	}
	o, err := a.Update(ctx, Deployment("l0", "nginx:2"), false)
	if err != nil {
		t.Fatal(err)
	}
	ev := collect(t, "watch on store 1", ch, 1, 30*time.Second)[0]
	if ev.Name != "l0" || ev.Type != store.EventModified || ev.Revision != rvOf(o) {
		t.Fatalf("store 1 saw %s %s at %d, want MODIFIED l0 at %d", ev.Type, ev.Name, ev.Revision, rvOf(o))
	}
	// A watch from a revision store 0 just made, asked of store 1 at once,
	// is not "from the future".
	o, err = a.Update(ctx, Deployment("l1", "nginx:2"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Watch(ctx, "", rvOf(o)); err != nil {
		t.Fatalf("watch on store 1 from store 0's newest revision %d: %v", rvOf(o), err)
	}
	if _, err := b.Watch(ctx, "", rvOf(o)+1000); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("watch from a revision nobody made: %v, want ErrExpired", err)
	}
}

func sameList(a, b []schema.Object) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ja, _ := json.Marshal(a[i])
		jb, _ := json.Marshal(b[i])
		if !bytes.Equal(ja, jb) {
			return false
		}
	}
	return true
}

func testSharedConflict(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	o, err := a.Create(ctx, Deployment("c", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	stale := Deployment("c", "nginx:3")
	stale.Metadata.ResourceVersion = o.GetMetadata().ResourceVersion
	fresh := Deployment("c", "nginx:2")
	fresh.Metadata.ResourceVersion = o.GetMetadata().ResourceVersion
	if _, err := b.Update(ctx, fresh, false); err != nil {
		t.Fatalf("update through store 1 with the current resourceVersion: %v", err)
	}
	if _, err := a.Update(ctx, stale, false); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update through store 0 with the resourceVersion store 1 replaced: %v, want ErrConflict", err)
	}
	if _, err := a.Delete(ctx, schema.KindDeployment, "c", o.GetMetadata().ResourceVersion, false); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete through store 0 with a stale resourceVersion: %v, want ErrConflict", err)
	}
	// The same name created through both at once: one wins, the other is
	// told it exists.
	for round := range 10 {
		name := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		res := make([]error, 2)
		for i, s := range []*store.Store{a, b} {
			wg.Go(func() { _, res[i] = s.Create(ctx, Device(name), false) })
		}
		wg.Wait()
		ok := 0
		for i, err := range res {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, store.ErrAlreadyExists):
				t.Fatalf("round %d, store %d: %v, want success or ErrAlreadyExists", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d creates of one name succeeded, want 1 (%v)", round, ok, res)
		}
	}
	// Read-modify-writes through both never lose one.
	if _, err := a.Create(ctx, Device("counter"), false); err != nil {
		t.Fatal(err)
	}
	const each = 15
	var wg sync.WaitGroup
	for i, s := range []*store.Store{a, b} {
		wg.Go(func() {
			for n := range each {
				_, err := s.Mutate(ctx, schema.KindDevice, "counter", func(o schema.Object) error {
					md := o.GetMetadata()
					md.Labels[fmt.Sprintf("s%d-%d", i, n)] = "x"
					return nil
				})
				if err != nil {
					t.Errorf("mutate through store %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := b.Get(ctx, schema.KindDevice, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.GetMetadata().Labels); n < 2*each {
		t.Fatalf("after %d read-modify-writes through two stores the device has %d labels: updates were lost", 2*each, n)
	}
}

// within polls cond until it holds or d passes, and returns how long it
// took.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(200 * time.Microsecond) // polling a condition, with a deadline
	}
	return time.Since(start)
}

func testSharedTokens(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	changed := make(chan string, 16)
	b.OnAuthChange(func(kind store.AuthChangeKind, name string) {
		if kind == store.AuthDevice {
			changed <- name
		}
	})
	if _, err := a.Create(ctx, Device("tok"), false); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	var seenIn, refusedIn []time.Duration
	var prev string
	for i := range rounds {
		tok, err := a.IssueToken(ctx, "tok")
		if err != nil {
			t.Fatal(err)
		}
		seenIn = append(seenIn, within(t, 10*time.Second, "token issued through store 0 accepted by store 1", func() bool { return b.VerifyToken("tok", tok) }))
		if prev != "" {
			refusedIn = append(refusedIn, within(t, 10*time.Second, "replaced token refused by store 1", func() bool { return !b.VerifyToken("tok", prev) }))
			select {
			case name := <-changed:
				if name != "tok" {
					t.Fatalf("store 1 reported a change of %q, want tok", name)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: store 1 did not report the replaced token", i)
			}
		}
		prev = tok
	}
	cred, err := a.CreateCredential(ctx, "ops", store.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "credential created through store 0 authenticates on store 1", func() bool {
		c, ok := b.Authenticate(cred)
		return ok && c.Name == "ops" && c.Role == store.RoleViewer
	})
	if err := a.DeleteCredential(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "credential deleted through store 0 refused by store 1", func() bool {
		_, ok := b.Authenticate(cred)
		return !ok && !b.HasCredential("ops")
	})
	t.Logf("token issued on one store accepted on the other after p50 %s, max %s; replaced token refused after p50 %s, max %s (%d rounds)",
		quantile(seenIn, 0.5), quantile(seenIn, 1), quantile(refusedIn, 0.5), quantile(refusedIn, 1), rounds)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q * float64(len(s)-1))
	return s[i]
}

func testSharedDeletedDevice(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	if _, err := a.Create(ctx, Device("gone"), false); err != nil {
		t.Fatal(err)
	}
	tok, err := a.IssueToken(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "token accepted by store 1", func() bool { return b.VerifyToken("gone", tok) })
	// Store 1 checks the device in a write, as the status ingest does:
	// first it exists, once store 0 deleted it, it does not (at once: the
	// transaction reads etcd), and its token is refused.
	checkUID := func() (bool, error) {
		var found bool
		_, err := b.Write(ctx, func(tx *store.Txn) error {
			_, found = tx.DeviceUID("gone")
			return nil
		})
		return found, err
	}
	if found, err := checkUID(); err != nil || !found {
		t.Fatalf("store 1 before the delete: found %v, %v", found, err)
	}
	if _, err := a.Delete(ctx, schema.KindDevice, "gone", "", false); err != nil {
		t.Fatal(err)
	}
	if found, err := checkUID(); err != nil || found {
		t.Fatalf("store 1 right after store 0 deleted the device: found %v, %v; want not found", found, err)
	}
	if _, err := b.IssueToken(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("store 1 issues a token for the deleted device: %v, want ErrNotFound", err)
	}
	within(t, 10*time.Second, "the deleted device's token refused by store 1", func() bool { return !b.VerifyToken("gone", tok) })
	// A write through store 1 that depends on the device, racing store
	// 0's delete, never lands for a device that is gone.
	if _, err := a.Create(ctx, Device("gone"), false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var wrote bool
	wg.Go(func() {
		_, err := b.Write(ctx, func(tx *store.Txn) error {
			wrote = false
			if _, ok := tx.DeviceUID("gone"); !ok {
				return nil
			}
			wrote = true
			return tx.Set(store.StatusKey("gone"), []byte(`{"device":"gone"}`))
		})
		if err != nil {
			t.Errorf("status write through store 1: %v", err)
		}
	})
	if _, err := a.Delete(ctx, schema.KindDevice, "gone", "", false); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var status bool
	err = a.View(ctx, func(tx *store.Txn) error {
		_, err := tx.Get(store.StatusKey("gone"))
		status = err == nil
		if _, ok := tx.DeviceUID("gone"); ok {
			return errors.New("the device is back")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if status {
		t.Fatalf("a status of the deleted device is stored (store 1 wrote it: %v)", wrote)
	}
}

func testSharedAudit(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	const each = 15
	var wg sync.WaitGroup
	for i, s := range []*store.Store{a, b} {
		wg.Go(func() {
			for n := range each {
				if _, err := s.AppendAudit(ctx, schema.AuditEntry{Actor: fmt.Sprintf("hub%d", i), Action: "apply", Object: fmt.Sprint(n), Result: "ok"}); err != nil {
					t.Errorf("audit through store %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	entries, err := a.Audit(ctx, store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2*each {
		t.Fatalf("%d audit entries after %d appends through two stores: entries were overwritten", len(entries), 2*each)
	}
	for i, s := range []*store.Store{a, b} {
		v, err := s.VerifyAudit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !v.OK || v.Entries != 2*each {
			t.Fatalf("store %d: audit chain %+v, want one unbroken chain of %d", i, v, 2*each)
		}
	}
}

func testSharedLatency(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	n := 1000
	if testing.Short() {
		n = 100
	}
	from, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := b.Watch(ctx, schema.KindDeployment, from)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, Deployment("lat", "nginx:0"), false); err != nil {
		t.Fatal(err)
	}
	collect(t, "first event", ch, 1, 30*time.Second)
	fromStart := make([]time.Duration, 0, n)
	fromAck := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		o, err := a.Update(ctx, Deployment("lat", fmt.Sprintf("nginx:%d", i+1)), false)
		acked := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		ev := collect(t, "watch on store 1", ch, 1, 30*time.Second)[0]
		got := time.Now()
		if ev.Revision != rvOf(o) {
			t.Fatalf("update %d: store 1 saw revision %d, want %d", i, ev.Revision, rvOf(o))
		}
		fromStart = append(fromStart, got.Sub(start))
		fromAck = append(fromAck, max(0, got.Sub(acked)))
	}
	t.Logf("commit through store 0 → its watch event on store 1, over %d updates: from the write's start p50 %s p99 %s max %s; after the write returned p50 %s p99 %s max %s",
		n, quantile(fromStart, 0.5), quantile(fromStart, 0.99), quantile(fromStart, 1),
		quantile(fromAck, 0.5), quantile(fromAck, 0.99), quantile(fromAck, 1))
}
