package reconcile

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// probed is pod with the probes of mod on its one container c0.
func probed(name string, policy schema.RestartPolicy, mod func(*schema.Container)) schema.Pod {
	p := pod(name, policy, "app:1")
	mod(&p.Spec.Containers[0])
	schema.DefaultPodSpec(&p.Spec)
	return p
}

var (
	liveness = func(c *schema.Container) {
		c.LivenessProbe = &schema.Probe{Exec: &schema.ExecAction{Command: []string{"true"}}}
	}
	readiness = func(c *schema.Container) {
		c.ReadinessProbe = &schema.Probe{TCPSocket: &schema.TCPSocketAction{Port: "8080"}}
	}
	startup = func(c *schema.Container) {
		c.StartupProbe = &schema.Probe{Exec: &schema.ExecAction{Command: []string{"true"}}}
	}
)

const livenessFailed = "liveness probe failed: exec [cat /tmp/healthy]: exit code 1"

func TestDiffProbeVerdicts(t *testing.T) {
	web := probed("web", schema.RestartAlways, liveness)
	job := probed("job", schema.RestartOnFailure, liveness)
	once := probed("once", schema.RestartNever, liveness)
	plain := pod("web", schema.RestartAlways, "app:1")
	running := func(p schema.Pod) runtime.Container { return ctr(key(p, "c0"), runtime.StateRunning) }
	failed := func(p schema.Pod, startedAt time.Time) probe.Results {
		c := running(p)
		return probe.Results{c.ID: {StartedAt: startedAt, Started: true, Failed: livenessFailed}}
	}
	runStart := t0.Add(-time.Hour) // ctr's StartedAt

	tests := []struct {
		name     string
		desired  []schema.Pod
		observed []runtime.Container
		probes   probe.Results
		hist     state.History
		want     string
		unhealth bool
		exit     string
	}{
		{name: "no result: nothing", desired: []schema.Pod{web}, observed: []runtime.Container{running(web)}, want: ""},
		{
			name: "healthy: nothing", desired: []schema.Pod{web}, observed: []runtime.Container{running(web)},
			probes: probe.Results{running(web).ID: {StartedAt: runStart, Started: true, Ready: true}}, want: "",
		},
		{
			name: "liveness failed for this run: kill", desired: []schema.Pod{web}, observed: []runtime.Container{running(web)},
			probes: failed(web, runStart), want: "kill web/c0 (Unhealthy)", unhealth: true,
		},
		{
			name: "a failure of an earlier run is ignored", desired: []schema.Pod{web}, observed: []runtime.Container{running(web)},
			probes: failed(web, runStart.Add(-time.Minute)), want: "",
		},
		{
			name: "a container without liveness or startup probe is never killed", desired: []schema.Pod{plain}, observed: []runtime.Container{running(plain)},
			probes: failed(plain, runStart), want: "",
		},
		{
			name: "killed, exited 0 under OnFailure: restarted after the backoff", desired: []schema.Pod{job},
			observed: []runtime.Container{exited(key(job, "c0"), 0, t0)},
			hist:     state.History{key(job, "c0"): {Unhealthy: true}},
			want:     "wait job/c0 CrashLoopBackOff 10s", exit: "code 0 restart unhealthy",
		},
		{
			name: "killed under Never: not restarted", desired: []schema.Pod{once},
			observed: []runtime.Container{exited(key(once, "c0"), 143, t0)},
			hist:     state.History{key(once, "c0"): {Unhealthy: true}},
			want:     "", exit: "code 143 unhealthy",
		},
		{
			name: "an exit 0 under OnFailure without a probe failure completes", desired: []schema.Pod{job},
			observed: []runtime.Container{exited(key(job, "c0"), 0, t0)}, want: "", exit: "code 0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Diff(tt.desired, tt.observed, tt.probes, tt.hist.Clone(), nil, t0, Policy{CrashLoop: DefaultCrashLoop})
			if got := summary(p); got != tt.want {
				t.Errorf("plan:\n got %q\nwant %q", got, tt.want)
			}
			k := key(tt.desired[0], "c0")
			if got := p.History[k].Unhealthy; got != tt.unhealth {
				t.Errorf("Unhealthy = %v, want %v", got, tt.unhealth)
			}
			for _, a := range p.Actions {
				if a.Kind == Kill && a.Message != livenessFailed {
					t.Errorf("kill message %q", a.Message)
				}
			}
			var exits []string
			for _, ex := range p.Exits {
				s := fmt.Sprintf("code %d", ex.Code)
				if ex.Restart {
					s += " restart"
				}
				if ex.Unhealthy {
					s += " unhealthy"
				}
				exits = append(exits, s)
			}
			if got := strings.Join(exits, "; "); got != tt.exit {
				t.Errorf("exits = %q, want %q", got, tt.exit)
			}
		})
	}
}

