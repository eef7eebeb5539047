package reconcile

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// steadyRev is p as a steady revision since at.
func steadyRev(p schema.Pod, at time.Time) *state.Revision {
	sp := p
	sp.Hash = schema.PodSpecHash(p.Spec)
	return &state.Revision{Pod: sp, Since: at}
}

// quickExit is c exited with code after running for ran, at t0.
func quickExit(k state.Key, code int32, ran time.Duration) runtime.Container {
	c := exited(k, code, t0)
	c.StartedAt = t0.Add(-ran)
	return c
}

// rolloutSummary renders a plan's rollbacks and steadied pods.
func rolloutSummary(p Plan) string {
	var b []string
	for _, rb := range p.RolledBack {
		b = append(b, fmt.Sprintf("rollback %s to %s: %s (%s)", rb.Pod, shortHash(rb.To), rb.Failure.Reason, rb.Failure.Message))
	}
	for _, st := range p.Steadied {
		prev := st.Previous
		if prev != "" {
			prev = " after " + shortHash(prev)
		}
		b = append(b, "steady "+st.Pod+" "+shortHash(st.Hash)+prev)
	}
	return strings.Join(b, "; ")
}

// TestDiffRollout: a new revision that never starts goes back to the
// pod's steady revision; a first install, a completed job and an exit
// after running steadily do not.
func TestDiffRollout(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	v3 := pod("web", schema.RestartAlways, "app:3")
	h1, h2 := schema.PodSpecHash(v1.Spec), schema.PodSpecHash(v2.Spec)
	once1 := pod("once", schema.RestartNever, "job:1")
	once2 := pod("once", schema.RestartNever, "job:2")
	job1 := pod("job", schema.RestartOnFailure, "job:1")
	job2 := pod("job", schema.RestartOnFailure, "job:2")
	steady := func(p schema.Pod) state.Rollouts {
		return state.Rollouts{p.Name: {Steady: steadyRev(p, t0.Add(-time.Hour))}}
	}
	failed := func(p schema.Pod, desired schema.Pod) state.Rollouts {
		return state.Rollouts{p.Name: {Steady: steadyRev(p, t0.Add(-time.Hour)), Failed: &state.Failure{
			Hash: schema.PodSpecHash(desired.Spec), Container: "c0", Reason: ReasonCrashLoopBackOff, ExitCode: 1, Attempts: 3,
			Message: "container c0: exit code 1, 3 times", At: t0.Add(-time.Minute),
		}}}
	}
	crashing := func(n int32) state.History { // v2's c0 after n-1 quick exits and a restart
		return state.History{key(v2, "c0"): {ExitSeen: true, LastExitAt: t0.Add(-time.Minute), Delay: 20 * time.Second, Restarts: n - 1, FailedStarts: n - 1, Prepared: true}}
	}
	tests := []struct {
		name     string
		desired  []schema.Pod
		observed []runtime.Container
		hist     state.History
		rollouts state.Rollouts
		want     string // actions and waits
		rolled   string // rollbacks and steadied pods
		failed   string // the hash of the failed revision remembered ("" none)
	}{
		{
			name:     "first install: no steady revision, crash loop with backoff",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 1, 0)},
			hist:     crashing(3),
			want:     "wait web/c0 CrashLoopBackOff 40s",
		},
		{
			name:     "replaced revision, second quick exit: still trying",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 1, time.Second)},
			hist:     crashing(2),
			rollouts: steady(v1),
			want:     "wait web/c0 CrashLoopBackOff 40s",
		},
		{
			name:     "replaced revision, third quick exit: back to the steady revision",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 1, time.Second)},
			hist:     crashing(3),
			rollouts: steady(v1),
			want:     "remove web/c0 (RevisionFailed); create web/c0 replace",
			rolled:   "rollback web to " + shortHash(h1) + ": CrashLoopBackOff (container c0: exit code 1, 3 times)",
			failed:   h2,
		},
		{
			name:     "an exit after running steadily is a crash, not a failed start",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 1, 31*time.Second)},
			hist:     crashing(3),
			rollouts: steady(v1),
			want:     "wait web/c0 CrashLoopBackOff 40s",
		},
		{
			name:     "exit code 0 under Always before running steadily is a failed start",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 0, time.Second)},
			hist:     crashing(3),
			rollouts: steady(v1),
			want:     "remove web/c0 (RevisionFailed); create web/c0 replace",
			rolled:   "rollback web to " + shortHash(h1) + ": CrashLoopBackOff (container c0: exit code 0, 3 times)",
			failed:   h2,
		},
		{
			name:     "three failures to start: back to the steady revision",
			desired:  []schema.Pod{v2},
			hist:     state.History{key(v2, "c0"): {Failures: 3, FailedStarts: 3, Reason: ReasonStartError, Message: "exec: no such file", RetryAt: t0.Add(time.Minute), Prepared: true}},
			rollouts: steady(v1),
			want:     "create web/c0",
			rolled:   "rollback web to " + shortHash(h1) + ": RunContainerError (container c0: RunContainerError: exec: no such file, 3 times)",
			failed:   h2,
		},
		{
			name:     "failed pulls of a new revision never count: the old version keeps running",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)},
			hist:     state.History{key(v2, "c0"): {Failures: 5, Reason: ReasonErrImagePull, RetryAt: t0.Add(time.Minute)}},
			rollouts: steady(v1),
			want:     "wait web/c0 ImagePullBackOff 1m0s",
		},
		{
			name:     "the failed revision is not retried",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)},
			rollouts: failed(v1, v2),
			want:     "",
			failed:   h2,
		},
		{
			name:     "the failed revision is not retried by a restarted agent that finds it",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{quickExit(key(v2, "c0"), 1, 0)},
			rollouts: failed(v1, v2),
			want:     "remove web/c0 (RevisionFailed); create web/c0 replace",
			failed:   h2,
		},
		{
			name:     "a new desired revision clears the failure and replaces the steady one",
			desired:  []schema.Pod{v3},
			observed: []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)},
			rollouts: failed(v1, v2),
			want:     "prepare web/c0",
		},
		{
			name:     "an undo to the steady revision clears the failure",
			desired:  []schema.Pod{v1},
			observed: []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)},
			rollouts: failed(v1, v2),
			want:     "",
		},
		{
			name:     "Never: a quick failure is final at once",
			desired:  []schema.Pod{once2},
			observed: []runtime.Container{quickExit(key(once2, "c0"), 2, time.Second)},
			rollouts: steady(once1),
			want:     "remove once/c0 (RevisionFailed); create once/c0 replace",
			rolled:   "rollback once to " + shortHash(schema.PodSpecHash(once1.Spec)) + ": Error (container c0: exit code 2, restart policy Never)",
			failed:   schema.PodSpecHash(once2.Spec),
		},
		{
			name:     "OnFailure: a quick exit 0 completes the revision, it is steady",
			desired:  []schema.Pod{job2},
			observed: []runtime.Container{quickExit(key(job2, "c0"), 0, time.Second)},
			rollouts: steady(job1),
			want:     "",
			rolled:   "steady job " + shortHash(schema.PodSpecHash(job2.Spec)) + " after " + shortHash(schema.PodSpecHash(job1.Spec)),
		},
		{
			name:     "last good: a revision replaced as desired before it was steady becomes steady while it runs",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)},
			hist:     state.History{key(v2, "c0"): {Failures: 2, Reason: ReasonErrImagePull, RetryAt: t0.Add(time.Minute)}},
			rollouts: state.Rollouts{"web": {Current: steadyRev(v1, time.Time{})}},
			want:     "wait web/c0 ImagePullBackOff 1m0s",
			rolled:   "steady web " + shortHash(h1),
		},
		{
			name:     "last good: a crashing later revision goes back to it",
			desired:  []schema.Pod{v3},
			observed: []runtime.Container{quickExit(key(v3, "c0"), 1, time.Second)},
			hist:     state.History{key(v3, "c0"): {ExitSeen: true, LastExitAt: t0.Add(-time.Minute), Delay: 20 * time.Second, Restarts: 2, FailedStarts: 2, Prepared: true}},
			rollouts: state.Rollouts{"web": {Steady: steadyRev(v1, t0.Add(-time.Minute)), Current: steadyRev(v3, time.Time{})}},
			want:     "remove web/c0 (RevisionFailed); create web/c0 replace",
			rolled:   "rollback web to " + shortHash(h1) + ": CrashLoopBackOff (container c0: exit code 1, 3 times)",
			failed:   schema.PodSpecHash(v3.Spec),
		},
		{
			name:     "running for SteadyAfter makes the revision steady",
			desired:  []schema.Pod{v2},
			observed: []runtime.Container{ctr(key(v2, "c0"), runtime.StateRunning)},
			hist:     crashing(3),
			rollouts: steady(v1),
			want:     "",
			rolled:   "steady web " + shortHash(h2) + " after " + shortHash(h1),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := tt.rollouts.Clone()
			p := Diff(tt.desired, tt.observed, nil, tt.hist.Clone(), ro, t0, Policy{})
			if got := summary(p); got != tt.want {
				t.Errorf("plan:\n got %q\nwant %q", got, tt.want)
			}
			if got := rolloutSummary(p); got != tt.rolled {
				t.Errorf("rollout:\n got %q\nwant %q", got, tt.rolled)
			}
			var failed string
			if f := p.Rollouts[tt.desired[0].Name].Failed; f != nil {
				failed = f.Hash
			}
			if failed != tt.failed {
				t.Errorf("failed revision remembered: %q, want %q", failed, tt.failed)
			}
			if len(ro) != len(tt.rollouts) || fmt.Sprint(ro) != fmt.Sprint(tt.rollouts) {
				t.Errorf("Diff modified its rollouts argument")
			}
			for _, ex := range p.Exits {
				if gaveUp := len(p.RolledBack) > 0; ex.GaveUp != gaveUp || (gaveUp && ex.Restart) {
					t.Errorf("exit %+v: GaveUp should be %v, and such an exit not restarted", ex, gaveUp)
				}
			}
			if len(p.RolledBack) > 0 || failed != "" {
				// The pods run are the steady revisions; their hashes name
				// the workers and the wanted containers.
				if got := p.Pods[0].Hash; got != p.Rollouts[tt.desired[0].Name].Steady.Pod.Hash || p.Hashes[tt.desired[0].Name] != got {
					t.Errorf("pod run %s (hashes %v), want the steady revision", got, p.Hashes)
				}
			}
		})
	}
}

