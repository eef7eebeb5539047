package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// recorder is a Publisher that keeps what was published, in order, and the
// retained message of every topic, as a broker would.
type recorder struct {
	mu       sync.Mutex
	msgs     []published
	retained map[string][]byte
	fail     bool
}

type published struct {
	topic   string
	payload []byte
}

func newRecorder() *recorder { return &recorder{retained: map[string][]byte{}} }

func (r *recorder) Publish(_ context.Context, topic string, payload []byte, retained bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return fmt.Errorf("publish %s: broker down", topic)
	}
	r.msgs = append(r.msgs, published{topic, append([]byte(nil), payload...)})
	if retained {
		if len(payload) == 0 {
			delete(r.retained, topic)
		} else {
			r.retained[topic] = append([]byte(nil), payload...)
		}
	}
	return nil
}

func (r *recorder) count(prefix, suffix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if len(m.topic) >= len(prefix)+len(suffix) && m.topic[:len(prefix)] == prefix && m.topic[len(m.topic)-len(suffix):] == suffix {
			n++
		}
	}
	return n
}

func (r *recorder) desired(t *testing.T, device string) *schema.DesiredState {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.retained[schema.Topics{}.Device(device, schema.TopicDesired)]
	if !ok {
		return nil
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatalf("retained desired state of %s: %v", device, err)
	}
	return &ds
}

// fakeStatus is a StatusSource.
type fakeStatus struct {
	mu sync.Mutex
	st map[string]*schema.DeviceStatus
}

func (f *fakeStatus) DeviceState(name, _ string) (*schema.DeviceStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.st[name]
	return s, ok
}

func (f *fakeStatus) set(name string, s *schema.DeviceStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st[name] = s
}

func openStoreB(b *testing.B) *store.Store {
	b.Helper()
	st, err := store.Open(store.Options{Dir: b.TempDir(), GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// runController starts a controller and waits for its first pass.
func runController(t *testing.T, st *store.Store, pub Publisher, status StatusSource) (*Controller, func()) {
	t.Helper()
	c, err := New(Options{Store: st, Conn: pub, Status: status, StatusDebounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("controller not ready within 10s")
	}
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return c, stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not synchronisation
	}
}

func apply(t *testing.T, st *store.Store, objs ...schema.Object) {
	t.Helper()
	if _, err := st.ApplyAll(t.Context(), objs, false); err != nil {
		t.Fatal(err)
	}
}

func dev(name string, labels ...string) *schema.Device {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}, Metadata: schema.ObjectMeta{Name: name, Labels: l}}
}

func depl(name, image string, match ...string) *schema.Deployment {
	d := deployment(name, image, nil)
	if len(match) > 0 {
		d.Spec.Selector.MatchLabels = map[string]string{}
		for i := 0; i+1 < len(match); i += 2 {
			d.Spec.Selector.MatchLabels[match[i]] = match[i+1]
		}
	}
	d.Metadata.Generation = 0
	return &d
}

func TestControllerGenerationsAndIdempotence(t *testing.T) {
	st := openStore(t, t.TempDir())
	pub := newRecorder()
	c, _ := runController(t, st, pub, nil)
	apply(t, st, dev("a", "site", "lab"), dev("b", "site", "lab"), dev("c", "site", "home"))
	eventually(t, "first desired states", func() bool { return pub.desired(t, "a") != nil && pub.desired(t, "c") != nil })
	if ds := pub.desired(t, "a"); ds.Generation != 1 || len(ds.Pods) != 0 || ds.Store != st.ID() || ds.Kind != schema.KindDesiredState {
		t.Fatalf("new device: %+v", ds)
	}
	before := pub.count("fleet/v1/devices/", "/desired")

	apply(t, st, depl("web", "nginx:1", "site", "lab"))
	eventually(t, "web on a and b", func() bool {
		a, b := pub.desired(t, "a"), pub.desired(t, "b")
		return a.Generation == 2 && b.Generation == 2 && len(a.Pods) == 1
	})
	if got := pub.count("fleet/v1/devices/", "/desired") - before; got != 2 {
		t.Errorf("apply targeting 2 devices published %d desired states", got)
	}
	if ds := pub.desired(t, "c"); ds.Generation != 1 {
		t.Errorf("untargeted device moved to generation %d", ds.Generation)
	}
	if c.model.Model().Desired("a").Generation != 2 {
		t.Errorf("Desired(a) = %+v", c.model.Model().Desired("a"))
	}

	// The same deployment again, and a label change that changes no
	// selection: nothing is published.
	before = pub.count("fleet/v1/devices/", "/desired")
	apply(t, st, depl("web", "nginx:1", "site", "lab"), dev("a", "site", "lab", "rack", "1"))
	// A later change proves the controller has seen the earlier one.
	apply(t, st, dev("c", "site", "lab"))
	eventually(t, "c joins web", func() bool { return pub.desired(t, "c").Generation == 2 })
	if got := pub.count("fleet/v1/devices/", "/desired") - before; got != 1 {
		t.Errorf("published %d desired states, want 1 (only c)", got)
	}

	// Stored, with the generation.
	var stored schema.DesiredState
	if err := st.View(t.Context(), func(tx *store.Txn) error {
		b, err := tx.Get(store.DesiredKey("b"))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &stored)
	}); err != nil {
		t.Fatal(err)
	}
	if stored.Generation != 2 || stored.Pods[0].Hash == "" {
		t.Errorf("stored desired state of b: %+v", stored)
	}
}

