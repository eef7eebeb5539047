package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// ActionKind is what the reconciler does to one container.
type ActionKind int

const (
	// Remove stops (gracefully) and deletes a container.
	Remove ActionKind = iota
	// Create pulls the image if needed, creates the container and starts it.
	Create
	// Start starts a container that exists but never ran (the agent stopped
	// between create and start).
	Start
	// Restart starts an exited container again, per its restart policy.
	Restart
	// Prepare pulls the image of a container that will replace a running
	// older version of its pod, while that version keeps running.
	Prepare
	// Kill stops a running container whose liveness or startup probe
	// failed; its exit then goes through the restart policy and the
	// crash-loop backoff like any other (see probes.go).
	Kill
)

func (k ActionKind) String() string {
	switch k {
	case Remove:
		return "remove"
	case Create:
		return "create"
	case Start:
		return "start"
	case Restart:
		return "restart"
	case Prepare:
		return "prepare"
	case Kill:
		return "kill"
	}
	return fmt.Sprintf("ActionKind(%d)", int(k))
}

// Reasons for removal.
const (
	ReasonNotDesired     = "NotDesired"     // the pod is no longer desired
	ReasonSpecChanged    = "SpecChanged"    // the pod's spec hash changed
	ReasonRevisionFailed = "RevisionFailed" // the pod's new revision never started: back to the steady one
	ReasonDuplicate      = "Duplicate"      // a second container for one key
	ReasonUnlabelled     = "Unlabelled"     // managed but without pod/container labels
)

// Reasons a container waits.
const (
	ReasonCrashLoopBackOff = "CrashLoopBackOff"
	ReasonImagePullBackOff = "ImagePullBackOff"
	ReasonErrImagePull     = "ErrImagePull"
	ReasonCreateError      = "CreateContainerError"
	ReasonStartError       = "RunContainerError"
	ReasonConfigError      = "CreateContainerConfigError"
	ReasonCreating         = "ContainerCreating"
	ReasonCompleted        = "Completed"
	ReasonError            = "Error"
	// ReasonRolledBack is the reason of the containers of a failed
	// revision other than the one that failed (see FailedStartLimit).
	ReasonRolledBack = "RolledBack"
	// ReasonUnhealthy is the reason of a Kill: a liveness or startup
	// probe failed.
	ReasonUnhealthy = "Unhealthy"
	// Reasons of a pod's containers while its init containers run, as
	// kubectl shows them: Init:N/M (N of M init containers completed),
	// Init:Error, Init:CrashLoopBackOff, Init: followed by an image or
	// create reason (Init:ImagePullBackOff).
	ReasonInitError            = "Init:Error"
	ReasonInitCrashLoopBackOff = "Init:CrashLoopBackOff"
)

// Action is one step of a Plan.
type Action struct {
	Kind ActionKind
	Key  state.Key
	// ID is the runtime container ID acted on (or to create).
	ID string
	// Reason explains a Remove or a Kill; Message details a Kill (the
	// probe's failure).
	Reason  string
	Message string
	// Replace marks a Create that replaces a container of an older spec of
	// the same pod (removed by the same plan).
	Replace bool
	// Container is the spec to create (Create only).
	Container schema.Container
}

// Wait is a container that needs work but is in backoff until Until.
type Wait struct {
	Key    state.Key
	ID     string
	Until  time.Time
	Reason string
}

// Exit is an exit accounted by this Diff (it updated the history).
type Exit struct {
	Key       state.Key
	ID        string
	Code      int32
	At        time.Time
	Restart   bool          // the policy will restart it
	Delay     time.Duration // after this crash-loop delay
	Policy    schema.RestartPolicy
	RanFor    time.Duration
	KnownRun  bool // RanFor is meaningful
	FirstExit bool
	// GaveUp: this exit made the agent give the revision up (see
	// FailedStartLimit); it is not restarted.
	GaveUp bool
	// Unhealthy: the agent stopped the container because a probe
	// failed.
	Unhealthy bool
	// Init: the container is an init container.
	Init bool
}

