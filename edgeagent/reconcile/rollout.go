package reconcile

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// Rollout safety on the device. A pod's revision (its spec hash) is
// steady once every container has run DefaultSteadyAfter without exiting
// (or completed with code 0 under a policy that does not restart it).
// The agent remembers, per pod, the last steady revision (state.Rollout).
//
// A new desired revision that replaced a steady one has failed to start
// when one of its containers (init containers included), before the
// revision became steady,
//   - failed to start FailedStartLimit times: a failure to create or start
//     it (CreateContainerError, RunContainerError,
//     CreateContainerConfigError) or an exit before it had run
//     SteadyAfter (any exit under Always; a non-zero one under OnFailure
//     and Never), or
//   - exited with a non-zero code before SteadyAfter under restart policy
//     Never, which will not start it again.
//
// The agent then runs the steady revision again (its images are kept, so
// that needs no pull) and does not retry the failed revision until the
// desired revision changes; both facts are persisted. The pod's status
// shows what runs (the steady revision's hash, phase, readiness and
// images) and, in failedRevision, the desired hash with the failing
// container's reason; its message says "revision 1a2b3c4d failed to start
// (container app: exit code 1, 3 times); the previous version runs
// again". A pod without a steady revision (a first install) has nothing
// to go back to: it crash-loops with backoff, as before.
const (
	// DefaultSteadyAfter is how long a container must run without
	// exiting for its start to count as successful.
	DefaultSteadyAfter = 30 * time.Second
	// FailedStartLimit is how many failed starts of one container make a
	// new revision failed.
	FailedStartLimit = 3
)

// Policy is the timing Diff applies.
type Policy struct {
	// CrashLoop is the restart backoff (default DefaultCrashLoop).
	CrashLoop CrashLoop
	// SteadyAfter is how long a container must run without exiting to
	// have started (default DefaultSteadyAfter).
	SteadyAfter time.Duration
	// Holds are the pods whose replacement of a running older revision
	// waits (update window, update lock; see update.go): their new
	// images are pulled, the running version stays.
	Holds map[string]Hold
}

func (p Policy) withDefaults() Policy {
	if p.CrashLoop == (CrashLoop{}) {
		p.CrashLoop = DefaultCrashLoop
	}
	if p.SteadyAfter <= 0 {
		p.SteadyAfter = DefaultSteadyAfter
	}
	return p
}

// Diff compares the desired pods with the observed containers and returns
// the plan that converges them. It is a pure function of its arguments:
// hist and rollouts are not modified, now is the only notion of time, and
// probes (what the probes of the running containers say, see probes.go)
// are an observation like observed.
//
// It first picks the pods to run: each desired pod, or its steady
// revision when the desired revision failed to start (see
// FailedStartLimit); then diffs their containers (see diffContainers);
// then looks for a desired revision that has just failed, in which case
// it plans the way back to the steady revision instead; and finally
// records revisions that have become steady.
func Diff(desired []schema.Pod, observed []runtime.Container, probes probe.Results, hist state.History, rollouts state.Rollouts, now time.Time, pol Policy) Plan {
	pol = pol.withDefaults()
	ro := pruneRollouts(desired, rollouts)
	pods, back := podsToRun(desired, ro)
	plan := diffContainers(pods, observed, probes, preparedFallbacks(hist, pods, back), now, pol)

	var rolled []Rollback
	for _, p := range desired {
		r := ro[p.Name]
		hash := podHash(p)
		if back[p.Name] || r.Steady == nil || r.Steady.Pod.Hash == hash {
			continue
		}
		f, failed := revisionFailure(p, hash, plan.History, now)
		if !failed {
			continue
		}
		r.Failed = &f
		ro[p.Name] = r
		rolled = append(rolled, Rollback{Pod: p.Name, Failure: f, To: r.Steady.Pod.Hash})
	}
	if len(rolled) > 0 {
		// Plan again with the steady revisions: the failed revisions'
		// containers are removed, the steady ones created. The exits
		// were accounted by the first plan and are not seen again.
		exits := plan.Exits
		for i, ex := range exits {
			for _, rb := range rolled {
				if ex.Key.Pod == rb.Pod && ex.Key.Hash == rb.Failure.Hash {
					exits[i].GaveUp, exits[i].Restart, exits[i].Delay = true, false, 0
				}
			}
		}
		pods, back = podsToRun(desired, ro)
		plan = diffContainers(pods, observed, probes, preparedFallbacks(plan.History, pods, back), now, pol)
		plan.Exits = append(exits, plan.Exits...)
		plan.RolledBack = rolled
	}
	for i, a := range plan.Actions {
		if a.Kind == Remove && a.Reason == ReasonSpecChanged && back[a.Key.Pod] {
			plan.Actions[i].Reason = ReasonRevisionFailed
		}
	}
	plan.Pods = pods
	plan.Rollouts = ro
	recordCurrent(&plan, observed)
	markSteady(&plan, observed, back, now, pol)
	markCurrentSteady(&plan, observed, now, pol)
	return plan
}

