package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// fakeClock is the controller's Now, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// stagedFleet is a controller on a real store with n devices d0…d(n-1)
// whose reports the test writes.
type stagedFleet struct {
	t      *testing.T
	st     *store.Store
	dir    string
	pub    *recorder
	status *fakeStatus
	clock  *fakeClock
	c      *Controller
	stop   func()
	n      int
}

func newStagedFleet(t *testing.T, n int) *stagedFleet {
	f := &stagedFleet{t: t, dir: t.TempDir(), pub: newRecorder(), status: &fakeStatus{st: map[string]*schema.DeviceStatus{}},
		clock: &fakeClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}, n: n}
	f.st = openStoreAt(t, f.dir)
	f.start()
	var objs []schema.Object
	for i := range n {
		objs = append(objs, dev(f.name(i), "site", "shop"))
		f.status.set(f.name(i), &schema.DeviceStatus{Device: f.name(i)}) // online, running nothing
	}
	apply(t, f.st, objs...)
	return f
}

func openStoreAt(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *stagedFleet) name(i int) string { return fmt.Sprintf("d%d", i) }

func (f *stagedFleet) start() {
	f.t.Helper()
	c, err := New(Options{Store: f.st, Conn: f.pub, Status: f.status, StatusDebounce: time.Millisecond, Now: f.clock.Now})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		f.t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		f.t.Fatal("controller not ready within 10s")
	}
	stopped := false
	f.c = c
	f.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	}
	f.t.Cleanup(func() {
		f.stop()
		_ = f.st.Close()
	})
}

// restart stops the controller and the store and opens both again, as a
// hub killed and started again.
func (f *stagedFleet) restart() {
	f.t.Helper()
	f.stop()
	if err := f.st.Close(); err != nil {
		f.t.Fatal(err)
	}
	f.st = openStoreAt(f.t, f.dir)
	f.start()
}

// hashes returns the pod hash each device is given ("" none).
func (f *stagedFleet) hashes() []string {
	out := make([]string, f.n)
	for i := range f.n {
		if ds := f.pub.desired(f.t, f.name(i)); ds != nil {
			for _, p := range ds.Pods {
				if p.Name == "web" {
					out[i] = p.Hash
				}
			}
		}
	}
	return out
}

// gens returns each device's desired generation.
func (f *stagedFleet) gens() map[string]int64 {
	out := map[string]int64{}
	for name, ds := range f.c.model.DesiredStates() {
		out[name] = ds.Generation
	}
	return out
}

func count(hs []string, h string) int {
	n := 0
	for _, x := range hs {
		if x == h {
			n++
		}
	}
	return n
}

// report makes device i report the pod at hash Ready, or failing with
// reason.
func (f *stagedFleet) report(i int, hash, reason string) {
	started := f.clock.Now().Add(-time.Minute)
	ps := schema.PodStatus{Name: "web", Hash: hash, Phase: schema.PhaseRunning, Ready: true,
		Containers: []schema.ContainerStatus{{Name: "c", State: "running", StartedAt: &started}}}
	if reason != "" {
		ps.Phase, ps.Ready = schema.PhasePending, false
		ps.Containers[0].State, ps.Containers[0].Reason = "waiting", reason
	}
	f.status.set(f.name(i), &schema.DeviceStatus{Device: f.name(i), Pods: []schema.PodStatus{ps}})
	f.c.DeviceStatusChanged(f.name(i))
}

// reportAll makes every device given hash report it Ready.
func (f *stagedFleet) reportAll(hash string) {
	for i, h := range f.hashes() {
		if h == hash {
			f.report(i, hash, "")
		}
	}
}

func (f *stagedFleet) rollout() *schema.RolloutStatus {
	s, ok := f.c.model.Model().DeploymentStatus("web")
	if !ok {
		return nil
	}
	return s.Rollout
}

func (f *stagedFleet) await(what string, cond func(hs []string, rs *schema.RolloutStatus) bool) {
	f.t.Helper()
	eventually(f.t, what, func() bool {
		rs := f.rollout()
		return rs != nil && cond(f.hashes(), rs)
	})
}

func stagedWeb(image string) *schema.Deployment {
	d := depl("web", image, "site", "shop")
	deadline := int32(60)
	one := int32(1)
	half := int32(50)
	all := int32(100)
	d.Spec.Strategy = schema.Strategy{Type: schema.StrategyStaged, Staged: &schema.Staged{
		Steps:                   []schema.StagedStep{{Devices: &one}, {Percent: &half}, {Percent: &all}},
		ProgressDeadlineSeconds: &deadline,
		FailureThreshold:        "2",
		AutoRollback:            true,
	}}
	return d
}

func hashOf(t *testing.T, d *schema.Deployment) string {
	t.Helper()
	c := *d
	schema.Default(&c)
	return schema.TemplateHash(c.Spec.Template)
}

