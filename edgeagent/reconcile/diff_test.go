package reconcile

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func pod(name string, policy schema.RestartPolicy, images ...string) schema.Pod {
	p := schema.Pod{Name: name, Spec: schema.PodSpec{RestartPolicy: policy}}
	for i, img := range images {
		p.Spec.Containers = append(p.Spec.Containers, schema.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	schema.DefaultPodSpec(&p.Spec)
	return p
}

func key(p schema.Pod, container string) state.Key {
	return state.Key{Pod: p.Name, Container: container, Hash: schema.PodSpecHash(p.Spec)}
}

func ctr(k state.Key, st runtime.State) runtime.Container {
	return runtime.Container{ID: ContainerID(k.Pod, k.Container, k.Hash), Pod: k.Pod, Name: k.Container, PodHash: k.Hash, State: st, StartedAt: t0.Add(-time.Hour)}
}

func exited(k state.Key, code int32, at time.Time) runtime.Container {
	c := ctr(k, runtime.StateExited)
	c.ExitCode, c.FinishedAt = code, at
	return c
}

// summary renders a plan's actions and waits compactly for comparison.
func summary(p Plan) string {
	var b []string
	for _, a := range p.Actions {
		s := a.Kind.String() + " " + a.Key.Pod + "/" + a.Key.Container
		if a.Reason != "" {
			s += " (" + a.Reason + ")"
		}
		if a.Replace {
			s += " replace"
		}
		b = append(b, s)
	}
	for _, w := range p.Waits {
		b = append(b, fmt.Sprintf("wait %s/%s %s %s", w.Key.Pod, w.Key.Container, w.Reason, w.Until.Sub(t0)))
	}
	return strings.Join(b, "; ")
}

func TestDiff(t *testing.T) {
	web := pod("web", schema.RestartAlways, "nginx:1")
	web2 := pod("web", schema.RestartAlways, "nginx:2")
	job := pod("job", schema.RestartOnFailure, "busybox")
	once := pod("once", schema.RestartNever, "busybox")
	two := pod("two", "", "a", "b")
	cl := DefaultCrashLoop

	tests := []struct {
		name     string
		desired  []schema.Pod
		observed []runtime.Container
		hist     state.History
		want     string
	}{
		{name: "nothing", want: ""},
		{name: "create missing", desired: []schema.Pod{web}, want: "create web/c0"},
		{name: "create in spec order", desired: []schema.Pod{two}, want: "create two/c0; create two/c1"},
		{name: "running is left alone", desired: []schema.Pod{web}, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)}, want: ""},
		{name: "not desired is removed", observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)}, want: "remove web/c0 (NotDesired)"},
		{
			name:     "hash change: the new image is prepared while the old version runs",
			desired:  []schema.Pod{web2},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)},
			want:     "prepare web/c0",
		},
		{
			name:     "hash change, prepared: remove first, then create",
			desired:  []schema.Pod{web2},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)},
			hist:     state.History{key(web2, "c0"): {Prepared: true}},
			want:     "remove web/c0 (SpecChanged); create web/c0 replace",
		},
		{
			name:     "hash change, pull failed: the old version keeps running through the backoff",
			desired:  []schema.Pod{web2},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)},
			hist:     state.History{key(web2, "c0"): {Failures: 1, RetryAt: t0.Add(10 * time.Second), Reason: ReasonErrImagePull}},
			want:     "wait web/c0 ImagePullBackOff 10s",
		},
		{
			name:     "hash change, pull failed, retry due: prepare again, nothing removed",
			desired:  []schema.Pod{web2},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)},
			hist:     state.History{key(web2, "c0"): {Failures: 3, RetryAt: t0, Reason: ReasonErrImagePull}},
			want:     "prepare web/c0",
		},
		{
			name:     "two containers: replace only when both are prepared",
			desired:  []schema.Pod{pod("two", "", "a:2", "b:2")},
			observed: []runtime.Container{ctr(key(two, "c0"), runtime.StateRunning), ctr(key(two, "c1"), runtime.StateRunning)},
			hist:     state.History{key(pod("two", "", "a:2", "b:2"), "c0"): {Prepared: true}},
			want:     "prepare two/c1",
		},
		{
			name:     "two containers, one in pull backoff: the old pod keeps both",
			desired:  []schema.Pod{pod("two", "", "a:2", "b:2")},
			observed: []runtime.Container{ctr(key(two, "c0"), runtime.StateRunning), ctr(key(two, "c1"), runtime.StateRunning)},
			hist: state.History{
				key(pod("two", "", "a:2", "b:2"), "c0"): {Prepared: true},
				key(pod("two", "", "a:2", "b:2"), "c1"): {Failures: 1, RetryAt: t0.Add(time.Minute), Reason: ReasonErrImagePull},
			},
			want: "wait two/c1 ImagePullBackOff 1m0s",
		},
		{
			name:     "removes, then replacements, then creates",
			desired:  []schema.Pod{job, web2},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning), ctr(key(once, "c0"), runtime.StateRunning)},
			hist:     state.History{key(web2, "c0"): {Prepared: true}},
			want:     "remove once/c0 (NotDesired); remove web/c0 (SpecChanged); create web/c0 replace; create job/c0",
		},
		{
			name:     "a new pod is created at once (nothing runs to keep)",
			desired:  []schema.Pod{web2, job},
			observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)},
			want:     "prepare web/c0; create job/c0",
		},
		{name: "created but never started is started", desired: []schema.Pod{web}, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateCreated)}, want: "start web/c0"},
		{
			name:     "exited under Always waits the first backoff",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{exited(key(web, "c0"), 0, t0)},
			want:     "wait web/c0 CrashLoopBackOff 10s",
		},
		{
			name:     "exited long ago under Always restarts",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{exited(key(web, "c0"), 1, t0.Add(-time.Minute))},
			want:     "restart web/c0",
		},
		{
			name:     "backoff elapsed restarts",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{exited(key(web, "c0"), 1, t0.Add(-20*time.Second))},
			hist:     state.History{key(web, "c0"): {ExitSeen: true, LastExitAt: t0.Add(-20 * time.Second), Delay: 10 * time.Second, NotBefore: t0.Add(-10 * time.Second)}},
			want:     "restart web/c0",
		},
		{
			name:    "second quick exit doubles the backoff",
			desired: []schema.Pod{web},
			observed: []runtime.Container{func() runtime.Container {
				c := exited(key(web, "c0"), 1, t0)
				c.StartedAt = t0.Add(-time.Second)
				return c
			}()},
			hist: state.History{key(web, "c0"): {ExitSeen: true, LastExitAt: t0.Add(-30 * time.Second), Delay: 10 * time.Second}},
			want: "wait web/c0 CrashLoopBackOff 20s",
		},
		{
			name:    "exit after a long run resets the backoff",
			desired: []schema.Pod{web},
			observed: []runtime.Container{func() runtime.Container {
				c := exited(key(web, "c0"), 1, t0)
				c.StartedAt = t0.Add(-11 * time.Minute)
				return c
			}()},
			hist: state.History{key(web, "c0"): {ExitSeen: true, LastExitAt: t0.Add(-12 * time.Minute), Delay: 160 * time.Second}},
			want: "wait web/c0 CrashLoopBackOff 10s",
		},
		{name: "OnFailure: exit 0 is done", desired: []schema.Pod{job}, observed: []runtime.Container{exited(key(job, "c0"), 0, t0)}, want: ""},
		{name: "OnFailure: exit 1 restarts after backoff", desired: []schema.Pod{job}, observed: []runtime.Container{exited(key(job, "c0"), 1, t0)}, want: "wait job/c0 CrashLoopBackOff 10s"},
		{name: "Never: exit 1 is done", desired: []schema.Pod{once}, observed: []runtime.Container{exited(key(once, "c0"), 1, t0)}, want: ""},
		{name: "Never: completed and deleted is not rerun", desired: []schema.Pod{once}, hist: state.History{key(once, "c0"): {Done: true, ExitSeen: true}}, want: ""},
		{
			name:    "failed pull waits for its retry",
			desired: []schema.Pod{web, job},
			hist:    state.History{key(web, "c0"): {Failures: 2, RetryAt: t0.Add(30 * time.Second), Reason: ReasonErrImagePull}},
			want:    "create job/c0; wait web/c0 ImagePullBackOff 30s",
		},
		{name: "failed pull retries when due", desired: []schema.Pod{web}, hist: state.History{key(web, "c0"): {Failures: 2, RetryAt: t0, Reason: ReasonErrImagePull}}, want: "create web/c0"},
		{
			name:     "duplicate keeps the canonical id",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{func() runtime.Container { c := ctr(key(web, "c0"), runtime.StateRunning); c.ID = "aaa-older"; return c }(), ctr(key(web, "c0"), runtime.StateRunning)},
			want:     "remove web/c0 (Duplicate)",
		},
		{name: "unlabelled is removed", desired: []schema.Pod{web}, observed: []runtime.Container{{ID: "stray", State: runtime.StateRunning}, ctr(key(web, "c0"), runtime.StateRunning)}, want: "remove / (Unlabelled)"},
		{name: "unknown state is left alone", desired: []schema.Pod{web}, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateUnknown)}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hist := tt.hist.Clone()
			p := Diff(tt.desired, tt.observed, nil, hist, nil, t0, Policy{CrashLoop: cl})
			if got := summary(p); got != tt.want {
				t.Errorf("plan:\n got %q\nwant %q", got, tt.want)
			}
			if len(hist) != len(tt.hist) {
				t.Errorf("Diff modified its history argument")
			}
		})
	}
}

