package reconcile

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// execCodes answers the Fake's exec probes: the exit code set for the
// command's first word (0 when unset).
type execCodes struct {
	mu    sync.Mutex
	codes map[string]int
}

func (e *execCodes) set(cmd string, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.codes == nil {
		e.codes = map[string]int{}
	}
	e.codes[cmd] = code
}

func (e *execCodes) handle(_ context.Context, _ string, cmd []string) (int, []byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.codes[cmd[0]], nil, nil
}

// TestReconcilerLivenessProbeRestarts: a liveness probe that fails
// failureThreshold times in a row gets the container stopped and
// restarted through the crash-loop backoff, with events naming the
// probe, and RESTARTS grows; a healthy container is left alone.
func TestReconcilerLivenessProbeRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		var ex execCodes
		h.rt.SetExecHandler(ex.handle)
		h.start()
		defer h.stop()
		web := probed("web", schema.RestartAlways, func(c *schema.Container) {
			c.LivenessProbe = &schema.Probe{Exec: &schema.ExecAction{Command: []string{"cat", "/tmp/healthy"}}, PeriodSeconds: 1, FailureThreshold: 2}
		})
		id := idOf(web, "c0")
		h.offer(1, web)
		for range 5 {
			h.advance(time.Second)
		}
		if h.rt.Calls().Start != 1 || h.rt.Calls().Exec != 6 {
			t.Fatalf("healthy container: calls %+v", h.rt.Calls())
		}

		ex.set("cat", 1)
		h.advance(time.Second)
		if h.state(id) != runtime.StateRunning {
			t.Fatal("stopped after one failure of two")
		}
		h.advance(time.Second)
		if h.state(id) != runtime.StateExited {
			t.Fatalf("container is %s after two failures", h.state(id))
		}
		st := h.getStatus().Pods[0]
		if st.Containers[0].Reason != ReasonCrashLoopBackOff || st.Ready {
			t.Fatalf("status after the kill: %+v", st)
		}
		ex.set("cat", 0)
		h.advance(DefaultCrashLoop.Initial)
		if h.state(id) != runtime.StateRunning || h.rt.Calls().Start != 2 {
			t.Fatalf("not restarted after the backoff: %s, %+v", h.state(id), h.rt.Calls())
		}
		if st := h.getStatus().Pods[0]; st.Restarts != 1 || !st.Ready || st.Phase != schema.PhaseRunning {
			t.Fatalf("status after the restart: %+v", st)
		}
		h.mu.Lock()
		events := slices.Clone(h.events)
		h.mu.Unlock()
		var seq []string
		for _, e := range events {
			if r := strings.Fields(e)[0]; r == "Unhealthy" || r == "Killing" || r == "Exited" || r == "Started" {
				seq = append(seq, r)
			}
		}
		if want := []string{"Started", "Unhealthy", "Killing", "Exited", "Started"}; !slices.Equal(seq, want) {
			t.Errorf("events %v, want %v (all: %v)", seq, want, events)
		}
		// The new run is probed afresh and healthy: no further restart.
		for range 10 {
			h.advance(time.Second)
		}
		if h.rt.Calls().Start != 2 {
			t.Fatalf("restarted again: %+v", h.rt.Calls())
		}
	})
}

// TestReconcilerReadinessProbe: a container is running but not ready
// until its readiness probe passes; the status changes as soon as the
// probe's verdict does, without waiting for a resync.
func TestReconcilerReadinessProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		var ex execCodes
		ex.set("ready", 1)
		h.rt.SetExecHandler(ex.handle)
		h.start()
		defer h.stop()
		web := probed("web", schema.RestartAlways, func(c *schema.Container) {
			c.ReadinessProbe = &schema.Probe{Exec: &schema.ExecAction{Command: []string{"ready"}}, PeriodSeconds: 2, FailureThreshold: 1}
		})
		h.offer(1, web)
		st := h.getStatus().Pods[0]
		want := "c0: readiness probe failed: exec [ready]: exit code 1"
		if st.Phase != schema.PhaseRunning || st.Ready || st.Message != want {
			t.Fatalf("status = %+v, want Running, not ready, %q", st, want)
		}
		ex.set("ready", 0)
		h.advance(2 * time.Second) // one period; the resync is 30 s away
		if st := h.getStatus().Pods[0]; !st.Ready || st.Message != "" {
			t.Fatalf("status after the probe passed: %+v", st)
		}
		ex.set("ready", 1)
		h.advance(2 * time.Second)
		if st := h.getStatus().Pods[0]; st.Ready || st.Message != want || st.Restarts != 0 {
			t.Fatalf("status after the probe failed again: %+v", st)
		}
		if h.rt.Calls().Start != 1 {
			t.Error("a readiness failure restarted the container")
		}
	})
}