// TestDiffSteady: a revision is steady when every container has run
// SteadyAfter; until then the plan asks to be woken when it will be.
func TestDiffSteady(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	two := pod("two", schema.RestartAlways, "a", "b")
	running := func(k state.Key, since time.Duration) runtime.Container {
		c := ctr(k, runtime.StateRunning)
		c.StartedAt = t0.Add(-since)
		return c
	}
	pol := Policy{SteadyAfter: 30 * time.Second}

	p := Diff([]schema.Pod{v1}, []runtime.Container{running(key(v1, "c0"), 10*time.Second)}, nil, nil, nil, t0, pol)
	if len(p.Steadied) != 0 || !p.SteadyCheck.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after 10s: steadied %v, check at %v; want none, check at +20s", p.Steadied, p.SteadyCheck.Sub(t0))
	}
	if w, ok := p.NextWake(); !ok || !w.Equal(p.SteadyCheck) {
		t.Fatalf("NextWake = %v %v, want the steady check", w, ok)
	}
	p = Diff([]schema.Pod{v1}, []runtime.Container{running(key(v1, "c0"), 30*time.Second)}, nil, p.History, p.Rollouts, t0, pol)
	r := p.Rollouts["web"]
	if len(p.Steadied) != 1 || r.Steady == nil || r.Steady.Pod.Hash != schema.PodSpecHash(v1.Spec) || r.Previous != nil || !r.Steady.Since.Equal(t0) {
		t.Fatalf("after 30s: %+v", r)
	}
	// Steady already: nothing more to do.
	p = Diff([]schema.Pod{v1}, []runtime.Container{running(key(v1, "c0"), time.Hour)}, nil, p.History, p.Rollouts, t0.Add(time.Hour), pol)
	if len(p.Steadied) != 0 || !p.SteadyCheck.IsZero() || p.Rollouts["web"].Steady.Since != t0 {
		t.Fatalf("steady revision marked again: %+v", p.Rollouts["web"])
	}
	// The next revision becomes steady in turn; the first is kept as the
	// previous one.
	p = Diff([]schema.Pod{v2}, []runtime.Container{running(key(v2, "c0"), time.Minute)}, nil, p.History, p.Rollouts, t0.Add(2*time.Hour), pol)
	r = p.Rollouts["web"]
	if r.Steady.Pod.Hash != schema.PodSpecHash(v2.Spec) || r.Previous == nil || r.Previous.Pod.Hash != schema.PodSpecHash(v1.Spec) {
		t.Fatalf("after v2 ran: %+v", r)
	}
	// Every container must have run SteadyAfter.
	p = Diff([]schema.Pod{two}, []runtime.Container{running(key(two, "c0"), time.Hour), running(key(two, "c1"), 5*time.Second)}, nil, nil, nil, t0, pol)
	if len(p.Steadied) != 0 || !p.SteadyCheck.Equal(t0.Add(25*time.Second)) {
		t.Fatalf("half steady pod: steadied %v, check %v", p.Steadied, p.SteadyCheck.Sub(t0))
	}
	// A pod no longer desired is forgotten.
	if p := Diff(nil, nil, nil, nil, state.Rollouts{"web": {Steady: steadyRev(v1, t0)}}, t0, pol); len(p.Rollouts) != 0 {
		t.Fatalf("rollouts of undesired pods kept: %v", p.Rollouts)
	}
}

