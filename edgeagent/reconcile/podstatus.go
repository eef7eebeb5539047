package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// PodStatuses derives the status of every desired pod from what the
// runtime reports, the history and the rollout records. busy names pods
// whose work is in flight; listErr is set when the runtime could not be
// listed (every pod is then Unknown). It is pure.
//
// A pod whose desired revision failed to start and that runs its steady
// revision again is reported with the desired hash, phase Failed, the
// failing container's reason (the others': RolledBack) and a message
// "revision HASH8 failed to start (DETAIL); the previous version runs
// again" (or "...; going back to the previous version" while it does not
// run yet, followed by what holds it up).
func PodStatuses(desired []schema.Pod, observed []runtime.Container, hist state.History, rollouts state.Rollouts, busy map[string]bool, now time.Time, listErr error) []schema.PodStatus {
	byKey := observedByKey(observed)
	out := make([]schema.PodStatus, 0, len(desired))
	for _, p := range desired {
		r := rollouts[p.Name]
		if f := r.Failed; f != nil && r.Steady != nil && f.Hash == podHash(p) && listErr == nil {
			prev := podStatus(r.Steady.Pod, byKey, hist, busy, now, nil)
			out = append(out, failedStatus(p, *f, prev))
			continue
		}
		out = append(out, podStatus(p, byKey, hist, busy, now, listErr))
	}
	return out
}

// failedStatus is the status of pod p whose desired revision failed as f,
// given the status prev of the steady revision it runs instead.
func failedStatus(p schema.Pod, f state.Failure, prev schema.PodStatus) schema.PodStatus {
	ps := schema.PodStatus{
		Name: p.Name, Hash: podHash(p), Phase: schema.PhaseFailed, Restarts: prev.Restarts,
		Containers: make([]schema.ContainerStatus, 0, len(p.Spec.Containers)),
	}
	for _, c := range p.Spec.Containers {
		cs := schema.ContainerStatus{Name: c.Name, Image: c.Image, State: schema.ContainerWaiting, Reason: ReasonRolledBack}
		if c.Name == f.Container {
			cs.Reason, cs.ExitCode = f.Reason, f.ExitCode
		}
		ps.Containers = append(ps.Containers, cs)
	}
	ps.Message = fmt.Sprintf("revision %s failed to start (%s); ", shortHash(f.Hash), f.Message)
	if prev.Ready || prev.Phase == schema.PhaseSucceeded {
		ps.Message += "the previous version runs again"
	} else {
		ps.Message += "going back to the previous version"
		if prev.Message != "" {
			ps.Message += ": " + prev.Message
		}
	}
	return ps
}

// podStatus is the status of pod p.
func podStatus(p schema.Pod, byKey map[state.Key]runtime.Container, hist state.History, busy map[string]bool, now time.Time, listErr error) schema.PodStatus {
	hash := podHash(p)
	policy := p.Spec.RestartPolicy
	ps := schema.PodStatus{Name: p.Name, Hash: hash, Containers: make([]schema.ContainerStatus, 0, len(p.Spec.Containers))}
	var (
		running, pending, restarting, unknown, failed int
		msgs                                          []string
	)
	for _, spec := range p.Spec.Containers {
		k := state.Key{Pod: p.Name, Container: spec.Name, Hash: hash}
		rec := hist[k]
		cs := schema.ContainerStatus{Name: spec.Name, Image: spec.Image, Restarts: rec.Restarts}
		ps.Restarts += rec.Restarts
		c, ok := byKey[k]
		switch {
		case listErr != nil:
			cs.State, cs.Reason = schema.ContainerWaiting, "Unknown"
			unknown++
		case !ok && rec.Done:
			cs.State, cs.ExitCode = schema.ContainerExited, rec.LastExitCode
			cs.Reason = exitReason(rec.LastExitCode)
			if rec.LastExitCode != 0 {
				failed++
			}
		case !ok:
			cs.State = schema.ContainerWaiting
			cs.Reason = ReasonCreating
			if rec.Failures > 0 && !busy[p.Name] {
				cs.Reason = backoffReason(rec.Reason)
				msgs = append(msgs, retryMsg(spec.Name, cs.Reason, rec))
			}
			pending++
		case c.State == runtime.StateRunning:
			cs.State = schema.ContainerRunning
			cs.StartedAt = timePtr(c.StartedAt)
			running++
		case c.State == runtime.StateCreated:
			cs.State, cs.Reason = schema.ContainerWaiting, ReasonCreating
			if rec.Failures > 0 && !busy[p.Name] {
				cs.Reason = backoffReason(rec.Reason)
				msgs = append(msgs, retryMsg(spec.Name, cs.Reason, rec))
			}
			pending++
		case c.State == runtime.StateExited:
			cs.ExitCode = c.ExitCode
			cs.StartedAt = timePtr(c.StartedAt)
			if rec.Done || (!rec.ExitSeen && !ShouldRestart(policy, c.ExitCode)) {
				cs.State, cs.Reason = schema.ContainerExited, exitReason(c.ExitCode)
				if c.ExitCode != 0 {
					failed++
				}
				break
			}
			cs.State, cs.Reason = schema.ContainerWaiting, ReasonCrashLoopBackOff
			switch {
			case rec.Failures > 0:
				cs.Reason = backoffReason(rec.Reason)
				msgs = append(msgs, retryMsg(spec.Name, cs.Reason, rec))
			case rec.NotBefore.After(now):
				msgs = append(msgs, fmt.Sprintf("%s: back-off %s restarting container that exited with code %d", spec.Name, rec.Delay, c.ExitCode))
			default:
				cs.Reason = "Restarting"
			}
			restarting++
		default:
			cs.State, cs.Reason = schema.ContainerWaiting, "Unknown"
			unknown++
		}
		ps.Containers = append(ps.Containers, cs)
	}
	n := len(p.Spec.Containers)
	switch {
	case unknown > 0:
		ps.Phase = schema.PhaseUnknown
		if listErr != nil {
			msgs = append(msgs, "cannot list containers: "+listErr.Error())
		}
	case pending > 0:
		ps.Phase = schema.PhasePending
	case running > 0 || restarting > 0:
		ps.Phase = schema.PhaseRunning
	case failed > 0:
		ps.Phase = schema.PhaseFailed
	case n > 0:
		ps.Phase = schema.PhaseSucceeded
	default:
		ps.Phase = schema.PhasePending
	}
	ps.Ready = n > 0 && running == n
	ps.Message = strings.Join(msgs, "; ")
	return ps
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
