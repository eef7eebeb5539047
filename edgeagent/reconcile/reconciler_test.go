package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/desired"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// harness runs a Reconciler over a runtime.Fake inside a synctest bubble
// with a fake clock: Advance moves time, synctest.Wait lets every
// goroutine settle. No sleeps.
type harness struct {
	t     *testing.T
	clk   *clock.Fake
	rt    *runtime.Fake
	run   runtime.Runtime
	dir   *state.Dir
	inbox *desired.Inbox
	rec   *Reconciler

	lastOffered []byte // the payload of the last offer

	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	status Status
	events []string
	full   []schema.Event // what RecordEvent got (crash reports)
}

func (h *harness) Record(typ, reason, pod, container, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, reason+" "+pod+"/"+container)
}

// RecordEvent implements EventRecorder.
func (h *harness) RecordEvent(ev schema.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev.Reason+" "+ev.Pod+"/"+ev.Container)
	h.full = append(h.full, ev)
}

func newHarness(t *testing.T, root string, clk *clock.Fake, rt *runtime.Fake) *harness {
	t.Helper()
	if clk == nil {
		clk = clock.NewFake(t0)
	}
	if rt == nil {
		rt = runtime.NewFake(runtime.FakeOptions{Now: clk.Now})
	}
	if root == "" {
		root = t.TempDir()
	}
	dir, err := state.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, clk: clk, rt: rt, run: rt, dir: dir}
}

// start loads the state dir (as the agent does) and runs a Reconciler.
func (h *harness) start() {
	h.t.Helper()
	ds, err := h.dir.LoadDesired()
	if err != nil {
		h.t.Fatal(err)
	}
	ag, err := h.dir.LoadAgent()
	if err != nil {
		h.t.Fatal(err)
	}
	h.inbox = desired.New("dev1", ds)
	h.rec, err = New(Options{
		Runtime: h.run, State: h.dir, Inbox: h.inbox, Desired: ds, Agent: ag,
		Clock: h.clk, Events: h, OnStatus: func(s Status) { h.mu.Lock(); h.status = s; h.mu.Unlock() },
		Retry: backoff.Policy{Initial: 5 * time.Second, Max: time.Minute}, // no jitter: exact times
		Seed:  1,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.rec.Run(ctx) }()
	synctest.Wait()
}

func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Fatalf("Run: %v", err)
	}
}

func (h *harness) offer(gen int64, pods ...schema.Pod) {
	h.t.Helper()
	b, err := json.Marshal(schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   "dev1", Generation: gen, Store: "s1", Pods: pods,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.lastOffered = b
	if out, _, err := h.inbox.Offer(b); out != desired.Accepted {
		h.t.Fatalf("offer gen %d: %v %v", gen, out, err)
	}
	synctest.Wait()
}

func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	synctest.Wait()
}

func (h *harness) getStatus() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

func (h *harness) state(id string) runtime.State {
	c, ok := h.rt.Get(id)
	if !ok {
		return "missing"
	}
	return c.State
}

func (h *harness) countEvents(reason string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if strings.HasPrefix(e, reason+" ") {
			n++
		}
	}
	return n
}

func idOf(p schema.Pod, container string) string {
	k := key(p, container)
	return ContainerID(k.Pod, k.Container, k.Hash)
}

func TestReconcilerCreatesAndReportsGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		web := pod("web", schema.RestartAlways, "nginx:1")
		h.offer(1, web)
		if got := h.state(idOf(web, "c0")); got != runtime.StateRunning {
			t.Fatalf("web is %s", got)
		}
		st := h.getStatus()
		if st.ObservedGeneration != 1 || len(st.Pods) != 1 || st.Pods[0].Phase != schema.PhaseRunning || !st.Pods[0].Ready {
			t.Fatalf("status = %+v", st)
		}
		spec := h.rt.Created()[0]
		if want := h.dir.LogPath("web", "c0"); spec.LogPath != want {
			t.Errorf("log path %q, want %q", spec.LogPath, want)
		}
		if ds, err := h.dir.LoadDesired(); err != nil || ds == nil || ds.Generation != 1 {
			t.Fatalf("persisted desired = %+v, %v", ds, err)
		}
		// What is persisted is the payload as offered, not a re-encoding.
		if b, err := os.ReadFile(filepath.Join(h.dir.Root(), "v1", "desired.json")); err != nil || string(b) != string(h.lastOffered) {
			t.Errorf("desired.json = %s, %v; want the payload offered, %s", b, err, h.lastOffered)
		}
	})
}