// TestPodStatusesAfterRollback: the status of a pod whose new revision
// failed is that of the revision that runs (its hash, phase, readiness and
// images), with failedRevision naming the new one, its failing container
// and reason; its message says the previous version runs again, once it
// does.
func TestPodStatusesAfterRollback(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1", "side:1")
	v2 := pod("web", schema.RestartAlways, "app:2", "side:1")
	h1, h2 := schema.PodSpecHash(v1.Spec), schema.PodSpecHash(v2.Spec)
	ro := state.Rollouts{"web": {Steady: steadyRev(v1, t0), Failed: &state.Failure{
		Hash: h2, Container: "c0", Reason: ReasonCrashLoopBackOff, ExitCode: 1, Attempts: 3, Message: "container c0: exit code 1, 3 times", At: t0,
	}}}
	obs := []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning), ctr(key(v1, "c1"), runtime.StateRunning)}
	got := PodStatuses([]schema.Pod{v2}, obs, nil, nil, ro, nil, t0, nil)[0]
	want := "revision " + h2[:8] + " failed to start (container c0: exit code 1, 3 times); the previous version runs again"
	if got.Hash != h1 || got.Phase != schema.PhaseRunning || !got.Ready || got.Message != want {
		t.Fatalf("status = %+v\nwant hash %s (the steady revision), Running, ready, message %q", got, h1, want)
	}
	if c := got.Containers; len(c) != 2 || c[0].State != schema.ContainerRunning || c[0].Image != "app:1" || c[0].Reason != "" || c[1].Image != "side:1" {
		t.Fatalf("containers = %+v; want the steady revision's, running", c)
	}
	wantFR := schema.FailedRevision{Hash: h2, Container: "c0", Image: "app:2", Reason: ReasonCrashLoopBackOff, ExitCode: 1, Attempts: 3,
		Message: "container c0: exit code 1, 3 times", Time: timePtr(t0)}
	if fr := got.FailedRevision; fr == nil || !reflect.DeepEqual(*fr, wantFR) {
		t.Fatalf("failedRevision = %+v, want %+v", fr, wantFR)
	}
	if !got.RevisionFailed(h2) || got.RevisionFailed(h1) {
		t.Fatalf("RevisionFailed(h2) %v, RevisionFailed(h1) %v; want true, false", got.RevisionFailed(h2), got.RevisionFailed(h1))
	}
	if err := schema.ValidateDeviceStatus(&schema.DeviceStatus{Device: "d", Pods: []schema.PodStatus{got}}); err != nil {
		t.Fatal(err)
	}
	// While the previous version is not running yet: what holds it up.
	got = PodStatuses([]schema.Pod{v2}, nil, nil, nil, ro, map[string]bool{"web": true}, t0, nil)[0]
	if got.Phase != schema.PhasePending || got.Ready || got.Hash != h1 || got.FailedRevision == nil ||
		!strings.HasSuffix(got.Message, "; going back to the previous version") || got.Containers[0].Reason != ReasonCreating {
		t.Fatalf("status while going back = %+v", got)
	}
	// A failure of another revision is not this one's.
	got = PodStatuses([]schema.Pod{v1}, obs, nil, nil, ro, nil, t0, nil)[0]
	if got.Phase != schema.PhaseRunning || !got.Ready || got.Message != "" || got.FailedRevision != nil {
		t.Fatalf("status of the steady revision = %+v", got)
	}
}