// TestReconcilerInitContainers: init containers run one at a time, in
// order, to completion, before the container; a failing one is retried
// with backoff and holds the rest back; completed ones do not run again,
// across a restart of the reconciler too.
func TestReconcilerInitContainers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		h := newHarness(t, root, nil, nil)
		h.start()
		ini := initPod("ini", schema.RestartAlways, "app:1")
		i0, i1, c0 := idOf(ini, "i0"), idOf(ini, "i1"), idOf(ini, "c0")
		h.offer(1, ini)
		if h.state(i0) != runtime.StateRunning || h.state(i1) != "missing" || h.state(c0) != "missing" {
			t.Fatalf("states %s %s %s", h.state(i0), h.state(i1), h.state(c0))
		}
		if st := h.getStatus().Pods[0]; st.Phase != schema.PhasePending || st.Containers[0].Reason != "Init:0/2" {
			t.Fatalf("status while i0 runs: %+v", st)
		}
		if err := h.rt.Exit(i0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h.state(i1) != runtime.StateRunning || h.state(c0) != "missing" {
			t.Fatalf("after i0: %s %s", h.state(i1), h.state(c0))
		}
		if err := h.rt.Exit(i1, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st := h.getStatus().Pods[0]
		if st.Phase != schema.PhasePending || st.Containers[0].Reason != ReasonInitCrashLoopBackOff ||
			st.Message != "init container i1 failed (exit code 1); retrying in 10s" {
			t.Fatalf("status after i1 failed: %+v", st)
		}
		h.advance(DefaultCrashLoop.Initial)
		if h.state(i1) != runtime.StateRunning || h.state(c0) != "missing" {
			t.Fatalf("i1 not retried: %s %s", h.state(i1), h.state(c0))
		}
		if err := h.rt.Exit(i1, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h.state(c0) != runtime.StateRunning {
			t.Fatalf("c0 is %s after the init containers completed", h.state(c0))
		}
		if st := h.getStatus().Pods[0]; st.Phase != schema.PhaseRunning || !st.Ready {
			t.Fatalf("status = %+v", st)
		}
		var creates []string
		for _, op := range h.rt.Ops() {
			if strings.HasPrefix(op, "create ") {
				creates = append(creates, strings.TrimPrefix(op, "create "))
			}
		}
		if !slices.Equal(creates, []string{i0, i1, c0}) {
			t.Errorf("created %v, want i0, i1, c0 in order", creates)
		}

		// A new reconciler on the same state directory, the init
		// containers deleted meanwhile: they are not run again.
		h.stop()
		for _, id := range []string{i0, i1} {
			if err := h.rt.Remove(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		h2 := newHarness(t, root, h.clk, h.rt)
		h2.start()
		defer h2.stop()
		h2.advance(time.Minute)
		if h2.state(i0) != "missing" || h2.state(i1) != "missing" || h2.state(c0) != runtime.StateRunning {
			t.Fatalf("after the restart: %s %s %s", h2.state(i0), h2.state(i1), h2.state(c0))
		}
	})
}

// TestReconcilerInitContainerNever: under restartPolicy Never a failed
// init container fails the pod; the container is never created.
func TestReconcilerInitContainerNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.start()
		defer h.stop()
		ini := initPod("ini", schema.RestartNever, "app:1")
		h.offer(1, ini)
		if err := h.rt.Exit(idOf(ini, "i0"), 2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.advance(time.Hour)
		st := h.getStatus()
		if p := st.Pods[0]; p.Phase != schema.PhaseFailed || p.Containers[0].Reason != ReasonInitError ||
			p.Message != "init container i0 failed (exit code 2); restart policy Never" {
			t.Fatalf("status = %+v", p)
		}
		if h.state(idOf(ini, "i1")) != "missing" || h.state(idOf(ini, "c0")) != "missing" || h.rt.Calls().Start != 1 {
			t.Fatalf("ran after a failed init container: %+v", h.rt.Ops())
		}
		if st.ObservedGeneration != 1 {
			t.Errorf("observedGeneration %d", st.ObservedGeneration)
		}
	})
}