// TestControllerStagedRollout drives a Staged deployment through the
// controller on a real store: waves gated on health, a completed first
// rollout recorded as the last good revision, a bad revision stopped at
// the failure threshold and rolled back to it (history marks it Failed,
// the status says why in one line), and a hub restart in the middle of a
// rollout that resumes it where it was.
func TestControllerStagedRollout(t *testing.T) {
	f := newStagedFleet(t, 10)
	v1 := stagedWeb("app:1")
	h1 := hashOf(t, v1)
	apply(t, f.st, v1)

	// A first rollout: one device, then half, then all; the others get
	// nothing until their wave (there is no earlier revision to run).
	f.await("v1 on one device", func(hs []string, rs *schema.RolloutStatus) bool {
		return count(hs, h1) == 1 && count(hs, "") == 9 && rs.Step == 1 && rs.Phase == schema.RolloutProgressing
	})
	f.reportAll(h1)
	f.await("v1 on half", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h1) == 5 && rs.Step == 2 })
	f.reportAll(h1)
	f.await("v1 on all", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h1) == 10 && rs.Step == 3 })
	f.reportAll(h1)
	f.await("v1 complete", func(hs []string, rs *schema.RolloutStatus) bool { return rs.Phase == schema.RolloutComplete })
	eventually(t, "revision 1 marked Complete", func() bool {
		r, err := f.st.DeploymentRevision(t.Context(), "web", 1)
		return err == nil && r.Outcome == schema.OutcomeComplete
	})

	// v2 fails on the devices of its second wave: the rollout stops at the
	// threshold (2) and every device goes back to v1.
	v2 := stagedWeb("app:2")
	h2 := hashOf(t, v2)
	apply(t, f.st, v2)
	f.await("v2 on one device, v1 on the rest", func(hs []string, rs *schema.RolloutStatus) bool {
		return count(hs, h2) == 1 && count(hs, h1) == 9 && rs.Revision == 2 && rs.LastGoodRevision == 1
	})
	f.reportAll(h2)
	f.await("v2 on half", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h2) == 5 })
	hs := f.hashes()
	var wave []int
	for i, h := range hs {
		if h == h2 {
			wave = append(wave, i)
		}
	}
	f.report(wave[1], h2, "CrashLoopBackOff")
	f.await("one failure counted", func(_ []string, rs *schema.RolloutStatus) bool { return rs.Failed == 1 })
	if rs := f.rollout(); rs.Phase != schema.RolloutProgressing {
		t.Fatalf("one failure below the threshold of 2: phase %s", rs.Phase)
	}
	gens := f.gens()
	f.report(wave[2], h2, "ImagePullBackOff")
	// The hub rolls back by itself, as an undo would: revision 1's
	// template becomes the current revision, 3, which every device runs
	// already, complete at once; the rollout says which revision failed
	// and why.
	f.await("rolled back, and the rollback written", func(hs []string, rs *schema.RolloutStatus) bool {
		return rs.Revision == 3 && rs.Phase == schema.RolloutComplete && rs.RolledBackFrom != nil && count(hs, h1) == 10
	})
	rs := f.rollout()
	rb := rs.RolledBackFrom
	if rb.Revision != 2 || rb.Hash != h2 || rb.ToRevision != 1 || rb.Step != 2 || rb.Steps != 3 ||
		!strings.Contains(rb.Reason, "rolled back to revision 1: 2 of 10 devices failed revision 2, reaching failureThreshold 2") {
		t.Errorf("rolled back from: %+v", rb)
	}
	if rs.Hash != h1 || rs.LastGoodRevision != 3 {
		t.Errorf("the rollback revision: hash %s (want v1's %s), last good %d (want 3, itself)", rs.Hash, h1, rs.LastGoodRevision)
	}
	st, _ := f.c.model.Model().DeploymentStatus("web")
	if len(st.Conditions) != 1 || st.Conditions[0].Status != "False" || st.Conditions[0].Reason != "RolloutRolledBack" ||
		!strings.Contains(st.Conditions[0].Message, "revision 2 failed and was rolled back; revision 3 (the template of revision 1) runs on all 10 devices: "+rb.Reason) {
		t.Errorf("conditions after the rollback: %+v", st.Conditions)
	}
	if !slices.ContainsFunc(rs.Events, func(e schema.RolloutEvent) bool {
		return e.Reason == "RolledBack" && e.Type == schema.EventWarning && e.Message == rb.Reason
	}) {
		t.Errorf("events after the rollback do not keep the rollback: %+v", rs.Events)
	}
	obj, err := f.st.Get(t.Context(), schema.KindDeployment, "web")
	if err != nil {
		t.Fatal(err)
	}
	dep := obj.(*schema.Deployment)
	if dep.Status.Revision != 3 || schema.TemplateHash(dep.Spec.Template) != h1 {
		t.Errorf("the deployment's current revision %d, template %s; want 3 with v1's %s", dep.Status.Revision, schema.TemplateHash(dep.Spec.Template), h1)
	}
	revs, err := f.st.DeploymentRevisions(t.Context(), "web")
	if err != nil || len(revs) != 2 || revs[0].Revision != 3 || revs[1].Revision != 2 {
		t.Fatalf("history after the rollback: %+v, %v", revs, err)
	}
	if r := revs[1]; r.Outcome != schema.OutcomeFailed || !strings.Contains(r.Reason, "2 of 10 devices failed") {
		t.Errorf("revision 2 in the history: %s %q, want Failed with the reason", r.Outcome, r.Reason)
	}
	if r := revs[0]; r.Hash != h1 || r.ChangeCause != "rollback to revision 1 by the hub (revision 2 failed its staged rollout)" {
		t.Errorf("revision 3 in the history: hash %s cause %q", r.Hash, r.ChangeCause)
	}
	// The devices of the failed waves get the last good pod once, when
	// the planner rolls back; writing the rollback moves none again.
	after := f.gens()
	for i := range f.n {
		name, want := f.name(i), int64(0)
		if slices.Contains(wave, i) {
			want = 1
		}
		if got := after[name] - gens[name]; got != want {
			t.Errorf("%s: %d new desired states from the rollback, want %d", name, got, want)
		}
	}
	// Undo has nothing left to go back to: the failed revision is skipped.
	if _, err := f.st.Rollback(t.Context(), "web", 0, "", false); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("undo after the automatic rollback: %v, want no previous revision", err)
	}

	// v4 half rolled out when the hub is killed: it resumes where it was,
	// moving no device.
	v4 := stagedWeb("app:4")
	h4 := hashOf(t, v4)
	apply(t, f.st, v4)
	f.await("v4 on one device", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h4) == 1 })
	canary := slices.Index(f.hashes(), h4)
	f.reportAll(h4)
	f.await("v4 on half", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h4) == 5 && rs.Step == 2 })
	before := f.hashes()
	f.restart()
	f.await("the same plan after the restart", func(hs []string, rs *schema.RolloutStatus) bool {
		return slices.Equal(hs, before) && rs.Step == 2 && rs.Phase == schema.RolloutProgressing && rs.Updated == 5
	})
	if got := f.rollout(); got.LastGoodRevision != 3 {
		t.Errorf("after the restart the last good revision is %d, want 3 (the undo's)", got.LastGoodRevision)
	}

	// A device on v4 that never becomes Ready fails at the progress
	// deadline, counted from when it was given v4 (persisted across the
	// restart): with one failure the rollout goes on.
	// Every device of the wave reports v4 Ready but one (not the canary,
	// Ready since the first wave), which stays Pending.
	stuck := -1
	for i, h := range f.hashes() {
		switch {
		case h != h4:
		case stuck < 0 && i != canary:
			stuck = i
		default:
			f.report(i, h4, "")
		}
	}
	f.status.set(f.name(stuck), &schema.DeviceStatus{Device: f.name(stuck), Pods: []schema.PodStatus{{Name: "web", Hash: h4, Phase: schema.PhasePending}}})
	f.c.DeviceStatusChanged(f.name(stuck))
	f.await("waits for the stuck device", func(_ []string, rs *schema.RolloutStatus) bool {
		return strings.Contains(rs.Waiting, "1 starting") && !rs.WaitUntil.IsZero()
	})
	f.clock.Advance(61 * time.Second)
	f.c.StatusChanged()
	f.await("the stuck device failed, the next wave started", func(hs []string, rs *schema.RolloutStatus) bool {
		return rs.Failed == 1 && count(hs, h4) == 10 && rs.Step == 3
	})
}