// TestReconcilerIgnoresHashInPayload: a pod's hash is the agent's own
// PodSpecHash; one that came with the payload (a hub of another version,
// a mistake) names neither the container nor the status.
func TestReconcilerIgnoresHashInPayload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		web := pod("web", schema.RestartAlways, "nginx:1")
		sent := web
		sent.Hash = "0123456789abcdef"
		h.offer(1, sent)
		if got := h.state(idOf(web, "c0")); got != runtime.StateRunning {
			t.Fatalf("container of the spec's own hash is %s", got)
		}
		st := h.getStatus()
		if len(st.Pods) != 1 || st.Pods[0].Hash != schema.PodSpecHash(web.Spec) || !st.Pods[0].Ready {
			t.Fatalf("status = %+v, want web ready at hash %s", st, schema.PodSpecHash(web.Spec))
		}
	})
}

func TestReconcilerCrashLoopBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		web := pod("web", schema.RestartAlways, "nginx:1")
		id := idOf(web, "c0")
		h.offer(1, web)

		starts := func() int { return h.rt.Calls().Start }
		if err := h.rt.Exit(id, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if starts() != 1 {
			t.Fatalf("restarted at once (%d starts)", starts())
		}
		if st := h.getStatus(); st.Pods[0].Containers[0].Reason != ReasonCrashLoopBackOff {
			t.Fatalf("status = %+v", st.Pods[0])
		}
		// Backoff doubles for quick crashes: 10 s, 20 s, 40 s.
		for i, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
			h.advance(delay - time.Second)
			if starts() != 1+i {
				t.Fatalf("crash %d: restarted before %s", i+1, delay)
			}
			h.advance(time.Second)
			if starts() != 2+i || h.state(id) != runtime.StateRunning {
				t.Fatalf("crash %d: not restarted after %s (starts %d, %s)", i+1, delay, starts(), h.state(id))
			}
			if err := h.rt.Exit(id, 1); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		// A quick exit after the third restart waits 80 s.
		h.advance(79 * time.Second)
		if starts() != 4 {
			t.Fatalf("restarted before 80s")
		}
		h.advance(time.Second)
		if starts() != 5 {
			t.Fatalf("not restarted after 80s")
		}
		// Ten minutes of running resets the backoff to 10 s.
		h.advance(10 * time.Minute)
		if err := h.rt.Exit(id, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.advance(10 * time.Second)
		if starts() != 6 {
			t.Fatalf("backoff not reset after 10 minutes of running (starts %d)", starts())
		}
		st := h.getStatus()
		if got := st.Pods[0].Restarts; got != 5 {
			t.Errorf("restarts = %d, want 5", got)
		}
		if h.countEvents("Exited") != 5 || h.countEvents("BackOff") == 0 {
			t.Errorf("events: %v", h.events)
		}
	})
}

func TestReconcilerRestartPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		job := pod("job", schema.RestartOnFailure, "busybox")
		once := pod("once", schema.RestartNever, "busybox")
		h.offer(1, job, once)
		if err := h.rt.Exit(idOf(job, "c0"), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.rt.Exit(idOf(once, "c0"), 3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.advance(time.Hour)
		if n := h.rt.Calls().Start; n != 2 {
			t.Fatalf("%d starts: a completed container was restarted", n)
		}
		phases := map[string]schema.PodPhase{}
		for _, p := range h.getStatus().Pods {
			phases[p.Name] = p.Phase
		}
		if phases["job"] != schema.PhaseSucceeded || phases["once"] != schema.PhaseFailed {
			t.Fatalf("phases = %v", phases)
		}
		// OnFailure restarts a failure.
		h.offer(2, pod("job", schema.RestartOnFailure, "busybox:2"))
		id := idOf(pod("job", schema.RestartOnFailure, "busybox:2"), "c0")
		if err := h.rt.Exit(id, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.advance(10 * time.Second)
		if h.state(id) != runtime.StateRunning {
			t.Fatalf("OnFailure container not restarted after failing")
		}
	})
}