// TestMatchObserved: which observed container each desired key keeps,
// and why the others go, whatever order the runtime lists them in.
func TestMatchObserved(t *testing.T) {
	web := pod("web", schema.RestartAlways, "nginx:1")
	web2 := pod("web", schema.RestartAlways, "nginx:2")
	withID := func(c runtime.Container, id string) runtime.Container { c.ID = id; return c }
	running := ctr(key(web, "c0"), runtime.StateRunning)
	canonical := running.ID
	tests := []struct {
		name     string
		desired  []schema.Pod
		observed []runtime.Container
		want     string
	}{
		{name: "one per key is kept", desired: []schema.Pod{web}, observed: []runtime.Container{running}, want: "keep web/c0 " + canonical},
		{
			name:     "the canonical id wins though it sorts last",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{running, withID(running, "aaa")},
			want:     "keep web/c0 " + canonical + "; remove aaa (Duplicate)",
		},
		{
			name:     "the canonical id wins though it sorts first",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{withID(running, "zzz"), running},
			want:     "keep web/c0 " + canonical + "; remove zzz (Duplicate)",
		},
		{
			name:     "no canonical id: the first by id wins",
			desired:  []schema.Pod{web},
			observed: []runtime.Container{withID(running, "zzz"), withID(running, "aaa"), withID(running, "mmm")},
			want:     "keep web/c0 aaa; remove mmm (Duplicate); remove zzz (Duplicate)",
		},
		{
			name:     "another spec of a desired pod is replaced",
			desired:  []schema.Pod{web2},
			observed: []runtime.Container{running},
			want:     "remove " + canonical + " (SpecChanged); replaced web",
		},
		{
			name:     "an undesired pod is not",
			observed: []runtime.Container{running, {ID: "stray"}},
			want:     "remove stray (Unlabelled); remove " + canonical + " (NotDesired)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hashes := map[string]string{}
			want, _ := desiredContainers(tt.desired, hashes)
			m := matchObserved(tt.observed, want, hashes)
			var got []string
			for k, c := range m.keep {
				got = append(got, "keep "+k.Pod+"/"+k.Container+" "+c.ID)
			}
			for _, a := range m.removes {
				got = append(got, "remove "+a.ID+" ("+a.Reason+")")
			}
			for p := range m.replaced {
				got = append(got, "replaced "+p)
			}
			if g := strings.Join(got, "; "); g != tt.want {
				t.Errorf("got  %q\nwant %q", g, tt.want)
			}
		})
	}
}