// Plan is the outcome of Diff: what to do, what waits, and the updated
// history. Actions are ordered: removes, then kills, then preparations
// and replacements, then creates, then starts and restarts.
type Plan struct {
	Actions []Action
	Waits   []Wait
	Exits   []Exit
	// History is the next history: records of the containers of Pods
	// only, with newly observed exits accounted.
	History state.History
	// Pods are the pods the agent runs: the desired pods, except that a
	// pod whose desired revision failed to start is its steady revision.
	Pods []schema.Pod
	// Hashes maps each pod of Pods to its spec hash.
	Hashes map[string]string
	// Rollouts are the next rollout records, of desired pods only.
	Rollouts state.Rollouts
	// RolledBack lists the pods whose desired revision this Diff found
	// failed to start; Steadied those whose revision it found steady.
	RolledBack []Rollback
	Steadied   []Steadied
	// SteadyCheck is when a revision that is not steady yet will be, if
	// its containers keep running (zero: none).
	SteadyCheck time.Time
}

// Rollback is a desired revision given up for the pod's steady one.
type Rollback struct {
	Pod     string
	Failure state.Failure
	// To is the hash of the steady revision the pod goes back to.
	To string
}

// Steadied is a pod whose revision Hash has become steady; Previous is
// the hash of the steady revision before it ("" for none).
type Steadied struct {
	Pod, Hash, Previous string
}

// NextWake returns the earliest Wait deadline or SteadyCheck.
func (p Plan) NextWake() (time.Time, bool) {
	t := p.SteadyCheck
	for _, w := range p.Waits {
		if t.IsZero() || w.Until.Before(t) {
			t = w.Until
		}
	}
	return t, !t.IsZero()
}

// CrashLoop is the restart backoff of exited containers: Initial after an
// exit, doubling on each further exit up to Max, back to Initial once the
// container ran for ResetAfter.
type CrashLoop struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// DefaultCrashLoop is Kubernetes' kubelet backoff: 10 s doubling to 5 min,
// reset after 10 min of running.
var DefaultCrashLoop = CrashLoop{Initial: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute}

// Next returns the delay before restarting a container that exited after
// running for ranFor (known says whether ranFor is meaningful), given the
// previous delay (0 for none).
func (c CrashLoop) Next(prev, ranFor time.Duration, known bool) time.Duration {
	if prev <= 0 || (known && ranFor >= c.ResetAfter) {
		return c.Initial
	}
	return min(prev*2, max(c.Max, c.Initial))
}

// ShouldRestart applies a restart policy to an exit code.
func ShouldRestart(p schema.RestartPolicy, code int32) bool {
	switch p {
	case schema.RestartNever:
		return false
	case schema.RestartOnFailure:
		return code != 0
	}
	return true // Always, and the default
}

// maxIDLen is containerd's limit on identifiers.
const maxIDLen = 76

// ContainerID returns the deterministic runtime ID of a container:
// {pod}-{container}-{hash[:8]}. IDs that would exceed containerd's 76
// characters are shortened and disambiguated by a digest of the names.
func ContainerID(pod, container, hash string) string {
	h := hash
	if len(h) > 8 {
		h = h[:8]
	}
	id := pod + "-" + container + "-" + h
	if len(id) <= maxIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(pod + "/" + container))
	digest := hex.EncodeToString(sum[:4])
	head := strings.TrimRight((pod + "-" + container)[:maxIDLen-2-len(digest)-len(h)], "-")
	return head + "-" + digest + "-" + h
}

type desiredContainer struct {
	pod    string
	spec   schema.Container
	policy schema.RestartPolicy
	init   bool
}

// podContainers returns p's init containers, in order, then its
// containers.
func podContainers(p schema.Pod) []schema.Container {
	return slices.Concat(p.Spec.InitContainers, p.Spec.Containers)
}