func TestReconcilerPullFailureRetriesWithoutBlockingOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.rt.SetImageError("bad:1", fmt.Errorf("manifest unknown"))
		h.start()
		defer h.stop()
		bad := pod("bad", schema.RestartAlways, "bad:1")
		good := pod("good", schema.RestartAlways, "good:1")
		h.offer(1, bad, good)
		if h.state(idOf(good, "c0")) != runtime.StateRunning {
			t.Fatal("a failing pull blocked another pod")
		}
		st := h.getStatus()
		if st.ObservedGeneration != 1 {
			t.Errorf("observedGeneration %d: a reported failure still counts as applied", st.ObservedGeneration)
		}
		if p := st.Pods[0]; p.Phase != schema.PhasePending || p.Containers[0].Reason != ReasonImagePullBackOff || !strings.Contains(p.Message, "manifest unknown") {
			t.Fatalf("bad pod status = %+v", p)
		}
		pulls := h.rt.Calls().Pull
		// Retries back off: 5 s, then 10 s.
		h.advance(5 * time.Second)
		if got := h.rt.Calls().Pull; got != pulls+1 {
			t.Fatalf("pulls %d -> %d after 5s", pulls, got)
		}
		h.advance(9 * time.Second)
		if got := h.rt.Calls().Pull; got != pulls+1 {
			t.Fatalf("retried before the doubled backoff")
		}
		h.rt.SetImageError("bad:1", nil)
		h.advance(time.Second)
		if h.state(idOf(bad, "c0")) != runtime.StateRunning {
			t.Fatal("pod not started once its image became available")
		}
		if p := h.getStatus().Pods[0]; p.Phase != schema.PhaseRunning || p.Message != "" {
			t.Fatalf("status after recovery = %+v", p)
		}
		if h.countEvents(ReasonErrImagePull) != 2 {
			t.Errorf("events = %v", h.events)
		}
	})
}

// gatedRuntime blocks EnsureImage of one image until released.
type gatedRuntime struct {
	*runtime.Fake
	image   string
	release chan struct{}
}

func (g *gatedRuntime) EnsureImage(ctx context.Context, image string, p schema.PullPolicy) error {
	if image == g.image {
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Fake.EnsureImage(ctx, image, p)
}

func TestReconcilerSlowPullDoesNotStallOtherPods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		g := &gatedRuntime{Fake: h.rt, image: "huge:1", release: make(chan struct{})}
		h.run = g
		h.start()
		defer h.stop()
		slow := pod("slow", schema.RestartAlways, "huge:1")
		fast := pod("fast", schema.RestartAlways, "small:1")
		h.offer(1, slow, fast)
		if h.state(idOf(fast, "c0")) != runtime.StateRunning {
			t.Fatal("fast pod waits for the slow pull")
		}
		if st := h.getStatus(); st.ObservedGeneration != 0 {
			t.Fatalf("generation reported applied while a pull is in flight")
		}
		// A new desired state is acted on while the pull is still running.
		other := pod("other", schema.RestartAlways, "small:1")
		h.offer(2, slow, fast, other)
		if h.state(idOf(other, "c0")) != runtime.StateRunning {
			t.Fatal("new pod waits for the slow pull")
		}
		close(g.release)
		synctest.Wait()
		if h.state(idOf(slow, "c0")) != runtime.StateRunning {
			t.Fatal("slow pod not started after its pull")
		}
		if st := h.getStatus(); st.ObservedGeneration != 2 {
			t.Fatalf("observedGeneration = %d, want 2", st.ObservedGeneration)
		}
	})
}