func TestDiffIsPureAndIdempotent(t *testing.T) {
	web := pod("web", schema.RestartAlways, "nginx:1")
	obs := []runtime.Container{exited(key(web, "c0"), 3, t0)}
	p1 := Diff([]schema.Pod{web}, obs, nil, state.History{}, nil, t0, Policy{})
	if len(p1.Exits) != 1 || p1.Exits[0].Code != 3 || !p1.Exits[0].Restart {
		t.Fatalf("first diff should account the exit once: %+v", p1.Exits)
	}
	// Feeding the new history back must not account the same exit again.
	p2 := Diff([]schema.Pod{web}, obs, nil, p1.History, p1.Rollouts, t0.Add(time.Second), Policy{})
	if len(p2.Exits) != 0 {
		t.Fatalf("exit accounted twice: %+v", p2.Exits)
	}
	if got, want := p2.History[key(web, "c0")].Delay, 10*time.Second; got != want {
		t.Fatalf("delay after re-diff = %s, want %s", got, want)
	}
	if got := summary(p2); got != "wait web/c0 CrashLoopBackOff 10s" {
		t.Fatalf("plan = %q", got)
	}
}

func TestDiffPrunesHistoryOfUndesiredKeys(t *testing.T) {
	web := pod("web", schema.RestartAlways, "nginx:1")
	web2 := pod("web", schema.RestartAlways, "nginx:2")
	hist := state.History{key(web, "c0"): {Restarts: 7}}
	p := Diff([]schema.Pod{web2}, nil, nil, hist, nil, t0, Policy{})
	if _, ok := p.History[key(web, "c0")]; ok {
		t.Fatal("record of the old spec kept")
	}
}

