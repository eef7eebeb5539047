package reconcile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// initPod is a pod with init containers i0 and i1 (images setup and
// migrate) before its container c0.
func initPod(name string, policy schema.RestartPolicy, app string) schema.Pod {
	p := pod(name, policy, app)
	p.Spec.InitContainers = []schema.Container{{Name: "i0", Image: "setup:1"}, {Name: "i1", Image: "migrate:1"}}
	schema.DefaultPodSpec(&p.Spec)
	return p
}

// done is the record of a completed init container.
func done(at time.Time) state.Record {
	return state.Record{ExitSeen: true, Done: true, LastExitAt: at}
}

func TestDiffInitContainers(t *testing.T) {
	ini := initPod("ini", schema.RestartAlways, "app:1")
	never := initPod("ini", schema.RestartNever, "app:1")
	plain := pod("ini", schema.RestartAlways, "app:0") // the version before init containers
	k := func(c string) state.Key { return key(ini, c) }
	earlier := t0.Add(-time.Minute)

	tests := []struct {
		name     string
		desired  []schema.Pod
		observed []runtime.Container
		hist     state.History
		want     string
		// wantHist checks a record of the next history.
		wantKey  string
		wantRec  func(state.Record) bool
		wantExit string
	}{
		{name: "only the first init container is created", desired: []schema.Pod{ini}, want: "create ini/i0"},
		{
			name: "a running init container holds the rest back", desired: []schema.Pod{ini},
			observed: []runtime.Container{ctr(k("i0"), runtime.StateRunning)}, want: "",
		},
		{
			name: "a completed init container lets the next one start in the same pass", desired: []schema.Pod{ini},
			observed: []runtime.Container{exited(k("i0"), 0, t0)}, want: "create ini/i1",
			wantKey: "i0", wantRec: func(r state.Record) bool { return completed(r) }, wantExit: "i0 code 0 init",
		},
		{
			name: "all completed: the container is created", desired: []schema.Pod{ini},
			observed: []runtime.Container{exited(k("i0"), 0, earlier), exited(k("i1"), 0, t0)},
			hist:     state.History{k("i0"): done(earlier)},
			want:     "create ini/c0", wantExit: "i1 code 0 init",
		},
		{
			name: "completed and running: nothing to do", desired: []schema.Pod{ini},
			observed: []runtime.Container{exited(k("i0"), 0, earlier), exited(k("i1"), 0, earlier), ctr(k("c0"), runtime.StateRunning)},
			hist:     state.History{k("i0"): done(earlier), k("i1"): done(earlier)},
			want:     "",
		},
		{
			name: "a completed init container deleted by someone is not run again", desired: []schema.Pod{ini},
			hist: state.History{k("i0"): done(earlier)}, want: "create ini/i1",
		},
		{
			name: "a failed init container is retried after the crash-loop backoff, holding the rest", desired: []schema.Pod{ini},
			observed: []runtime.Container{exited(k("i0"), 1, t0)}, want: "wait ini/i0 CrashLoopBackOff 10s",
			wantExit: "i0 code 1 restart init",
		},
		{
			name: "its backoff over: restarted", desired: []schema.Pod{ini},
			observed: []runtime.Container{exited(k("i0"), 1, earlier)},
			hist:     state.History{k("i0"): {ExitSeen: true, LastExitCode: 1, LastExitAt: earlier, Delay: 10 * time.Second, NotBefore: earlier.Add(10 * time.Second)}},
			want:     "restart ini/i0",
		},
		{
			name: "restart policy Never: a failed init container fails the pod", desired: []schema.Pod{never},
			observed: []runtime.Container{exited(key(never, "i0"), 1, t0)}, want: "",
			wantExit: "i0 code 1 init",
		},
		{
			name: "a pull failure of an init container waits for its retry", desired: []schema.Pod{ini},
			hist: state.History{k("i0"): {Failures: 1, RetryAt: t0.Add(30 * time.Second), Reason: ReasonErrImagePull}},
			want: "wait ini/i0 ImagePullBackOff 30s",
		},
		{
			name: "a pod gaining init containers: every new image is prepared while the old version runs", desired: []schema.Pod{ini},
			observed: []runtime.Container{ctr(key(plain, "c0"), runtime.StateRunning)},
			want:     "prepare ini/i0; prepare ini/i1; prepare ini/c0",
		},
		{
			name: "one held image not prepared yet: the old version keeps running", desired: []schema.Pod{ini},
			observed: []runtime.Container{ctr(key(plain, "c0"), runtime.StateRunning)},
			hist:     state.History{k("i0"): {Prepared: true}, k("i1"): {Prepared: true}},
			want:     "prepare ini/c0",
		},
		{
			name: "all prepared: the old version goes, the first init container replaces it", desired: []schema.Pod{ini},
			observed: []runtime.Container{ctr(key(plain, "c0"), runtime.StateRunning)},
			hist:     state.History{k("i0"): {Prepared: true}, k("i1"): {Prepared: true}, k("c0"): {Prepared: true}},
			want:     "remove ini/c0 (SpecChanged); create ini/i0 replace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Diff(tt.desired, tt.observed, nil, tt.hist.Clone(), nil, t0, Policy{CrashLoop: DefaultCrashLoop})
			if got := summary(p); got != tt.want {
				t.Errorf("plan:\n got %q\nwant %q", got, tt.want)
			}
			if tt.wantKey != "" {
				if rec := p.History[k(tt.wantKey)]; !tt.wantRec(rec) {
					t.Errorf("record of %s: %+v", tt.wantKey, rec)
				}
			}
			var exits []string
			for _, ex := range p.Exits {
				s := fmt.Sprintf("%s code %d", ex.Key.Container, ex.Code)
				if ex.Restart {
					s += " restart"
				}
				if ex.Init {
					s += " init"
				}
				exits = append(exits, s)
			}
			if got := strings.Join(exits, "; "); got != tt.wantExit {
				t.Errorf("exits = %q, want %q", got, tt.wantExit)
			}
		})
	}
}