// recordCurrent remembers, per pod of plan.Pods, the revision the agent
// runs or is starting (state.Rollout.Current) while it is not the steady
// one: a revision that has containers, or that the plan creates or
// starts. A revision the plan only prepares (its images are pulled while
// the running one stays) leaves Current as it is.
func recordCurrent(plan *Plan, observed []runtime.Container) {
	started := map[string]string{} // pod → hash with containers or starts
	for _, c := range observed {
		if c.PodHash != "" && c.PodHash == plan.Hashes[c.Pod] {
			started[c.Pod] = c.PodHash
		}
	}
	for _, a := range plan.Actions {
		switch a.Kind {
		case Create, Start, Restart:
			started[a.Key.Pod] = a.Key.Hash
		}
	}
	for _, p := range plan.Pods {
		hash := plan.Hashes[p.Name]
		if started[p.Name] != hash {
			continue
		}
		r := plan.Rollouts[p.Name]
		switch {
		case r.Steady != nil && r.Steady.Pod.Hash == hash:
			r.Current = nil
		case r.Current != nil && r.Current.Pod.Hash == hash:
			continue
		default:
			sp := p
			sp.Hash = hash
			r.Current = &state.Revision{Pod: sp}
		}
		if r.IsZero() {
			delete(plan.Rollouts, p.Name)
		} else {
			plan.Rollouts[p.Name] = r
		}
	}
}

// markCurrentSteady makes steady a pod's Current revision that is no
// longer the one the agent wants to run but still runs, because the
// wanted one is not ready to replace it (its image cannot be pulled yet,
// say), once every one of its containers has run SteadyAfter. The
// revision that ran steadily is then what a failing later revision falls
// back to, and its images are kept, whatever was desired meanwhile.
func markCurrentSteady(plan *Plan, observed []runtime.Container, now time.Time, pol Policy) {
	byKey := observedByKey(observed)
	for _, p := range plan.Pods {
		r := plan.Rollouts[p.Name]
		cur := r.Current
		if cur == nil || cur.Pod.Hash == plan.Hashes[p.Name] || (r.Steady != nil && r.Steady.Pod.Hash == cur.Pod.Hash) {
			continue
		}
		at, ok := steadyAt(cur.Pod, byKey, pol)
		if !ok {
			continue
		}
		if at.After(now) {
			if plan.SteadyCheck.IsZero() || at.Before(plan.SteadyCheck) {
				plan.SteadyCheck = at
			}
			continue
		}
		st := Steadied{Pod: p.Name, Hash: cur.Pod.Hash}
		if r.Steady != nil {
			r.Previous = r.Steady
			st.Previous = r.Steady.Pod.Hash
		}
		r.Steady = &state.Revision{Pod: cur.Pod, Since: now}
		r.Current = nil
		plan.Rollouts[p.Name] = r
		plan.Steadied = append(plan.Steadied, st)
	}
}