func TestReconcilerSpecChangeRemovesBeforeCreating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		v1 := pod("web", schema.RestartAlways, "nginx:1")
		gone := pod("gone", schema.RestartAlways, "nginx:1")
		h.offer(1, v1, gone)
		v2 := pod("web", schema.RestartAlways, "nginx:2")
		added := pod("added", schema.RestartAlways, "nginx:1")
		h.offer(2, v2, added)
		ops := h.rt.Ops()
		idx := func(op string) int {
			i := slices.Index(ops, op)
			if i < 0 {
				t.Fatalf("no %q in %v", op, ops)
			}
			return i
		}
		if idx("remove "+idOf(v1, "c0")) > idx("create "+idOf(v2, "c0")) {
			t.Errorf("replacement created before the old container was removed: %v", ops)
		}
		if idx("remove "+idOf(gone, "c0")) > idx("create "+idOf(added, "c0")) {
			t.Errorf("new pod created before an undesired pod was removed: %v", ops)
		}
		if idx("stop "+idOf(gone, "c0")) > idx("remove "+idOf(gone, "c0")) {
			t.Errorf("container removed without a graceful stop: %v", ops)
		}
		l, _ := h.rt.List(context.Background())
		if len(l) != 2 || h.getStatus().ObservedGeneration != 2 {
			t.Fatalf("containers %v, status %+v", l, h.getStatus())
		}
	})
}

// TestReconcilerBadTagKeepsRunningVersion: an update to an image that
// cannot be pulled leaves the running version running (download, then
// replace), says so in the pod's status, retries with backoff, and
// replaces the version once the image can be had.
func TestReconcilerBadTagKeepsRunningVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.rt.SetImageError("nginx:typo", fmt.Errorf("manifest unknown"))
		h.start()
		defer h.stop()
		v1 := pod("web", schema.RestartAlways, "nginx:1")
		h.offer(1, v1)
		if h.state(idOf(v1, "c0")) != runtime.StateRunning {
			t.Fatal("v1 not running")
		}
		bad := pod("web", schema.RestartAlways, "nginx:typo")
		h.offer(2, bad)
		if h.state(idOf(v1, "c0")) != runtime.StateRunning {
			t.Fatalf("the running version was stopped for an image that cannot be pulled: %v", h.rt.Ops())
		}
		if slices.ContainsFunc(h.rt.Ops(), func(op string) bool { return strings.HasPrefix(op, "stop ") || strings.HasPrefix(op, "remove ") }) {
			t.Fatalf("stopped or removed something: %v", h.rt.Ops())
		}
		p := h.getStatus().Pods[0]
		if p.Containers[0].Reason != ReasonImagePullBackOff || !strings.Contains(p.Message, "manifest unknown") || !strings.Contains(p.Message, "the running version keeps running") {
			t.Fatalf("pod status = %+v", p)
		}
		// Still held after the retries.
		h.advance(5 * time.Second)
		h.advance(10 * time.Second)
		if h.state(idOf(v1, "c0")) != runtime.StateRunning {
			t.Fatal("the running version was stopped on a retry")
		}
		// The operator fixes the tag: the new version replaces the old.
		v2 := pod("web", schema.RestartAlways, "nginx:2")
		h.offer(3, v2)
		synctest.Wait()
		if h.state(idOf(v2, "c0")) != runtime.StateRunning {
			t.Fatalf("v2 not running: %v", h.rt.Ops())
		}
		if _, ok := h.rt.Get(idOf(v1, "c0")); ok {
			t.Fatal("v1 still there after v2 replaced it")
		}
		if st := h.getStatus(); st.ObservedGeneration != 3 || st.Pods[0].Phase != schema.PhaseRunning {
			t.Fatalf("status %+v", st)
		}
	})
}

func TestReconcilerStopLeavesContainersRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		web := pod("web", schema.RestartAlways, "nginx:1")
		h.offer(1, web)
		h.stop()
		c := h.rt.Calls()
		if c.Stop != 0 || c.Remove != 0 || h.state(idOf(web, "c0")) != runtime.StateRunning {
			t.Fatalf("stopping the reconciler touched containers: %+v", c)
		}
		if h.rt.Subscribers() != 0 {
			t.Fatal("exit subscription leaked")
		}
	})
}

func TestReconcilerRestartAdoptsAndKeepsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		h := newHarness(t, root, nil, nil)
		h.start()
		web := pod("web", schema.RestartAlways, "nginx:1")
		crash := pod("crash", schema.RestartAlways, "crash:1")
		h.offer(1, web, crash)
		if err := h.rt.Exit(idOf(crash, "c0"), 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.advance(10 * time.Second) // restart 1
		if err := h.rt.Exit(idOf(crash, "c0"), 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // now in a 20 s backoff
		h.stop()
		before := h.rt.Calls()

		// A new reconciler over the same runtime and state dir.
		h2 := newHarness(t, root, h.clk, h.rt)
		h2.start()
		defer h2.stop()
		after := h2.rt.Calls()
		if after.Create != before.Create || after.Start != before.Start || after.Stop != 0 || after.Remove != 0 {
			t.Fatalf("restarted agent touched healthy containers: before %+v after %+v", before, after)
		}
		st := h2.getStatus()
		if st.ObservedGeneration != 1 {
			t.Errorf("observedGeneration after restart = %d", st.ObservedGeneration)
		}
		h2.advance(19 * time.Second)
		if h2.rt.Calls().Start != before.Start {
			t.Fatal("backoff forgotten across restart")
		}
		h2.advance(time.Second)
		if h2.state(idOf(crash, "c0")) != runtime.StateRunning {
			t.Fatal("not restarted after the persisted backoff")
		}
		if got := h2.getStatus().Pods[1].Restarts; got != 2 {
			t.Errorf("restart count after agent restart = %d, want 2", got)
		}
	})
}

func TestReconcilerWithoutDesiredStateRemovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		h.offer(1, pod("web", schema.RestartAlways, "nginx:1"))
		h.stop()
		// A fresh state dir (lost or corrupt): no desired state known.
		h2 := newHarness(t, "", h.clk, h.rt)
		h2.start()
		defer h2.stop()
		h2.advance(time.Minute)
		if c := h2.rt.Calls(); c.Remove != 0 || c.Stop != 0 {
			t.Fatalf("agent without desired state removed containers: %+v", c)
		}
		if st := h2.getStatus(); !strings.Contains(st.Message, "no desired state") {
			t.Fatalf("status = %+v", st)
		}
	})
}

func TestReconcilerRuntimeDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		h.offer(1, pod("web", schema.RestartAlways, "nginx:1"))
		h.rt.SetListError(fmt.Errorf("connection refused"))
		h.advance(30 * time.Second)
		if p := h.getStatus().Pods[0]; p.Phase != schema.PhaseUnknown {
			t.Fatalf("pod phase with the runtime down = %s", p.Phase)
		}
		h.rt.SetListError(nil)
		h.advance(time.Minute)
		if p := h.getStatus().Pods[0]; p.Phase != schema.PhaseRunning {
			t.Fatalf("pod phase after the runtime came back = %s", p.Phase)
		}
	})
}