// TestLivenessRestartCountsAsRestart: a killed container is restarted
// through the crash-loop path (Restart action) and its record is clean
// for the next run.
func TestLivenessRestartCountsAsRestart(t *testing.T) {
	web := probed("web", schema.RestartAlways, liveness)
	k := key(web, "c0")
	c := ctr(k, runtime.StateRunning)
	pol := Policy{CrashLoop: DefaultCrashLoop}
	p := Diff([]schema.Pod{web}, []runtime.Container{c}, probe.Results{c.ID: {StartedAt: c.StartedAt, Failed: livenessFailed}}, nil, nil, t0, pol)
	if summary(p) != "kill web/c0 (Unhealthy)" {
		t.Fatalf("plan %q", summary(p))
	}
	// The kill stopped it (exit 143); the probe result of that run is
	// still there.
	gone := exited(k, 143, t0.Add(time.Second))
	p = Diff([]schema.Pod{web}, []runtime.Container{gone}, probe.Results{c.ID: {StartedAt: c.StartedAt, Failed: livenessFailed}}, p.History, nil, t0.Add(time.Second), pol)
	if summary(p) != "wait web/c0 CrashLoopBackOff 11s" || len(p.Exits) != 1 || !p.Exits[0].Unhealthy {
		t.Fatalf("after the kill: plan %q exits %+v", summary(p), p.Exits)
	}
	p = Diff([]schema.Pod{web}, []runtime.Container{gone}, nil, p.History, nil, t0.Add(12*time.Second), pol)
	if summary(p) != "restart web/c0" || p.History[k].Unhealthy {
		t.Fatalf("after the backoff: plan %q record %+v", summary(p), p.History[k])
	}
}

func TestPodStatusesWithProbes(t *testing.T) {
	type tc struct {
		name    string
		pod     schema.Pod
		result  *probe.Result // for c0's current run
		ready   bool
		message string
	}
	runStart := t0.Add(-time.Hour)
	tests := []tc{
		{name: "no probe: ready", pod: pod("web", schema.RestartAlways, "app:1"), ready: true},
		{name: "liveness only, not probed yet: ready", pod: probed("web", "", liveness), ready: true},
		{name: "readiness not probed yet: not ready", pod: probed("web", "", readiness), ready: false},
		{name: "readiness passes", pod: probed("web", "", readiness), result: &probe.Result{StartedAt: runStart, Started: true, Ready: true}, ready: true},
		{
			name: "readiness fails", pod: probed("web", "", readiness),
			result:  &probe.Result{StartedAt: runStart, Started: true, NotReady: "readiness probe failed: tcp 127.0.0.1:8080: connect: connection refused"},
			message: "c0: readiness probe failed: tcp 127.0.0.1:8080: connect: connection refused",
		},
		{
			name: "a result of an earlier run does not count", pod: probed("web", "", readiness),
			result: &probe.Result{StartedAt: runStart.Add(-time.Second), Started: true, Ready: true},
		},
		{name: "startup not succeeded: not ready", pod: probed("web", "", startup), result: &probe.Result{StartedAt: runStart}},
		{name: "startup succeeded: ready", pod: probed("web", "", startup), result: &probe.Result{StartedAt: runStart, Started: true, Ready: true}, ready: true},
		{
			name: "liveness failed: not ready, restarting", pod: probed("web", "", liveness),
			result:  &probe.Result{StartedAt: runStart, Started: true, Failed: livenessFailed},
			message: "c0: " + livenessFailed + "; restarting",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ctr(key(tt.pod, "c0"), runtime.StateRunning)
			var res probe.Results
			if tt.result != nil {
				res = probe.Results{c.ID: *tt.result}
			}
			ps := PodStatuses([]schema.Pod{tt.pod}, []runtime.Container{c}, res, nil, nil, nil, t0, nil)[0]
			if ps.Phase != schema.PhaseRunning || ps.Ready != tt.ready || ps.Message != tt.message {
				t.Errorf("phase %s ready %v message %q; want Running %v %q", ps.Phase, ps.Ready, ps.Message, tt.ready, tt.message)
			}
			if cs := ps.Containers[0]; cs.State != schema.ContainerRunning {
				t.Errorf("container %+v", cs)
			}
		})
	}

	// Two containers: the pod is ready only when both are.
	two := pod("two", schema.RestartAlways, "a", "b")
	readiness(&two.Spec.Containers[1])
	c0, c1 := ctr(key(two, "c0"), runtime.StateRunning), ctr(key(two, "c1"), runtime.StateRunning)
	ps := PodStatuses([]schema.Pod{two}, []runtime.Container{c0, c1}, nil, nil, nil, nil, t0, nil)[0]
	if ps.Ready {
		t.Error("pod ready while one container's readiness has not passed")
	}
	ps = PodStatuses([]schema.Pod{two}, []runtime.Container{c0, c1}, probe.Results{c1.ID: {StartedAt: runStart, Started: true, Ready: true}}, nil, nil, nil, t0, nil)[0]
	if !ps.Ready {
		t.Error("pod not ready though both containers are")
	}
}