// TestCheckRollouts: persisted revisions that are not valid pods of their
// name are forgotten (the agent would run them), and a failure with
// nothing to go back to with them.
func TestCheckRollouts(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	bad := pod("web", schema.RestartAlways, "app:1")
	bad.Spec.Containers[0].Name = "../../etc"
	other := pod("api", schema.RestartAlways, "app:1")
	in := state.Rollouts{
		"web":  {Steady: steadyRev(v1, t0), Previous: steadyRev(bad, t0)},
		"bad":  {Steady: steadyRev(bad, t0), Failed: &state.Failure{Hash: "x"}},
		"name": {Steady: steadyRev(other, t0)},
	}
	out := checkRollouts(in, slog.New(slog.DiscardHandler))
	if len(out) != 1 || out["web"].Steady == nil || out["web"].Previous != nil {
		t.Fatalf("checkRollouts = %+v", out)
	}
}

// TestDiffLastGoodSequence is the hole issue 44 found, pass by pass: v1
// starts; an update to a tag that cannot be pulled arrives before v1 has
// run SteadyAfter (v1 keeps running); v1 then runs on; a crashing v3 is
// applied. v1 is the steady revision by then, so the device goes back to
// it, keeps its image, and remembers v3 as failed.
func TestDiffLastGoodSequence(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:missing")
	v3 := pod("web", schema.RestartAlways, "app:crash")
	h1, h3 := schema.PodSpecHash(v1.Spec), schema.PodSpecHash(v3.Spec)
	pol := Policy{SteadyAfter: 30 * time.Second}
	run := func(k state.Key, since time.Time) runtime.Container {
		c := ctr(k, runtime.StateRunning)
		c.StartedAt = since
		return c
	}
	// v1 is created and runs for 5 s.
	p := Diff([]schema.Pod{v1}, nil, nil, nil, nil, t0, pol)
	if got := summary(p); got != "create web/c0" {
		t.Fatalf("v1: %s", got)
	}
	v1run := run(key(v1, "c0"), t0)
	p = Diff([]schema.Pod{v1}, []runtime.Container{v1run}, nil, p.History, p.Rollouts, t0.Add(5*time.Second), pol)
	if c := p.Rollouts["web"].Current; c == nil || c.Pod.Hash != h1 {
		t.Fatalf("v1 started: current = %+v, want v1", c)
	}
	// v2 arrives at 10 s; its image cannot be pulled: v1 runs on.
	now := t0.Add(10 * time.Second)
	p = Diff([]schema.Pod{v2}, []runtime.Container{v1run}, nil, p.History, p.Rollouts, now, pol)
	if got := summary(p); got != "prepare web/c0" {
		t.Fatalf("v2 arrives: %s", got)
	}
	hist := p.History.Clone()
	hist[key(v2, "c0")] = state.Record{Failures: 1, Reason: ReasonErrImagePull, RetryAt: now.Add(time.Hour)}
	p = Diff([]schema.Pod{v2}, []runtime.Container{v1run}, nil, hist, p.Rollouts, now, pol)
	if !p.SteadyCheck.Equal(t0.Add(30*time.Second)) || len(p.Steadied) != 0 {
		t.Fatalf("v2 unpullable at 10 s: steady check %v, steadied %v; want v1 checked at 30 s", p.SteadyCheck, p.Steadied)
	}
	// At 30 s v1, no longer desired, has run SteadyAfter: it is steady.
	p = Diff([]schema.Pod{v2}, []runtime.Container{v1run}, nil, p.History, p.Rollouts, t0.Add(30*time.Second), pol)
	if r := p.Rollouts["web"]; r.Steady == nil || r.Steady.Pod.Hash != h1 || r.Current != nil {
		t.Fatalf("at 30 s: rollout %+v, want v1 steady", r)
	}
	if needed, _ := gcInputs([]schema.Pod{v2}, nil, p); !containsString(needed, "app:1") {
		t.Fatalf("image GC keeps %v, want v1's image app:1 among them", needed)
	}
	// v3 arrives an hour later; it is pulled, replaces v1, crashes three times.
	now = t0.Add(time.Hour)
	p = Diff([]schema.Pod{v3}, []runtime.Container{v1run}, nil, p.History, p.Rollouts, now, pol)
	hist = p.History.Clone()
	hist[key(v3, "c0")] = state.Record{Prepared: true}
	p = Diff([]schema.Pod{v3}, []runtime.Container{v1run}, nil, hist, p.Rollouts, now, pol)
	if got := summary(p); got != "remove web/c0 (SpecChanged); create web/c0 replace" {
		t.Fatalf("v3 prepared: %s", got)
	}
	for i := range 3 {
		now = now.Add(time.Minute)
		c := quickExit(key(v3, "c0"), 1, time.Second)
		c.StartedAt, c.FinishedAt = now.Add(-time.Second), now
		p = Diff([]schema.Pod{v3}, []runtime.Container{c}, nil, p.History, p.Rollouts, now, pol)
		if i < 2 && len(p.RolledBack) != 0 {
			t.Fatalf("exit %d: rolled back early", i+1)
		}
	}
	r := p.Rollouts["web"]
	if len(p.RolledBack) != 1 || p.RolledBack[0].To != h1 || r.Failed == nil || r.Failed.Hash != h3 {
		t.Fatalf("after v3 crashed 3 times: rolled back %+v, rollout %+v; want back to v1, v3 failed", p.RolledBack, r)
	}
	if got := summary(p); got != "remove web/c0 (RevisionFailed); create web/c0 replace" || p.Pods[0].Spec.Containers[0].Image != "app:1" {
		t.Fatalf("way back: %s, runs %s", got, p.Pods[0].Spec.Containers[0].Image)
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