// TestControllerStagedPauseAndOffline: spec.paused holds the waves; an
// offline device is pending, never failed, and the rollout goes on
// without it after the progress deadline.
func TestControllerStagedPauseAndOffline(t *testing.T) {
	f := newStagedFleet(t, 4)
	v1 := stagedWeb("app:1")
	h1 := hashOf(t, v1)
	v1.Spec.Paused = true
	apply(t, f.st, v1)
	f.await("paused: no device gets v1", func(hs []string, rs *schema.RolloutStatus) bool {
		return rs.Phase == schema.RolloutPaused && count(hs, "") == 4
	})
	v1.Spec.Paused = false
	apply(t, f.st, v1)
	f.await("resumed: one device", func(hs []string, rs *schema.RolloutStatus) bool { return count(hs, h1) == 1 })
	var first int
	for i, h := range f.hashes() {
		if h == h1 {
			first = i
		}
	}
	// The device goes offline before reporting: pending, not failed.
	f.status.mu.Lock()
	delete(f.status.st, f.name(first))
	f.status.mu.Unlock()
	f.c.DeviceStatusChanged(f.name(first))
	f.clock.Advance(30 * time.Second)
	f.c.StatusChanged()
	f.await("offline device pending", func(_ []string, rs *schema.RolloutStatus) bool {
		return rs.Failed == 0 && strings.Contains(rs.Waiting, "offline")
	})
	f.clock.Advance(31 * time.Second)
	f.c.StatusChanged()
	f.await("the rollout goes on without it", func(hs []string, rs *schema.RolloutStatus) bool {
		return rs.Failed == 0 && rs.Step == 2 && count(hs, h1) == 2
	})
}