// TestReconcilerNewRevisionThatNeverStartsGoesBack: v1 runs steadily; v2
// replaces it and exits at once, three times; the agent goes back to v1
// (no pull: its image was kept), reports v2 failed, does not retry v2,
// not even after a restart, and replaces v1 with a fixed v3.
func TestReconcilerNewRevisionThatNeverStartsGoesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		h := newHarness(t, root, nil, nil)
		h.rt.SetCrash("app:2", 1)
		h.start()
		v1 := pod("web", schema.RestartAlways, "app:1")
		v2 := pod("web", schema.RestartAlways, "app:2")
		v3 := pod("web", schema.RestartAlways, "app:3")
		h2 := schema.PodSpecHash(v2.Spec)
		h.offer(1, v1)
		h.advance(DefaultSteadyAfter) // v1 has run steadily

		h.offer(2, v2)
		if _, ok := h.rt.Get(idOf(v1, "c0")); ok {
			t.Fatalf("v1 not replaced: %v", h.rt.Ops())
		}
		if p := h.getStatus().Pods[0]; p.Hash != h2 || p.Containers[0].Reason != ReasonCrashLoopBackOff {
			t.Fatalf("after v2's first exit: %+v", p)
		}
		h.advance(10 * time.Second) // second start, second exit
		if h.countEvents("RolledBack") != 0 {
			t.Fatal("gave up after two failed starts")
		}
		pulls := h.rt.Calls().Pull
		h.advance(20 * time.Second) // third start, third exit: back to v1
		if h.state(idOf(v1, "c0")) != runtime.StateRunning {
			t.Fatalf("v1 not running again: %v", h.rt.Ops())
		}
		if _, ok := h.rt.Get(idOf(v2, "c0")); ok {
			t.Fatal("v2's container kept")
		}
		if got := h.rt.Calls().Pull; got != pulls {
			t.Errorf("going back pulled %d images: the previous version's image was not kept", got-pulls)
		}
		st := h.getStatus()
		want := "revision " + h2[:8] + " failed to start (container c0: exit code 1, 3 times); the previous version runs again"
		h1 := schema.PodSpecHash(v1.Spec)
		if p := st.Pods[0]; p.Hash != h1 || p.Phase != schema.PhaseRunning || !p.Ready || p.Message != want || p.Containers[0].Image != "app:1" ||
			p.FailedRevision == nil || p.FailedRevision.Hash != h2 || p.FailedRevision.Reason != ReasonCrashLoopBackOff {
			t.Fatalf("status = %+v\nwant v1's hash %s, Running, ready, %q, v2 (%s) failed", p, h1, want, h2)
		}
		if st.ObservedGeneration != 2 {
			t.Errorf("observedGeneration %d: a reported failure counts as applied", st.ObservedGeneration)
		}
		if h.countEvents("RolledBack") != 1 {
			t.Errorf("events: %v", h.events)
		}

		// v2 is not retried.
		starts := h.rt.Calls().Start
		h.advance(time.Hour)
		if got := h.rt.Calls().Start; got != starts {
			t.Fatalf("%d starts after going back: v2 retried? %v", got-starts, h.rt.Ops())
		}
		h.stop()

		// Nor by a restarted agent: the failure is persisted.
		ag, err := h.dir.LoadAgent()
		if err != nil || ag.Rollouts["web"].Failed == nil || ag.Rollouts["web"].Failed.Hash != h2 || ag.Rollouts["web"].Steady.Pod.Hash != schema.PodSpecHash(v1.Spec) {
			t.Fatalf("persisted rollout = %+v, %v", ag.Rollouts["web"], err)
		}
		r := newHarness(t, root, h.clk, h.rt)
		r.start()
		defer r.stop()
		r.advance(time.Hour)
		if c := r.rt.Calls(); c.Start != starts || c.Remove != h.rt.Calls().Remove {
			t.Fatalf("restarted agent touched containers: %v", r.rt.Ops())
		}
		if p := r.getStatus().Pods[0]; p.Phase != schema.PhaseRunning || !p.Ready || p.Message != want || !p.RevisionFailed(h2) {
			t.Fatalf("status after restart = %+v", p)
		}

		// A fixed v3 replaces v1 and, once steady, keeps v1 as previous.
		r.offer(3, v3)
		if r.state(idOf(v3, "c0")) != runtime.StateRunning {
			t.Fatalf("v3 not running: %v", r.rt.Ops())
		}
		if p := r.getStatus().Pods[0]; p.Phase != schema.PhaseRunning || p.Message != "" {
			t.Fatalf("v3 status = %+v", p)
		}
		r.advance(DefaultSteadyAfter)
		ag, _ = r.dir.LoadAgent()
		if ro := ag.Rollouts["web"]; ro.Failed != nil || ro.Steady.Pod.Hash != schema.PodSpecHash(v3.Spec) || ro.Previous.Pod.Hash != schema.PodSpecHash(v1.Spec) {
			t.Fatalf("rollout after v3 = %+v", ro)
		}
	})
}

