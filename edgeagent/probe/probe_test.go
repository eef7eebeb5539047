package probe

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/schema"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeExec answers exec probes from per-command exit codes and counts
// the calls.
type fakeExec struct {
	mu    sync.Mutex
	codes map[string]int // by first argument; missing: 0
	block map[string]bool
	calls map[string]int
	total atomic.Int32
}

func newFakeExec() *fakeExec {
	return &fakeExec{codes: map[string]int{}, block: map[string]bool{}, calls: map[string]int{}}
}

func (f *fakeExec) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (int, []byte, error) {
	f.mu.Lock()
	f.calls[cmd[0]]++
	code, block := f.codes[cmd[0]], f.block[cmd[0]]
	f.mu.Unlock()
	defer f.total.Add(1)
	if block {
		return -1, nil, fmt.Errorf("exec %v: %w", cmd, context.DeadlineExceeded)
	}
	return code, []byte("secret output"), nil
}

func (f *fakeExec) set(cmd string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[cmd] = code
}

func (f *fakeExec) count(cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[cmd]
}

// events records events.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) Record(typ, reason, pod, container, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf("%s %s %s/%s: %s", typ, reason, pod, container, message))
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

type env struct {
	t    *testing.T
	clk  *clock.Fake
	exec *fakeExec
	ev   *events
	m    *Manager
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, clk: clock.NewFake(t0), exec: newFakeExec(), ev: &events{}}
	e.m = New(Options{Exec: e.exec, Clock: e.clk, Events: e.ev})
	t.Cleanup(e.m.Close)
	return e
}

