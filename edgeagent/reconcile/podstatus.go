package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// PodStatuses derives the status of every desired pod from what the
// runtime reports, what the probes say, the history and the rollout
// records. busy names pods whose work is in flight; listErr is set when
// the runtime could not be listed (every pod is then Unknown). It is
// pure.
//
// A running container is ready when it has no readiness or startup
// probe, or when they say so for its current run; a pod is Ready when
// every container is running and ready, and its message names the
// readiness probes that fail ("app: readiness probe failed: tcp
// 127.0.0.1:8080: connect: connection refused").
//
// While a pod's init containers have not all completed, the pod is
// Pending (Failed once one failed under restartPolicy Never), its
// containers wait with kubectl's reasons (Init:0/2, Init:Error,
// Init:CrashLoopBackOff, Init:ImagePullBackOff...), its restarts are
// those of its init containers, and its message says what holds it back
// ("init container prepare failed (exit code 1); retrying in 20s").
//
// A pod whose desired revision failed to start, and that the agent runs
// at its steady revision again, is reported as what runs: the steady
// revision's hash, phase, readiness, restarts and containers (their
// images those of the steady revision), with FailedRevision naming the
// desired revision that failed, its failing container, reason and exit
// code; its message says "revision HASH8 failed to start (DETAIL); the
// previous version runs again" (or "...; going back to the previous
// version" while that does not run yet, followed by what holds it up).
func PodStatuses(desired []schema.Pod, observed []runtime.Container, probes probe.Results, hist state.History, rollouts state.Rollouts, busy map[string]bool, now time.Time, listErr error) []schema.PodStatus {
	byKey := observedByKey(observed)
	out := make([]schema.PodStatus, 0, len(desired))
	for _, p := range desired {
		r := rollouts[p.Name]
		if f := r.Failed; f != nil && r.Steady != nil && f.Hash == podHash(p) && listErr == nil {
			prev := podStatus(r.Steady.Pod, byKey, probes, hist, busy, now, nil)
			out = append(out, failedStatus(p, *f, prev))
			continue
		}
		out = append(out, podStatus(p, byKey, probes, hist, busy, now, listErr))
	}
	return out
}