func TestCrashLoopNext(t *testing.T) {
	cl := DefaultCrashLoop
	tests := []struct {
		prev, ran time.Duration
		known     bool
		want      time.Duration
	}{
		{0, 0, false, 10 * time.Second},
		{10 * time.Second, time.Second, true, 20 * time.Second},
		{20 * time.Second, time.Second, true, 40 * time.Second},
		{160 * time.Second, time.Second, true, 5 * time.Minute},
		{5 * time.Minute, time.Second, true, 5 * time.Minute},
		{5 * time.Minute, 9 * time.Minute, true, 5 * time.Minute},
		{5 * time.Minute, 10 * time.Minute, true, 10 * time.Second},
		{5 * time.Minute, 0, false, 5 * time.Minute},
	}
	for _, tt := range tests {
		if got := cl.Next(tt.prev, tt.ran, tt.known); got != tt.want {
			t.Errorf("Next(%s, %s, %v) = %s, want %s", tt.prev, tt.ran, tt.known, got, tt.want)
		}
	}
}

func TestShouldRestart(t *testing.T) {
	tests := []struct {
		p    schema.RestartPolicy
		code int32
		want bool
	}{
		{schema.RestartAlways, 0, true}, {schema.RestartAlways, 1, true}, {"", 0, true},
		{schema.RestartOnFailure, 0, false}, {schema.RestartOnFailure, 137, true},
		{schema.RestartNever, 0, false}, {schema.RestartNever, 1, false},
	}
	for _, tt := range tests {
		if got := ShouldRestart(tt.p, tt.code); got != tt.want {
			t.Errorf("ShouldRestart(%q, %d) = %v", tt.p, tt.code, got)
		}
	}
}