// initPolicy is the restart policy of a pod's init containers: one that
// fails is retried unless the pod's policy is Never; one that completes
// is never run again.
func initPolicy(p schema.RestartPolicy) schema.RestartPolicy {
	if p == schema.RestartNever {
		return schema.RestartNever
	}
	return schema.RestartOnFailure
}

// completed reports whether rec is of a container that ran to completion
// (exit code 0) and is not to run again.
func completed(rec state.Record) bool { return rec.Done && rec.LastExitCode == 0 }

// diffContainers compares the pods to run with the observed containers
// and returns the plan that converges them (Actions, Waits, Exits,
// History, Hashes). It is pure, like Diff; probes are what the probes of
// the running containers say.
//
// A container is identified by pod name, container name and pod spec hash
// (its labels; a pod's Hash when set, its PodSpecHash otherwise).
// Observed containers of undesired keys are removed; missing ones are
// created; exited ones are restarted when their pod's restart policy says
// so and their crash-loop backoff has elapsed; containers whose last
// attempt failed wait until their retry time.
//
// Download, then replace: a pod whose spec changed keeps its running
// containers until every image of the new spec is present (Prepare
// actions, recorded as Prepared in the history). A mistyped image tag
// therefore leaves the previous version running, with the new container
// waiting in ImagePullBackOff, instead of stopping the app and then
// failing to pull.
//
// Init containers run one at a time, in order, each to completion,
// before the pod's containers are created: an init container is acted on
// only once every one before it has completed (exit code 0, under the
// init policy: see initPolicy), and the containers only once all have.
// A completed init container is never run again while the pod's hash is
// the same (its record, persisted, says so). Containers held back are
// left as they are; those of a pod being replaced are prepared (their
// images pulled) with the rest, before the running version stops.
//
// A running container whose liveness or startup probe has failed (for
// its current run) is killed (a Kill action) and marked Unhealthy in the
// history: its exit is restarted per the restart policy and crash-loop
// backoff, whatever its code, unless the policy is Never.
func diffContainers(desired []schema.Pod, observed []runtime.Container, probes probe.Results, hist state.History, now time.Time, pol Policy) Plan {
	plan := Plan{History: state.History{}, Hashes: map[string]string{}}
	want, order := desiredContainers(desired, plan.Hashes)
	m := matchObserved(observed, want, plan.Hashes)
	d := containerDiff{plan: &plan, replaced: m.replaced, probes: probes, now: now, pol: pol}
	initializing := map[string]bool{} // pods whose init containers have not all completed
	for _, k := range order {
		dc := want[k]
		rec := hist[k]
		id := ContainerID(k.Pod, k.Container, k.Hash)
		c, ok := m.keep[k]
		if ok {
			id = c.ID
		}
		if initializing[k.Pod] {
			d.holdBack(k, dc, rec, id)
			continue
		}
		rec = d.step(k, dc, rec, c, ok, id)
		if dc.init && !completed(rec) {
			initializing[k.Pod] = true
		}
		if rec != (state.Record{}) {
			plan.History[k] = rec
		}
	}
	removes, replaces := holdUnprepared(m.removes, d.replaces, d.held, plan.History, pol.Holds)
	plan.Actions = slices.Concat(removes, d.kills, replaces, d.creates, d.starts)
	return plan
}

// desiredContainers returns the containers of the desired pods by key, and
// their keys in order (pod by pod, init containers first); it records each
// pod's hash in hashes.
func desiredContainers(desired []schema.Pod, hashes map[string]string) (map[state.Key]desiredContainer, []state.Key) {
	want := map[state.Key]desiredContainer{}
	var order []state.Key
	for _, p := range desired {
		hash := podHash(p)
		hashes[p.Name] = hash
		policy := p.Spec.RestartPolicy
		if policy == "" {
			policy = schema.RestartAlways
		}
		for i, c := range podContainers(p) {
			k := state.Key{Pod: p.Name, Container: c.Name, Hash: hash}
			if _, dup := want[k]; dup {
				continue // validation forbids it; never act twice
			}
			d := desiredContainer{pod: p.Name, spec: c, policy: policy}
			if i < len(p.Spec.InitContainers) {
				d.init, d.policy = true, initPolicy(policy)
			}
			want[k] = d
			order = append(order, k)
		}
	}
	return want, order
}