// failedStatus is the status of pod p whose desired revision failed as f,
// given the status prev of the steady revision it runs instead: prev,
// with the failure.
func failedStatus(p schema.Pod, f state.Failure, prev schema.PodStatus) schema.PodStatus {
	ps := prev
	fr := &schema.FailedRevision{
		Hash: f.Hash, Container: f.Container, Reason: f.Reason, ExitCode: f.ExitCode,
		Attempts: f.Attempts, Message: f.Message, Time: timePtr(f.At),
	}
	for _, c := range p.Spec.Containers {
		if c.Name == f.Container {
			fr.Image = c.Image
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == f.Container {
			fr.Image = c.Image
		}
	}
	ps.FailedRevision = fr
	msg := fmt.Sprintf("revision %s failed to start (%s); ", shortHash(f.Hash), f.Message)
	if prev.Ready || prev.Phase == schema.PhaseSucceeded {
		msg += "the previous version runs again"
	} else {
		msg += "going back to the previous version"
		if prev.Message != "" {
			msg += ": " + prev.Message
		}
	}
	ps.Message = msg
	return ps
}

// podStatus is the status of pod p.
func podStatus(p schema.Pod, byKey map[state.Key]runtime.Container, probes probe.Results, hist state.History, busy map[string]bool, now time.Time, listErr error) schema.PodStatus {
	hash := podHash(p)
	if listErr == nil {
		if ps, ok := initStatus(p, hash, byKey, hist, busy, now); ok {
			return ps
		}
	}
	ps := schema.PodStatus{Name: p.Name, Hash: hash, Containers: make([]schema.ContainerStatus, 0, len(p.Spec.Containers))}
	var t podTally
	for _, spec := range p.Spec.Containers {
		k := state.Key{Pod: p.Name, Container: spec.Name, Hash: hash}
		rec := hist[k]
		cs := schema.ContainerStatus{Name: spec.Name, Image: spec.Image, Restarts: rec.Restarts}
		ps.Restarts += rec.Restarts
		c, ok := byKey[k]
		switch {
		case listErr != nil:
			t.addUnknown(&cs)
		case !ok && rec.Done:
			t.addCompleted(&cs, rec.LastExitCode)
		case !ok, c.State == runtime.StateCreated:
			t.addCreating(&cs, rec, busy[p.Name])
		case c.State == runtime.StateRunning:
			t.addRunning(&cs, spec, c, probes)
		case c.State == runtime.StateExited:
			t.addExited(&cs, c, rec, p.Spec.RestartPolicy, now)
		default:
			t.addUnknown(&cs)
		}
		ps.Containers = append(ps.Containers, cs)
	}
	n := len(p.Spec.Containers)
	ps.Phase = t.phase(n)
	if t.unknown > 0 && listErr != nil {
		t.msgs = append(t.msgs, "cannot list containers: "+listErr.Error())
	}
	ps.Ready = n > 0 && t.ready == n
	ps.Message = strings.Join(t.msgs, "; ")
	return ps
}

// podTally counts a pod's containers by what they make of its phase, and
// collects what its message says. Each method fills in the status of one
// container in one state and counts it.
type podTally struct {
	running, ready, pending, restarting, unknown, failed int
	msgs                                                 []string
}

// phase is the pod's phase, of its n containers.
func (t *podTally) phase(n int) schema.PodPhase {
	switch {
	case t.unknown > 0:
		return schema.PhaseUnknown
	case t.pending > 0:
		return schema.PhasePending
	case t.running > 0 || t.restarting > 0:
		return schema.PhaseRunning
	case t.failed > 0:
		return schema.PhaseFailed
	case n > 0:
		return schema.PhaseSucceeded
	}
	return schema.PhasePending
}

// addUnknown: the runtime cannot say (or cannot be listed).
func (t *podTally) addUnknown(cs *schema.ContainerStatus) {
	cs.State, cs.Reason = schema.ContainerWaiting, "Unknown"
	t.unknown++
}

// addCompleted: the container exited with code and will not run again.
func (t *podTally) addCompleted(cs *schema.ContainerStatus, code int32) {
	cs.State, cs.ExitCode = schema.ContainerExited, code
	cs.Reason = exitReason(code)
	if code != 0 {
		t.failed++
	}
}

// addCreating: the container is missing or never started: being created, or
// waiting out its last failed attempt (unless work on its pod is in
// flight).
func (t *podTally) addCreating(cs *schema.ContainerStatus, rec state.Record, busy bool) {
	cs.State, cs.Reason = schema.ContainerWaiting, ReasonCreating
	if rec.Failures > 0 && !busy {
		cs.Reason = backoffReason(rec.Reason)
		t.msgs = append(t.msgs, retryMsg(cs.Name, cs.Reason, rec))
	}
	t.pending++
}

// addRunning: the container runs, ready or not as its probes say.
func (t *podTally) addRunning(cs *schema.ContainerStatus, spec schema.Container, c runtime.Container, probes probe.Results) {
	cs.State = schema.ContainerRunning
	cs.StartedAt = timePtr(c.StartedAt)
	t.running++
	ok, why := containerReady(spec, c, probes)
	cs.Ready = &ok
	if ok {
		t.ready++
	} else if why != "" {
		t.msgs = append(t.msgs, spec.Name+": "+why)
	}
}

// addExited: the container exited; it completed, or waits to be restarted.
func (t *podTally) addExited(cs *schema.ContainerStatus, c runtime.Container, rec state.Record, policy schema.RestartPolicy, now time.Time) {
	cs.ExitCode = c.ExitCode
	cs.StartedAt = timePtr(c.StartedAt)
	if rec.Done || (!rec.ExitSeen && !ShouldRestart(policy, c.ExitCode)) {
		t.addCompleted(cs, c.ExitCode)
		return
	}
	cs.State, cs.Reason = schema.ContainerWaiting, ReasonCrashLoopBackOff
	switch {
	case rec.Failures > 0:
		cs.Reason = backoffReason(rec.Reason)
		t.msgs = append(t.msgs, retryMsg(cs.Name, cs.Reason, rec))
	case rec.NotBefore.After(now):
		t.msgs = append(t.msgs, fmt.Sprintf("%s: back-off %s restarting container that exited with code %d", cs.Name, rec.Delay, c.ExitCode))
	default:
		cs.Reason = "Restarting"
	}
	t.restarting++
}

func exitReason(code int32) string {
	if code == 0 {
		return ReasonCompleted
	}
	return ReasonError
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// retryMsg uses the absolute retry time so that the message, and with it
// the status, does not change on every pass.
func retryMsg(name, reason string, rec state.Record) string {
	return fmt.Sprintf("%s: %s: %s (next attempt at %s)", name, reason, rec.Message, rec.RetryAt.UTC().Format(time.RFC3339))
}

// initStatus is the status of pod p while its init containers have not
// all completed; ok is false once they have (or when it has none).
func initStatus(p schema.Pod, hash string, byKey map[state.Key]runtime.Container, hist state.History, busy map[string]bool, now time.Time) (ps schema.PodStatus, ok bool) {
	n := len(p.Spec.InitContainers)
	var restarts int32
	for _, ic := range p.Spec.InitContainers {
		restarts += hist[state.Key{Pod: p.Name, Container: ic.Name, Hash: hash}].Restarts
	}
	for i, ic := range p.Spec.InitContainers {
		k := state.Key{Pod: p.Name, Container: ic.Name, Hash: hash}
		rec := hist[k]
		if completed(rec) {
			continue
		}
		// ic holds the pod back.
		ps = schema.PodStatus{Name: p.Name, Hash: hash, Phase: schema.PhasePending, Restarts: restarts,
			Containers: make([]schema.ContainerStatus, 0, len(p.Spec.Containers))}
		reason := fmt.Sprintf("Init:%d/%d", i, n)
		what := "init container " + ic.Name
		c, observed := byKey[k]
		switch {
		case rec.Done:
			// Failed under restartPolicy Never: the pod will not run.
			ps.Phase, reason = schema.PhaseFailed, ReasonInitError
			ps.Message = fmt.Sprintf("%s failed (exit code %d); restart policy %s", what, rec.LastExitCode, schema.RestartNever)
		case rec.Failures > 0 && !busy[p.Name]:
			reason = "Init:" + backoffReason(rec.Reason)
			ps.Message = retryMsg(what, backoffReason(rec.Reason), rec)
		case observed && c.State == runtime.StateExited && rec.ExitSeen:
			if rec.NotBefore.After(now) {
				reason = ReasonInitCrashLoopBackOff
				ps.Message = fmt.Sprintf("%s failed (exit code %d); retrying in %s", what, c.ExitCode, rec.Delay)
			} else {
				reason = ReasonInitError
				ps.Message = fmt.Sprintf("%s failed (exit code %d); retrying now", what, c.ExitCode)
			}
		case observed && c.State == runtime.StateRunning:
			ps.Message = fmt.Sprintf("running %s (%d of %d)", what, i+1, n)
		}
		for _, spec := range p.Spec.Containers {
			rec := hist[state.Key{Pod: p.Name, Container: spec.Name, Hash: hash}]
			ps.Containers = append(ps.Containers, schema.ContainerStatus{
				Name: spec.Name, Image: spec.Image, State: schema.ContainerWaiting, Reason: reason, Restarts: rec.Restarts,
			})
		}
		return ps, true
	}
	return schema.PodStatus{}, false
}