// TestInitContainersCompleteOnceAcrossPasses walks a pod through its
// init containers pass by pass, feeding each plan's history to the next,
// as the reconciler (and a restarted agent, from agent.json) does.
func TestInitContainersCompleteOnceAcrossPasses(t *testing.T) {
	ini := initPod("ini", schema.RestartOnFailure, "app:1")
	k := func(c string) state.Key { return key(ini, c) }
	pol := Policy{CrashLoop: DefaultCrashLoop}
	var hist state.History

	step := func(now time.Time, observed []runtime.Container, want string) {
		t.Helper()
		p := Diff([]schema.Pod{ini}, observed, nil, hist, nil, now, pol)
		if got := summary(p); got != want {
			t.Fatalf("at %v: plan %q, want %q", now.Sub(t0), got, want)
		}
		hist = p.History
	}
	step(t0, nil, "create ini/i0")
	step(t0.Add(time.Second), []runtime.Container{exited(k("i0"), 0, t0.Add(time.Second))}, "create ini/i1")
	step(t0.Add(2*time.Second), []runtime.Container{exited(k("i0"), 0, t0.Add(time.Second)), exited(k("i1"), 0, t0.Add(2*time.Second))}, "create ini/c0")
	all := []runtime.Container{exited(k("i0"), 0, t0.Add(time.Second)), exited(k("i1"), 0, t0.Add(2*time.Second)), ctr(k("c0"), runtime.StateRunning)}
	step(t0.Add(3*time.Second), all, "")

	// The app crashes and is restarted; the init containers are not.
	crashed := append(all[:2:2], exited(k("c0"), 1, t0.Add(4*time.Second)))
	step(t0.Add(4*time.Second), crashed, "wait ini/c0 CrashLoopBackOff 14s")
	step(t0.Add(15*time.Second), crashed, "restart ini/c0")

	// Persisted and loaded back (a restarted agent), the init
	// containers are still complete, even if someone deleted them.
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.SaveAgent(state.Agent{Version: state.LayoutVersion, Containers: hist}); err != nil {
		t.Fatal(err)
	}
	ag, err := dir.LoadAgent()
	if err != nil {
		t.Fatal(err)
	}
	hist = ag.Containers
	step(t0.Add(16*time.Second), []runtime.Container{ctr(k("c0"), runtime.StateRunning)}, "")
}