// observedMatch is how the observed containers map onto the desired ones.
type observedMatch struct {
	// keep is the one observed container kept for each desired key.
	keep map[state.Key]runtime.Container
	// removes remove every other observed container, in ID order.
	removes []Action
	// replaced are the desired pods that run containers of another spec.
	replaced map[string]bool
}

// matchObserved groups the observed containers by key and picks one keeper
// per desired key; it removes unlabelled containers, those of undesired
// keys (SpecChanged when their pod is desired with another hash) and
// duplicates, keeping the one with the canonical ID, else the first by ID.
func matchObserved(observed []runtime.Container, want map[state.Key]desiredContainer, hashes map[string]string) observedMatch {
	m := observedMatch{keep: map[state.Key]runtime.Container{}, replaced: map[string]bool{}}
	obs := slices.Clone(observed)
	slices.SortFunc(obs, func(a, b runtime.Container) int { return strings.Compare(a.ID, b.ID) })
	for _, c := range obs {
		k := state.Key{Pod: c.Pod, Container: c.Name, Hash: c.PodHash}
		if c.Pod == "" || c.Name == "" {
			m.removes = append(m.removes, Action{Kind: Remove, Key: k, ID: c.ID, Reason: ReasonUnlabelled})
			continue
		}
		if _, ok := want[k]; !ok {
			reason := ReasonNotDesired
			if _, podWanted := hashes[c.Pod]; podWanted {
				reason = ReasonSpecChanged
				m.replaced[c.Pod] = true
			}
			m.removes = append(m.removes, Action{Kind: Remove, Key: k, ID: c.ID, Reason: reason})
			continue
		}
		prev, seen := m.keep[k]
		if !seen {
			m.keep[k] = c
			continue
		}
		if c.ID == ContainerID(k.Pod, k.Container, k.Hash) {
			m.keep[k] = c
			m.removes = append(m.removes, Action{Kind: Remove, Key: k, ID: prev.ID, Reason: ReasonDuplicate})
		} else {
			m.removes = append(m.removes, Action{Kind: Remove, Key: k, ID: c.ID, Reason: ReasonDuplicate})
		}
	}
	return m
}

// containerDiff decides, one desired container at a time, what a plan does:
// it appends waits and exits to plan and sorts the actions by kind, in the
// order Plan.Actions lists them.
type containerDiff struct {
	plan     *Plan
	replaced map[string]bool
	probes   probe.Results
	now      time.Time
	pol      Policy

	kills, replaces, creates, starts []Action
	// held are the preparations of containers that init containers hold
	// back (see holdUnprepared).
	held []Action
}

// holdBack leaves a container behind an uncompleted init container as it
// is, keeping its record; one of a pod being replaced is prepared.
func (d *containerDiff) holdBack(k state.Key, dc desiredContainer, rec state.Record, id string) {
	if d.replaced[k.Pod] && !rec.Prepared {
		d.held = append(d.held, Action{Kind: Prepare, Key: k, ID: id, Container: dc.spec})
	}
	if rec != (state.Record{}) {
		d.plan.History[k] = rec
	}
}

// step decides what to do with one desired container, c being its
// observed container (ok: there is one) and id the ID to act on; it
// returns the container's next record.
func (d *containerDiff) step(k state.Key, dc desiredContainer, rec state.Record, c runtime.Container, ok bool, id string) state.Record {
	switch {
	case !ok:
		d.missing(k, dc, rec, id)
	case c.State == runtime.StateRunning:
		rec = d.running(k, dc, rec, c, id)
	case c.State == runtime.StateCreated:
		if rec.RetryAt.After(d.now) {
			d.wait(k, id, rec.RetryAt, backoffReason(rec.Reason))
		} else {
			d.starts = append(d.starts, Action{Kind: Start, Key: k, ID: id})
		}
	case c.State == runtime.StateExited:
		rec = d.exited(k, dc, rec, c, id)
	default:
		// StateUnknown: the runtime cannot say; touch nothing.
	}
	return rec
}