// TestReconcilerFirstInstallCrashLoops: with no steady revision to go
// back to, a crashing pod crash-loops with backoff, as always.
func TestReconcilerFirstInstallCrashLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.rt.SetCrash("app:2", 1)
		h.start()
		defer h.stop()
		v2 := pod("web", schema.RestartAlways, "app:2")
		h.offer(1, v2)
		for _, d := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second} {
			h.advance(d)
		}
		if n := h.rt.Calls().Start; n != 5 {
			t.Fatalf("%d starts, want 5", n)
		}
		p := h.getStatus().Pods[0]
		if p.Phase != schema.PhaseRunning || p.Containers[0].Reason != ReasonCrashLoopBackOff || h.countEvents("RolledBack") != 0 {
			t.Fatalf("status = %+v, events %v", p, h.events)
		}
	})
}

// TestReconcilerCreateFailuresGoBack: a new revision whose container
// cannot be started goes back to the steady one after three attempts.
func TestReconcilerCreateFailuresGoBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		f := &failingStart{Fake: h.rt, image: "app:2"}
		h.run = f
		h.start()
		defer h.stop()
		v1 := pod("web", schema.RestartAlways, "app:1")
		v2 := pod("web", schema.RestartAlways, "app:2")
		h.offer(1, v1)
		h.advance(DefaultSteadyAfter)
		h.offer(2, v2)
		h.advance(5 * time.Second)  // second attempt
		h.advance(10 * time.Second) // third: back to v1
		if h.state(idOf(v1, "c0")) != runtime.StateRunning {
			t.Fatalf("v1 not running again: %v", h.rt.Ops())
		}
		p := h.getStatus().Pods[0]
		if p.Phase != schema.PhaseRunning || !p.Ready || p.FailedRevision == nil || p.FailedRevision.Reason != ReasonStartError ||
			!strings.Contains(p.Message, "RunContainerError") || !strings.HasSuffix(p.Message, "the previous version runs again") {
			t.Fatalf("status = %+v", p)
		}
	})
}

// failingStart fails every Start of a container of one image.
type failingStart struct {
	*runtime.Fake
	image string
}

func (f *failingStart) Start(ctx context.Context, id string) error {
	if c, ok := f.Get(id); ok && c.Image == f.image {
		return fmt.Errorf("start container %s: exec: \"/app\": no such file or directory", id)
	}
	return f.Fake.Start(ctx, id)
}

// TestReconcilerCrashReport: a non-zero exit's event carries the exit
// code and the end of the container's log, read before the restart.
func TestReconcilerCrashReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		web := pod("web", schema.RestartAlways, "nginx:1")
		id := idOf(web, "c0")
		h.offer(1, web)
		var log strings.Builder
		for i := range 80 {
			fmt.Fprintf(&log, "line %d\n", i)
		}
		p := h.dir.LogPath("web", "c0")
		if err := os.WriteFile(p, []byte(log.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.rt.Exit(id, 3); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		var ev *schema.Event
		for i := range h.full {
			if h.full[i].Reason == "Exited" {
				ev = &h.full[i]
			}
		}
		if ev == nil || ev.ExitCode == nil || *ev.ExitCode != 3 {
			t.Fatalf("exit event = %+v", ev)
		}
		lines := strings.Split(strings.TrimSuffix(ev.LogTail, "\n"), "\n")
		if len(lines) != schema.MaxCrashLogLines || lines[0] != "line 30" || lines[len(lines)-1] != "line 79" {
			t.Fatalf("log tail = %q", ev.LogTail)
		}
	})
}

// persistChecker is a runtime that, at every call that changes a
// container, notes which desired generation and applied generation the
// state directory holds at that moment.
type persistChecker struct {
	*runtime.Fake
	dir *state.Dir

	mu   sync.Mutex
	seen []string // "op desired-gen applied-gen"
}