func TestPodStatusesWithInitContainers(t *testing.T) {
	ini := initPod("ini", schema.RestartAlways, "app:1")
	never := initPod("ini", schema.RestartNever, "app:1")
	k := func(c string) state.Key { return key(ini, c) }
	earlier := t0.Add(-time.Minute)
	tests := []struct {
		name     string
		pod      schema.Pod
		observed []runtime.Container
		hist     state.History
		phase    schema.PodPhase
		reason   string
		message  string
		restarts int32
	}{
		{name: "first init container being created", pod: ini, phase: schema.PhasePending, reason: "Init:0/2"},
		{
			name: "first init container running", pod: ini, observed: []runtime.Container{ctr(k("i0"), runtime.StateRunning)},
			phase: schema.PhasePending, reason: "Init:0/2", message: "running init container i0 (1 of 2)",
		},
		{
			name: "second running", pod: ini, observed: []runtime.Container{exited(k("i0"), 0, earlier), ctr(k("i1"), runtime.StateRunning)},
			hist:  state.History{k("i0"): done(earlier)},
			phase: schema.PhasePending, reason: "Init:1/2", message: "running init container i1 (2 of 2)",
		},
		{
			name: "failed, in backoff", pod: ini, observed: []runtime.Container{exited(k("i0"), 1, t0)},
			hist:  state.History{k("i0"): {ExitSeen: true, LastExitCode: 1, LastExitAt: t0, Delay: 20 * time.Second, NotBefore: t0.Add(20 * time.Second), Restarts: 2}},
			phase: schema.PhasePending, reason: "Init:CrashLoopBackOff", message: "init container i0 failed (exit code 1); retrying in 20s", restarts: 2,
		},
		{
			name: "failed, backoff over", pod: ini, observed: []runtime.Container{exited(k("i0"), 1, earlier)},
			hist:  state.History{k("i0"): {ExitSeen: true, LastExitCode: 1, LastExitAt: earlier, Delay: 10 * time.Second, NotBefore: earlier.Add(10 * time.Second)}},
			phase: schema.PhasePending, reason: "Init:Error", message: "init container i0 failed (exit code 1); retrying now",
		},
		{
			name: "failed under Never", pod: never, observed: []runtime.Container{exited(key(never, "i0"), 1, t0)},
			hist:  state.History{key(never, "i0"): {ExitSeen: true, Done: true, LastExitCode: 1, LastExitAt: t0}},
			phase: schema.PhaseFailed, reason: "Init:Error", message: "init container i0 failed (exit code 1); restart policy Never",
		},
		{
			name: "image pull backoff", pod: ini,
			hist:  state.History{k("i0"): {Failures: 1, Reason: ReasonErrImagePull, Message: "pull setup:1: not found", RetryAt: t0.Add(time.Minute)}},
			phase: schema.PhasePending, reason: "Init:ImagePullBackOff",
			message: "init container i0: ImagePullBackOff: pull setup:1: not found (next attempt at 2025-01-01T12:01:00Z)",
		},
		{
			name: "all completed: the containers' own status", pod: ini,
			observed: []runtime.Container{exited(k("i0"), 0, earlier), exited(k("i1"), 0, earlier), ctr(k("c0"), runtime.StateRunning)},
			hist:     state.History{k("i0"): done(earlier), k("i1"): {ExitSeen: true, Done: true, LastExitAt: earlier, Restarts: 4}},
			phase:    schema.PhaseRunning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodStatuses([]schema.Pod{tt.pod}, tt.observed, nil, tt.hist, nil, nil, t0, nil)
			ps := got[0]
			if ps.Phase != tt.phase || ps.Message != tt.message || ps.Restarts != tt.restarts || ps.Ready != (tt.phase == schema.PhaseRunning) {
				t.Errorf("phase %s message %q restarts %d ready %v; want %s %q %d", ps.Phase, ps.Message, ps.Restarts, ps.Ready, tt.phase, tt.message, tt.restarts)
			}
			if len(ps.Containers) != 1 || ps.Containers[0].Name != "c0" || ps.Containers[0].Reason != tt.reason {
				t.Errorf("containers %+v, want c0 with reason %q", ps.Containers, tt.reason)
			}
			if err := schema.ValidateDeviceStatus(&schema.DeviceStatus{Device: "d", Pods: got}); err != nil {
				t.Errorf("status does not validate: %v", err)
			}
		})
	}
}