// missing creates a container that does not exist, unless it completed or
// waits out a failed attempt.
func (d *containerDiff) missing(k state.Key, dc desiredContainer, rec state.Record, id string) {
	switch {
	case rec.Done:
		// Ran to completion under a no-restart policy, then was
		// deleted by someone else: do not run it again.
	case rec.RetryAt.After(d.now):
		d.wait(k, id, rec.RetryAt, backoffReason(rec.Reason))
	default:
		a := Action{Kind: Create, Key: k, ID: id, Container: dc.spec, Replace: d.replaced[k.Pod]}
		if a.Replace {
			d.replaces = append(d.replaces, a)
		} else {
			d.creates = append(d.creates, a)
		}
	}
}

// running clears the failures of a container that did start, and kills it
// when its liveness or startup probe failed.
func (d *containerDiff) running(k state.Key, dc desiredContainer, rec state.Record, c runtime.Container, id string) state.Record {
	if rec.Failures > 0 {
		// A start that reported failure (a timeout, say) did start.
		rec.Failures, rec.RetryAt, rec.Reason, rec.Message = 0, time.Time{}, "", ""
	}
	if why := probeFailure(dc.spec, c, d.probes); why != "" {
		rec.Unhealthy = true
		d.kills = append(d.kills, Action{Kind: Kill, Key: k, ID: id, Reason: ReasonUnhealthy, Message: why})
	}
	return rec
}

// exited accounts a new exit, then restarts the container once its
// backoff has elapsed, unless it is done.
func (d *containerDiff) exited(k state.Key, dc desiredContainer, rec state.Record, c runtime.Container, id string) state.Record {
	if newExit(rec, c) {
		rec, d.plan.Exits = accountExit(rec, c, k, dc.policy, d.now, d.pol, d.plan.Exits)
		d.plan.Exits[len(d.plan.Exits)-1].Init = dc.init
	}
	switch {
	case rec.Done:
	case rec.RetryAt.After(d.now):
		d.wait(k, id, rec.RetryAt, backoffReason(rec.Reason))
	case rec.NotBefore.After(d.now):
		d.wait(k, id, rec.NotBefore, ReasonCrashLoopBackOff)
	default:
		d.starts = append(d.starts, Action{Kind: Restart, Key: k, ID: id})
	}
	return rec
}

func (d *containerDiff) wait(k state.Key, id string, until time.Time, reason string) {
	d.plan.Waits = append(d.plan.Waits, Wait{Key: k, ID: id, Until: until, Reason: reason})
}