func TestControllerDeleteAndRecreateKeepsGenerationGrowing(t *testing.T) {
	st := openStore(t, t.TempDir())
	pub := newRecorder()
	runController(t, st, pub, nil)
	apply(t, st, dev("a"), depl("web", "nginx:1"))
	eventually(t, "web on a", func() bool { ds := pub.desired(t, "a"); return ds != nil && len(ds.Pods) == 1 })
	apply(t, st, depl("web", "nginx:2"))
	eventually(t, "nginx:2", func() bool { return pub.desired(t, "a").Pods[0].Spec.Containers[0].Image == "nginx:2" })
	last := pub.desired(t, "a").Generation

	if _, err := st.Delete(t.Context(), schema.KindDevice, "a", "", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "desired topic cleared", func() bool { return pub.desired(t, "a") == nil })
	if err := st.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.DesiredKey("a")); err == nil {
			t.Error("desired key still stored after the device was deleted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	apply(t, st, dev("a"))
	eventually(t, "re-created device gets a desired state", func() bool { return pub.desired(t, "a") != nil })
	if g := pub.desired(t, "a").Generation; g <= last {
		t.Errorf("re-created device got generation %d, not above the old %d", g, last)
	}
}

func TestControllerRestartRepublishesFromStore(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	pub := newRecorder()
	_, stop := runController(t, st, pub, nil)
	apply(t, st, dev("a"), dev("b"), depl("web", "nginx:1"))
	eventually(t, "both", func() bool {
		a, b := pub.desired(t, "a"), pub.desired(t, "b")
		return a != nil && b != nil && len(a.Pods) == 1 && len(b.Pods) == 1
	})
	want := pub.desired(t, "a")
	stop()

	// A new broker (empty) and a new controller on the same store.
	pub2 := newRecorder()
	runController(t, st, pub2, nil)
	got := pub2.desired(t, "a")
	if got == nil || got.Generation != want.Generation || got.Pods[0].Hash != want.Pods[0].Hash {
		t.Fatalf("after restart, retained %+v, want generation %d", got, want.Generation)
	}
	if n := pub2.count("fleet/v1/devices/", "/desired"); n != 2 {
		t.Errorf("restart published %d desired states, want exactly the 2 stored", n)
	}
}

func TestControllerOneTransactionForManyDevices(t *testing.T) {
	st := openStore(t, t.TempDir())
	pub := newRecorder()
	runController(t, st, pub, nil)
	objs := make([]schema.Object, 0, 1000)
	for i := range 1000 {
		objs = append(objs, dev(fmt.Sprintf("d%04d", i), "site", "lab"))
	}
	apply(t, st, objs...)
	eventually(t, "1000 desired states", func() bool { return pub.count("fleet/v1/devices/", "/desired") == 1000 })
	rev, err := st.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	apply(t, st, depl("web", "nginx:1", "site", "lab"))
	eventually(t, "2000 desired states", func() bool { return pub.count("fleet/v1/devices/", "/desired") == 2000 })
	t.Logf("apply -> 1000 desired states published in %v", time.Since(start))
	rev2, err := st.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// One revision for the apply, one for the controller's single write.
	if rev2-rev != 2 {
		t.Errorf("apply and 1000 desired states took %d store revisions, want 2", rev2-rev)
	}
}

func TestControllerRollingUpdateProgressesWithStatus(t *testing.T) {
	st := openStore(t, t.TempDir())
	pub := newRecorder()
	status := &fakeStatus{st: map[string]*schema.DeviceStatus{}}
	c, _ := runController(t, st, pub, status)
	names := []string{"a", "b", "c", "d"}
	objs := []schema.Object{}
	for _, n := range names {
		objs = append(objs, dev(n))
	}
	d1 := depl("app", "app:1")
	d1.Spec.Strategy = schema.Strategy{Type: schema.StrategyRollingUpdate, RollingUpdate: &schema.RollingUpdate{MaxUnavailable: "1"}}
	apply(t, st, append(objs, d1)...)
	eventually(t, "app:1 everywhere", func() bool {
		for _, n := range names {
			if ds := pub.desired(t, n); ds == nil || len(ds.Pods) != 1 {
				return false
			}
		}
		return true
	})
	report := func(n string) {
		ds := pub.desired(t, n)
		status.set(n, &schema.DeviceStatus{Device: n, ObservedGeneration: ds.Generation, Store: ds.Store,
			Pods: []schema.PodStatus{{Name: "app", Hash: ds.Pods[0].Hash, Phase: schema.PhaseRunning, Ready: true}}})
	}
	for _, n := range names {
		report(n)
	}
	d2 := depl("app", "app:2")
	d2.Spec.Strategy = d1.Spec.Strategy
	apply(t, st, d2)
	onNew := func() (n int, which string) {
		for _, name := range names {
			if pub.desired(t, name).Pods[0].Spec.Containers[0].Image == "app:2" {
				n++
				which = name
			}
		}
		return n, which
	}
	eventually(t, "first device moves", func() bool { n, _ := onNew(); return n == 1 })
	// Until it reports ready, nobody else moves; then the rollout goes on.
	p := c.Passes()
	apply(t, st, dev("a", "touched", "1")) // a pass that changes nothing
	eventually(t, "a pass", func() bool { return c.Passes() > p })
	if n, _ := onNew(); n != 1 {
		t.Fatalf("%d devices moved before the first converged, want 1", n)
	}
	_, first := onNew()
	report(first)
	c.StatusChanged()
	eventually(t, "second device moves", func() bool { n, _ := onNew(); return n == 2 })
}

func TestControllerRetriesFailedPublishes(t *testing.T) {
	st := openStore(t, t.TempDir())
	pub := newRecorder()
	pub.fail = true
	c, err := New(Options{Store: st, Conn: pub})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	apply(t, st, dev("a"))
	<-c.Ready()
	eventually(t, "stored", func() bool { return c.model.Model().Desired("a") != nil })
	pub.mu.Lock()
	pub.fail = false
	pub.mu.Unlock()
	eventually(t, "published after the broker came back", func() bool { return pub.desired(t, "a") != nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Reports keep arriving while a pass runs: the set a pass takes must not
// be the one they are written into, even when it was empty (found by the
// 10,000-agent scale run: "concurrent map iteration and map write").
func TestTakeStatusIsNotWrittenLater(t *testing.T) {
	st := openStore(t, t.TempDir())
	c, err := New(Options{Store: st, Conn: newRecorder()})
	if err != nil {
		t.Fatal(err)
	}
	for _, first := range []string{"", "a"} {
		if first != "" {
			c.DeviceStatusChanged(first)
		}
		devs, _ := c.inbox.take()
		c.DeviceStatusChanged("late")
		if devs["late"] {
			t.Errorf("after %q: a report that came after takeStatus is in the set it returned", first)
		}
		if next, _ := c.inbox.take(); !next["late"] {
			t.Errorf("after %q: the late report is lost: %v", first, next)
		}
	}
}