func (p *persistChecker) note(op string) {
	ds, err := p.dir.LoadDesired()
	gen := int64(-1)
	if err == nil && ds != nil {
		gen = ds.Generation
	}
	ag, _ := p.dir.LoadAgent()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, fmt.Sprintf("%s %d %d", op, gen, ag.AppliedGeneration))
}

func (p *persistChecker) Create(ctx context.Context, spec runtime.ContainerSpec) error {
	p.note("create")
	return p.Fake.Create(ctx, spec)
}

func (p *persistChecker) Stop(ctx context.Context, id string, timeout time.Duration) error {
	p.note("stop")
	return p.Fake.Stop(ctx, id, timeout)
}

// TestReconcilerPersistsBeforeActing: the desired state a pass accepted
// is on disk, with the agent state of the generation before, before the
// pass touches a container; the generation applied is on disk once the
// pass that saw it applied ends.
func TestReconcilerPersistsBeforeActing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		pc := &persistChecker{Fake: h.rt, dir: h.dir}
		h.run = pc
		h.start()
		defer h.stop()
		h.offer(1, pod("web", schema.RestartAlways, "nginx:1"))
		h.offer(2)
		pc.mu.Lock()
		seen := strings.Join(pc.seen, ", ")
		pc.mu.Unlock()
		if want := "create 1 0, stop 2 1"; seen != want {
			t.Errorf("state on disk at each action: %s; want %s", seen, want)
		}
		if ag, err := h.dir.LoadAgent(); err != nil || ag.AppliedGeneration != 2 || len(ag.Containers) != 0 {
			t.Errorf("agent state at the end: %+v, %v", ag, err)
		}
	})
}

// TestReconcilerRuntimeDownPersistsDesired: a desired state accepted while
// the runtime cannot be listed is persisted all the same.
func TestReconcilerRuntimeDownPersistsDesired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.rt.SetListError(fmt.Errorf("connection refused"))
		h.start()
		defer h.stop()
		h.offer(1, pod("web", schema.RestartAlways, "nginx:1"))
		if ds, err := h.dir.LoadDesired(); err != nil || ds == nil || ds.Generation != 1 {
			t.Fatalf("persisted desired with the runtime down = %+v, %v", ds, err)
		}
	})
}

// createFailer is a runtime whose creates fail while fail is set.
type createFailer struct {
	*runtime.Fake
	fail atomic.Bool
}

func (c *createFailer) Create(ctx context.Context, spec runtime.ContainerSpec) error {
	if c.fail.Load() {
		return fmt.Errorf("create %s: open log: %w", spec.ID, os.ErrNotExist)
	}
	return c.Fake.Create(ctx, spec)
}

// TestReconcilerMakesLogDirectoryAgain: the log directory is made once,
// and made again when it went away and a create failed for it.
func TestReconcilerMakesLogDirectoryAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		cf := &createFailer{Fake: h.rt}
		h.run = cf
		h.start()
		defer h.stop()
		h.offer(1, pod("web", schema.RestartAlways, "nginx:1"))
		logDir := filepath.Dir(h.dir.LogPath("web", "c0"))
		if fi, err := os.Stat(logDir); err != nil || !fi.IsDir() {
			t.Fatalf("log directory: %v, %v", fi, err)
		}
		if err := os.RemoveAll(logDir); err != nil {
			t.Fatal(err)
		}
		cf.fail.Store(true)
		web2 := pod("web", schema.RestartAlways, "nginx:2")
		h.offer(2, web2)
		if _, err := os.Stat(logDir); err == nil {
			t.Fatal("the log directory was made again before a create failed: it was not remembered")
		}
		cf.fail.Store(false)
		h.advance(time.Minute) // the retry
		if got := h.state(idOf(web2, "c0")); got != runtime.StateRunning {
			t.Fatalf("web v2 is %s", got)
		}
		if fi, err := os.Stat(logDir); err != nil || !fi.IsDir() {
			t.Errorf("log directory not made again: %v, %v", fi, err)
		}
	})
}