// steadyAt returns when revision p (its Hash set) is steady judging by its
// observed containers alone: the latest start of its containers plus
// SteadyAfter. ok is false when one of its containers is not running (an
// init container excepted, and one that completed with code 0 under a
// policy that does not restart it).
func steadyAt(p schema.Pod, byKey map[state.Key]runtime.Container, pol Policy) (time.Time, bool) {
	var at time.Time
	for _, c := range p.Spec.Containers {
		ctr, ok := byKey[state.Key{Pod: p.Name, Container: c.Name, Hash: p.Hash}]
		if !ok {
			return time.Time{}, false
		}
		switch {
		case ctr.State == runtime.StateExited && ctr.ExitCode == 0 && p.Spec.RestartPolicy != "" && p.Spec.RestartPolicy != schema.RestartAlways:
			continue
		case ctr.State != runtime.StateRunning:
			return time.Time{}, false
		case ctr.StartedAt.IsZero():
			continue // running since an unknown time: adopted, count it
		}
		if t := ctr.StartedAt.Add(pol.SteadyAfter); t.After(at) {
			at = t
		}
	}
	return at, true
}

// pruneRollouts returns the rollout records of the desired pods, without
// failures of revisions no longer desired.
func pruneRollouts(desired []schema.Pod, rollouts state.Rollouts) state.Rollouts {
	out := state.Rollouts{}
	for _, p := range desired {
		r, ok := rollouts[p.Name]
		if !ok {
			continue
		}
		if r.Failed != nil && (r.Failed.Hash != podHash(p) || r.Steady == nil) {
			r.Failed = nil // the desired revision changed: try it
		}
		if !r.IsZero() {
			out[p.Name] = r
		}
	}
	return out
}

// podsToRun returns the desired pods with each pod whose desired revision
// failed replaced by its steady revision; back names those pods.
func podsToRun(desired []schema.Pod, ro state.Rollouts) ([]schema.Pod, map[string]bool) {
	pods := make([]schema.Pod, 0, len(desired))
	back := map[string]bool{}
	for _, p := range desired {
		r := ro[p.Name]
		if r.Failed != nil && r.Steady != nil && r.Failed.Hash == podHash(p) {
			pods = append(pods, r.Steady.Pod)
			back[p.Name] = true
			continue
		}
		pods = append(pods, p)
	}
	return pods, back
}

// preparedFallbacks returns hist with the containers of the steady
// revisions being gone back to marked Prepared: their images were kept,
// so the failed revision is replaced at once (a missing image is pulled
// by the create).
func preparedFallbacks(hist state.History, pods []schema.Pod, back map[string]bool) state.History {
	if len(back) == 0 {
		return hist
	}
	out := hist.Clone()
	for _, p := range pods {
		if !back[p.Name] {
			continue
		}
		hash := podHash(p)
		for _, c := range podContainers(p) {
			k := state.Key{Pod: p.Name, Container: c.Name, Hash: hash}
			rec := out[k]
			rec.Prepared = true
			out[k] = rec
		}
	}
	return out
}

// revisionFailure reports whether revision hash of p failed to start,
// judging by its containers' records, and how.
func revisionFailure(p schema.Pod, hash string, hist state.History, now time.Time) (state.Failure, bool) {
	for i, c := range podContainers(p) {
		what := "container " + c.Name
		if i < len(p.Spec.InitContainers) {
			what = "init container " + c.Name
		}
		rec := hist[state.Key{Pod: p.Name, Container: c.Name, Hash: hash}]
		never := rec.Done && rec.LastExitCode != 0 && rec.FailedStarts > 0
		if rec.FailedStarts < FailedStartLimit && !never {
			continue
		}
		f := state.Failure{Hash: hash, Container: c.Name, Attempts: rec.FailedStarts, At: now}
		switch {
		case rec.Failures > 0 && isStartFailure(rec.Reason):
			f.Reason = rec.Reason
			f.Message = fmt.Sprintf("%s: %s: %s, %s", what, rec.Reason, schema.Truncate(rec.Message, 256, "…"), times(rec.FailedStarts))
		case never:
			f.Reason, f.ExitCode = ReasonError, rec.LastExitCode
			f.Message = fmt.Sprintf("%s: exit code %d, restart policy %s", what, rec.LastExitCode, schema.RestartNever)
		default:
			f.Reason, f.ExitCode = ReasonCrashLoopBackOff, rec.LastExitCode
			f.Message = fmt.Sprintf("%s: exit code %d, %s", what, rec.LastExitCode, times(rec.FailedStarts))
		}
		return f, true
	}
	return state.Failure{}, false
}