var containerdID = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$`)

func TestContainerID(t *testing.T) {
	if got := ContainerID("web", "nginx", "0123456789abcdef"); got != "web-nginx-01234567" {
		t.Fatalf("ContainerID = %q", got)
	}
	long := strings.Repeat("a", 62) + "b"
	ids := map[string]bool{}
	for _, c := range []string{long, strings.Repeat("c", 63), "x", strings.Repeat("a", 30) + "-" + strings.Repeat("b", 32)} {
		id := ContainerID(long, c, "0123456789abcdef")
		if len(id) > 76 || !containerdID.MatchString(id) {
			t.Errorf("ContainerID(%q, %q) = %q (%d chars): not a valid containerd id", long, c, id, len(id))
		}
		if ids[id] {
			t.Errorf("ContainerID collision: %q", id)
		}
		ids[id] = true
		if id != ContainerID(long, c, "0123456789abcdef") {
			t.Error("ContainerID is not deterministic")
		}
	}
}

func TestPodStatuses(t *testing.T) {
	web := pod("web", schema.RestartAlways, "nginx:1")
	two := pod("two", schema.RestartAlways, "a", "b")
	once := pod("once", schema.RestartNever, "busybox")
	tests := []struct {
		name     string
		pod      schema.Pod
		observed []runtime.Container
		hist     state.History
		busy     bool
		listErr  error
		phase    schema.PodPhase
		ready    bool
		states   string
	}{
		{name: "creating", pod: web, busy: true, phase: schema.PhasePending, states: "waiting/ContainerCreating"},
		{name: "running", pod: web, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateRunning)}, phase: schema.PhaseRunning, ready: true, states: "running/"},
		{name: "half running", pod: two, observed: []runtime.Container{ctr(key(two, "c0"), runtime.StateRunning)}, phase: schema.PhasePending, states: "running/,waiting/ContainerCreating"},
		{
			name: "pull backoff", pod: web,
			hist:  state.History{key(web, "c0"): {Failures: 1, Reason: ReasonErrImagePull, Message: "boom", RetryAt: t0.Add(time.Minute)}},
			phase: schema.PhasePending, states: "waiting/ImagePullBackOff",
		},
		{
			name: "crash loop", pod: web, observed: []runtime.Container{exited(key(web, "c0"), 2, t0)},
			hist:  state.History{key(web, "c0"): {ExitSeen: true, LastExitAt: t0, Delay: 10 * time.Second, NotBefore: t0.Add(10 * time.Second), Restarts: 3}},
			phase: schema.PhaseRunning, states: "waiting/CrashLoopBackOff",
		},
		{
			name: "succeeded", pod: once, observed: []runtime.Container{exited(key(once, "c0"), 0, t0)},
			hist:  state.History{key(once, "c0"): {ExitSeen: true, Done: true}},
			phase: schema.PhaseSucceeded, states: "exited/Completed",
		},
		{
			name: "failed", pod: once, observed: []runtime.Container{exited(key(once, "c0"), 1, t0)},
			hist:  state.History{key(once, "c0"): {ExitSeen: true, Done: true, LastExitCode: 1}},
			phase: schema.PhaseFailed, states: "exited/Error",
		},
		{name: "runtime down", pod: web, listErr: fmt.Errorf("dial: refused"), phase: schema.PhaseUnknown, states: "waiting/Unknown"},
		{
			name: "created, start failed", pod: web, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateCreated)},
			hist:  state.History{key(web, "c0"): {Failures: 1, Reason: ReasonStartError, RetryAt: t0.Add(time.Minute)}},
			phase: schema.PhasePending, states: "waiting/RunContainerError",
		},
		{
			name: "created, start failed, retry in flight", pod: web, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateCreated)}, busy: true,
			hist:  state.History{key(web, "c0"): {Failures: 1, Reason: ReasonStartError, RetryAt: t0}},
			phase: schema.PhasePending, states: "waiting/ContainerCreating",
		},
		{
			name: "completed, then deleted", pod: once,
			hist:  state.History{key(once, "c0"): {ExitSeen: true, Done: true}},
			phase: schema.PhaseSucceeded, states: "exited/Completed",
		},
		{
			name: "exited, restart due", pod: web, observed: []runtime.Container{exited(key(web, "c0"), 0, t0)},
			hist:  state.History{key(web, "c0"): {ExitSeen: true, LastExitAt: t0, Delay: 10 * time.Second, NotBefore: t0}},
			phase: schema.PhaseRunning, states: "waiting/Restarting",
		},
		{
			name: "exited, not accounted yet, no restart", pod: once, observed: []runtime.Container{exited(key(once, "c0"), 3, t0)},
			phase: schema.PhaseFailed, states: "exited/Error",
		},
		{name: "unknown state", pod: web, observed: []runtime.Container{ctr(key(web, "c0"), runtime.StateUnknown)}, phase: schema.PhaseUnknown, states: "waiting/Unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busy := map[string]bool{tt.pod.Name: tt.busy}
			got := PodStatuses([]schema.Pod{tt.pod}, tt.observed, nil, tt.hist, nil, busy, t0, tt.listErr)
			if len(got) != 1 {
				t.Fatalf("got %d pods", len(got))
			}
			ps := got[0]
			var states []string
			for _, c := range ps.Containers {
				states = append(states, c.State+"/"+c.Reason)
			}
			if ps.Phase != tt.phase || ps.Ready != tt.ready || strings.Join(states, ",") != tt.states {
				t.Errorf("got phase %s ready %v containers %s (message %q); want %s %v %s", ps.Phase, ps.Ready, strings.Join(states, ","), ps.Message, tt.phase, tt.ready, tt.states)
			}
			if err := schema.ValidateDeviceStatus(&schema.DeviceStatus{Device: "d", Pods: got}); err != nil {
				t.Errorf("status does not validate: %v", err)
			}
		})
	}
}

func TestContainerSpec(t *testing.T) {
	c := schema.Container{
		Name: "web", Image: "nginx", Env: []schema.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "x=y"}},
		Resources: schema.Resources{Limits: schema.ResourceList{Memory: "64Mi", CPU: "500m"}},
	}
	spec, err := ContainerSpec(state.Key{Pod: "p", Container: "web", Hash: "h"}, "id", c, "/s/logs/p/web.log")
	if err != nil {
		t.Fatal(err)
	}
	if spec.MemoryLimitBytes != 64<<20 || spec.CPUMillis != 500 || strings.Join(spec.Env, ",") != "A=1,B=x=y" ||
		spec.PullPolicy != schema.PullIfNotPresent || spec.LogPath != "/s/logs/p/web.log" || spec.PodHash != "h" {
		t.Fatalf("spec = %+v", spec)
	}
	c.Resources.Limits.Memory = "lots"
	if _, err := ContainerSpec(state.Key{Pod: "p", Container: "web"}, "id", c, ""); err == nil {
		t.Fatal("bad memory limit accepted")
	}
}