// await polls cond (the probes run on their own goroutines).
func (e *env) await(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s (results %+v, timers %d)", what, e.m.Results(), e.clk.Timers())
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// settle waits until n probe workers wait on the clock after calls exec
// calls in all.
func (e *env) settle(calls int32, timers int) {
	e.t.Helper()
	e.await(fmt.Sprintf("%d exec calls and %d timers", calls, timers), func() bool {
		return e.exec.total.Load() == calls && e.clk.Timers() == timers
	})
}

// failed waits until the probes of id say it failed (a worker that
// stops arms no timer, so settle cannot tell it has judged).
func (e *env) failed(id string) {
	e.t.Helper()
	e.await(id+" failed", func() bool { return e.m.Results()[id].Failed != "" })
}

func (e *env) result(id string) Result {
	e.t.Helper()
	r, ok := e.m.Results()[id]
	if !ok {
		e.t.Fatalf("no result for %s: %+v", id, e.m.Results())
	}
	return r
}

func execProbe(cmd string) *schema.Probe {
	return &schema.Probe{Exec: &schema.ExecAction{Command: []string{cmd, "/tmp/healthy"}}}
}

func target(id string, c schema.Container) Target {
	c.Name = "app"
	return Target{ID: id, Pod: "web", Container: "app", StartedAt: t0, Spec: c}
}

// TestLivenessFailsAfterThreshold: three failures in a row, not two,
// fail the container, with an Unhealthy event naming the probe; the
// probe then stops.
func TestLivenessFailsAfterThreshold(t *testing.T) {
	e := newEnv(t)
	e.m.Sync([]Target{target("c1", schema.Container{LivenessProbe: execProbe("cat")})})
	e.settle(1, 1)
	if r := e.result("c1"); !r.Started || !r.Ready || r.Failed != "" {
		t.Fatalf("healthy result = %+v", r)
	}
	e.exec.set("cat", 1)
	e.clk.Advance(10 * time.Second)
	e.settle(2, 1)
	e.exec.set("cat", 0) // a success resets the count
	e.clk.Advance(10 * time.Second)
	e.settle(3, 1)
	e.exec.set("cat", 1)
	for i := int32(4); i <= 5; i++ {
		e.clk.Advance(10 * time.Second)
		e.settle(i, 1)
	}
	if r := e.result("c1"); r.Failed != "" {
		t.Fatalf("failed after two failures in a row: %+v", r)
	}
	select {
	case <-e.m.Changed(): // drain
	default:
	}
	e.clk.Advance(10 * time.Second)
	e.settle(6, 0) // the probe stopped
	e.failed("c1")
	want := "liveness probe failed: exec [cat /tmp/healthy]: exit code 1"
	if r := e.result("c1"); r.Failed != want || r.Ready {
		t.Fatalf("result = %+v, want Failed %q", r, want)
	}
	select {
	case <-e.m.Changed():
	default:
		t.Error("Changed not signalled")
	}
	if ev := e.ev.list(); !slices.Equal(ev, []string{"Warning Unhealthy web/app: " + want}) {
		t.Errorf("events = %q", ev)
	}
	for _, ev := range e.ev.list() {
		if strings.Contains(ev, "secret output") {
			t.Errorf("event carries the command's output: %q", ev)
		}
	}
}

// TestReadiness: not ready until the probe first passes; not ready after
// failureThreshold failures (one Unhealthy event, a stable message);
// ready again after successThreshold successes (a Ready event).
func TestReadiness(t *testing.T) {
	e := newEnv(t)
	p := execProbe("check")
	p.SuccessThreshold, p.FailureThreshold, p.PeriodSeconds = 2, 2, 5
	e.exec.set("check", 1)
	e.m.Sync([]Target{target("c1", schema.Container{ReadinessProbe: p})})
	e.settle(1, 1)
	if r := e.result("c1"); r.Ready || r.NotReady != "" || !r.Started {
		t.Fatalf("before any success: %+v", r)
	}
	e.clk.Advance(5 * time.Second)
	e.settle(2, 1)
	want := "readiness probe failed: exec [check /tmp/healthy]: exit code 1"
	if r := e.result("c1"); r.Ready || r.NotReady != want {
		t.Fatalf("after two failures: %+v", r)
	}
	e.exec.set("check", 0)
	e.clk.Advance(5 * time.Second)
	e.settle(3, 1)
	if r := e.result("c1"); r.Ready {
		t.Fatalf("ready after one success of two: %+v", r)
	}
	e.clk.Advance(5 * time.Second)
	e.settle(4, 1)
	if r := e.result("c1"); !r.Ready || r.NotReady != "" {
		t.Fatalf("after two successes: %+v", r)
	}
	e.exec.set("check", 1)
	for i := int32(5); i <= 7; i++ {
		e.clk.Advance(5 * time.Second)
		e.settle(i, 1)
	}
	if r := e.result("c1"); r.Ready || r.NotReady != want || r.Failed != "" {
		t.Fatalf("after failures: %+v", r)
	}
	wantEv := []string{
		"Warning Unhealthy web/app: " + want,
		"Normal Ready web/app: readiness probe succeeded: exec [check /tmp/healthy]: exit code 0",
		"Warning Unhealthy web/app: " + want,
	}
	if ev := e.ev.list(); !slices.Equal(ev, wantEv) {
		t.Errorf("events:\n%q\nwant\n%q", ev, wantEv)
	}
}

// TestStartupHoldsOthers: liveness and readiness probes do not run until
// the startup probe succeeds; then both run at once.
func TestStartupHoldsOthers(t *testing.T) {
	e := newEnv(t)
	e.exec.set("boot", 1)
	sp := execProbe("boot")
	sp.FailureThreshold, sp.PeriodSeconds = 30, 1
	e.m.Sync([]Target{target("c1", schema.Container{
		StartupProbe: sp, LivenessProbe: execProbe("live"), ReadinessProbe: execProbe("ready"),
	})})
	e.settle(1, 1)
	for i := int32(2); i <= 4; i++ {
		e.clk.Advance(time.Second)
		e.settle(i, 1)
	}
	if r := e.result("c1"); r.Started || r.Ready || r.Failed != "" {
		t.Fatalf("before startup: %+v", r)
	}
	if n, m := e.exec.count("live"), e.exec.count("ready"); n+m != 0 {
		t.Fatalf("liveness ran %d, readiness %d times before startup succeeded", n, m)
	}
	e.exec.set("boot", 0)
	e.clk.Advance(time.Second)
	e.settle(7, 2) // boot, then live and ready at once
	if r := e.result("c1"); !r.Started || !r.Ready {
		t.Fatalf("after startup: %+v", r)
	}
}

// TestStartupFails: a startup probe that fails failureThreshold times
// fails the container.
func TestStartupFails(t *testing.T) {
	e := newEnv(t)
	e.exec.set("boot", 1)
	sp := execProbe("boot")
	sp.FailureThreshold, sp.PeriodSeconds = 2, 1
	e.m.Sync([]Target{target("c1", schema.Container{StartupProbe: sp, LivenessProbe: execProbe("live")})})
	e.settle(1, 1)
	e.clk.Advance(time.Second)
	e.settle(2, 0)
	e.failed("c1")
	want := "startup probe failed: exec [boot /tmp/healthy]: exit code 1"
	if r := e.result("c1"); r.Failed != want || r.Started {
		t.Fatalf("result = %+v", r)
	}
	if e.exec.count("live") != 0 {
		t.Error("liveness ran without a startup")
	}
}

// TestInitialDelayAndTimeout: the first check waits initialDelaySeconds
// from the container's start (not from Sync); a check that times out is
// a failure saying so.
func TestInitialDelayAndTimeout(t *testing.T) {
	e := newEnv(t)
	p := execProbe("slow")
	p.InitialDelaySeconds, p.FailureThreshold, p.TimeoutSeconds = 30, 1, 2
	e.exec.block["slow"] = true
	e.clk.Advance(10 * time.Second) // the container started 10 s ago
	e.m.Sync([]Target{target("c1", schema.Container{ReadinessProbe: p})})
	e.settle(0, 1)
	e.clk.Advance(19 * time.Second)
	e.settle(0, 1)
	e.clk.Advance(time.Second)
	e.settle(1, 1)
	want := "readiness probe failed: exec [slow /tmp/healthy]: timed out after 2s"
	if r := e.result("c1"); r.NotReady != want {
		t.Fatalf("result = %+v, want NotReady %q", r, want)
	}
}

// TestSync: a new run of a container is probed afresh; a container no
// longer named is no longer probed; targets without probes are ignored.
func TestSync(t *testing.T) {
	e := newEnv(t)
	p := execProbe("cat")
	p.FailureThreshold = 1
	c := schema.Container{LivenessProbe: p}
	e.exec.set("cat", 1)
	e.m.Sync([]Target{target("c1", c), target("plain", schema.Container{})})
	e.settle(1, 0)
	e.failed("c1")
	if r := e.result("c1"); r.Failed == "" {
		t.Fatalf("result = %+v", r)
	}
	if _, ok := e.m.Results()["plain"]; ok {
		t.Error("a container without probes has a result")
	}
	// The same run again: nothing changes, nothing runs.
	e.m.Sync([]Target{target("c1", c)})
	e.settle(1, 0)

	e.exec.set("cat", 0)
	next := target("c1", c)
	next.StartedAt = t0.Add(time.Minute)
	e.clk.Advance(time.Minute)
	e.m.Sync([]Target{next})
	e.settle(2, 1)
	r := e.result("c1")
	if r.Failed != "" || !r.StartedAt.Equal(next.StartedAt) {
		t.Fatalf("new run = %+v", r)
	}
	if _, ok := e.m.Results().Current("c1", t0); ok {
		t.Error("Current returns the result of another run")
	}
	if _, ok := e.m.Results().Current("c1", next.StartedAt); !ok {
		t.Error("Current misses the result of the run")
	}

	e.m.Sync(nil)
	e.settle(2, 0)
	if len(e.m.Results()) != 0 {
		t.Errorf("results after Sync(nil): %+v", e.m.Results())
	}
	e.clk.Advance(time.Hour)
	if n := e.exec.total.Load(); n != 2 {
		t.Errorf("%d exec calls after the container went", n)
	}
}

// TestClose stops every probe; Sync after Close does nothing.
func TestClose(t *testing.T) {
	e := newEnv(t)
	e.m.Sync([]Target{target("c1", schema.Container{LivenessProbe: execProbe("cat")})})
	e.settle(1, 1)
	e.m.Close()
	e.m.Sync([]Target{target("c2", schema.Container{LivenessProbe: execProbe("cat")})})
	if len(e.m.Results()) != 0 {
		t.Errorf("results after Close: %+v", e.m.Results())
	}
}