// isStartFailure reports whether reason is a failure to create or start a
// container (as opposed to getting its image).
func isStartFailure(reason string) bool {
	switch reason {
	case ReasonCreateError, ReasonStartError, ReasonConfigError:
		return true
	}
	return false
}

func times(n int32) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// markSteady records the revisions of plan.Pods that have become steady
// (in plan.Rollouts and plan.Steadied) and sets plan.SteadyCheck to when
// the next one will be if its containers keep running. Pods running their
// steady revision again are steady already.
func markSteady(plan *Plan, observed []runtime.Container, back map[string]bool, now time.Time, pol Policy) {
	byKey := observedByKey(observed)
	for _, p := range plan.Pods {
		hash := podHash(p)
		r := plan.Rollouts[p.Name]
		if back[p.Name] || (r.Steady != nil && r.Steady.Pod.Hash == hash) {
			continue
		}
		steady := true
		for i, c := range podContainers(p) {
			k := state.Key{Pod: p.Name, Container: c.Name, Hash: hash}
			rec := plan.History[k]
			if completed(rec) {
				continue
			}
			if i < len(p.Spec.InitContainers) {
				steady = false // an init container that has not completed
				continue
			}
			ctr, ok := byKey[k]
			if !ok || ctr.State != runtime.StateRunning {
				steady = false
				continue
			}
			started := ctr.StartedAt
			if started.IsZero() {
				started = rec.LastStart
			}
			if started.IsZero() {
				continue // running since an unknown time: adopted, count it
			}
			if at := started.Add(pol.SteadyAfter); at.After(now) {
				steady = false
				if plan.SteadyCheck.IsZero() || at.Before(plan.SteadyCheck) {
					plan.SteadyCheck = at
				}
			}
		}
		if !steady {
			continue
		}
		sp := p
		sp.Hash = hash
		st := Steadied{Pod: p.Name, Hash: hash}
		if r.Steady != nil {
			r.Previous = r.Steady
			st.Previous = r.Steady.Pod.Hash
		}
		r.Steady = &state.Revision{Pod: sp, Since: now}
		r.Failed = nil
		r.Current = nil
		plan.Rollouts[p.Name] = r
		plan.Steadied = append(plan.Steadied, st)
	}
}

// observedByKey maps observed containers by key, preferring the one with
// the canonical ID when a key has two.
func observedByKey(observed []runtime.Container) map[state.Key]runtime.Container {
	byKey := map[state.Key]runtime.Container{}
	for _, c := range observed {
		k := state.Key{Pod: c.Pod, Container: c.Name, Hash: c.PodHash}
		if prev, ok := byKey[k]; ok && prev.ID == ContainerID(k.Pod, k.Container, k.Hash) {
			continue
		}
		byKey[k] = c
	}
	return byKey
}

// shortHash is the part of a pod hash that names a revision to people (and
// container IDs).
func shortHash(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

// checkRollouts drops persisted revisions that are not valid pods of
// their name: the agent would run them, and agent.json, unlike the
// desired state, is not validated on load.
func checkRollouts(ro state.Rollouts, log *slog.Logger) state.Rollouts {
	out := make(state.Rollouts, len(ro))
	for name, r := range ro {
		for _, rev := range []**state.Revision{&r.Steady, &r.Previous, &r.Current} {
			if *rev == nil {
				continue
			}
			if err := validRevision(name, **rev); err != nil {
				log.Warn("persisted pod revision unusable; forgetting it", "pod", name, "err", err)
				*rev = nil
			}
		}
		if r.Steady == nil {
			r.Failed = nil // nothing to go back to
		}
		if !r.IsZero() {
			out[name] = r
		}
	}
	return out
}

func validRevision(name string, rev state.Revision) error {
	if rev.Pod.Name != name || rev.Pod.Hash == "" {
		return fmt.Errorf("revision of pod %q is named %q with hash %q", name, rev.Pod.Name, rev.Pod.Hash)
	}
	ds := schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   "agent", Generation: 1, Pods: []schema.Pod{rev.Pod},
	}
	if err := schema.ValidateDesiredState(&ds); err != nil {
		return fmt.Errorf("revision %s: %w", rev.Pod.Hash, err)
	}
	return nil
}