// holdUnprepared keeps the running version of every replaced pod whose new
// containers are not all prepared (their images present): it drops that
// pod's SpecChanged removes and turns its replacing creates into Prepare
// actions, or drops them where already prepared. A new container in
// backoff after a failed preparation is a Wait already, and holds its pod
// too: a pod is ready to be replaced only when no replacing container is
// missing from the creates. held are the Prepare actions of unprepared
// new containers that init containers hold back: they hold their pod too,
// and are kept. A pod in holds (its update window is closed, or its
// update lock held: see update.go) is never ready: its new images are
// pulled ahead and the running version stays.
func holdUnprepared(removes, replaces, held []Action, hist state.History, holds map[string]Hold) ([]Action, []Action) {
	if len(replaces) == 0 && len(removes) == 0 && len(held) == 0 {
		return removes, replaces
	}
	ready := map[string]bool{}
	for _, a := range slices.Concat(replaces, held) {
		if _, seen := ready[a.Key.Pod]; !seen {
			_, hold := holds[a.Key.Pod]
			ready[a.Key.Pod] = !hold
		}
		ready[a.Key.Pod] = ready[a.Key.Pod] && hist[a.Key].Prepared
	}
	for k, rec := range hist {
		// A replacing container waiting out a failed preparation.
		if !rec.Prepared && rec.Failures > 0 && rec.Reason != "" {
			if _, replacing := ready[k.Pod]; replacing || hasSpecChange(removes, k.Pod) {
				ready[k.Pod] = false
			}
		}
	}
	var keptRemoves []Action
	for _, a := range removes {
		if a.Reason == ReasonSpecChanged && !ready[a.Key.Pod] {
			if _, replacing := ready[a.Key.Pod]; replacing {
				continue // the running version stays until the new one is ready
			}
		}
		keptRemoves = append(keptRemoves, a)
	}
	var out []Action
	for _, a := range replaces {
		switch {
		case ready[a.Key.Pod]:
			out = append(out, a)
		case !hist[a.Key].Prepared:
			a.Kind, a.Replace = Prepare, false
			out = append(out, a)
		}
	}
	return keptRemoves, append(out, held...)
}

func hasSpecChange(removes []Action, pod string) bool {
	for _, a := range removes {
		if a.Key.Pod == pod && a.Reason == ReasonSpecChanged {
			return true
		}
	}
	return false
}

// newExit reports whether c's exit has not been accounted in rec yet.
// Exits are identified by their time; a runtime that reports none falls
// back to the ExitSeen flag, which the next start clears.
func newExit(rec state.Record, c runtime.Container) bool {
	if !c.FinishedAt.IsZero() {
		return !c.FinishedAt.Equal(rec.LastExitAt)
	}
	return !rec.ExitSeen
}

// accountExit records an exit in rec: its code and time, the next
// crash-loop delay, Done when the policy will not restart it, and a
// failed start when the container exited before running steadily
// (pol.SteadyAfter) other than by completing under a policy that does
// not restart it.
func accountExit(rec state.Record, c runtime.Container, k state.Key, policy schema.RestartPolicy, now time.Time, pol Policy, exits []Exit) (state.Record, []Exit) {
	cl := pol.CrashLoop
	exitAt := c.FinishedAt
	if exitAt.IsZero() {
		exitAt = now
	}
	startedAt := c.StartedAt
	if startedAt.IsZero() {
		startedAt = rec.LastStart
	}
	known := !startedAt.IsZero() && !exitAt.Before(startedAt)
	var ranFor time.Duration
	if known {
		ranFor = exitAt.Sub(startedAt)
	}
	ex := Exit{Key: k, ID: c.ID, Code: c.ExitCode, At: exitAt, Policy: policy, RanFor: ranFor, KnownRun: known, FirstExit: rec.Delay == 0, Unhealthy: rec.Unhealthy}
	// A container the agent stopped because a probe failed is restarted
	// unless the policy is Never, whatever its exit code (a workload that
	// exits 0 on SIGTERM included), as the kubelet does.
	restart := ShouldRestart(policy, c.ExitCode) || (rec.Unhealthy && policy != schema.RestartNever)
	rec.Unhealthy = false
	rec.ExitSeen = true
	rec.LastExitCode = c.ExitCode
	rec.LastExitAt = c.FinishedAt
	if (!known || ranFor < pol.SteadyAfter) && (c.ExitCode != 0 || restart) {
		rec.FailedStarts++
	}
	if restart {
		rec.Delay = cl.Next(rec.Delay, ranFor, known)
		rec.NotBefore = exitAt.Add(rec.Delay)
		rec.Done = false
		ex.Restart, ex.Delay = true, rec.Delay
	} else {
		rec.Done = true
		rec.NotBefore = time.Time{}
	}
	return rec, append(exits, ex)
}

func backoffReason(r string) string {
	if r == ReasonErrImagePull {
		return ReasonImagePullBackOff
	}
	if r == "" {
		return ReasonCreateError
	}
	return r
}
