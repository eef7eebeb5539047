package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Phase is where a rollout stands: schema.RolloutPhase, whose constants
// say what each phase means.
type Phase = schema.RolloutPhase

// The phases, as the planner names them.
const (
	PhaseProgressing = schema.RolloutProgressing
	PhasePaused      = schema.RolloutPaused
	PhaseComplete    = schema.RolloutComplete
	PhaseStopped     = schema.RolloutStopped
	PhaseRolledBack  = schema.RolloutRolledBack
)

// State is what the hub persists between calls, per Deployment. Next
// returns the next State; the zero State starts a rollout.
type State struct {
	// Revision is the revision this state is about; a state for another
	// revision is discarded.
	Revision string `json:"revision,omitempty"`
	// Phase is where the rollout stands.
	Phase Phase `json:"phase,omitempty"`
	// Step is the current step, from 0.
	Step int `json:"step,omitempty"`
	// WaveStartedAt is when the rollout of this revision started, or
	// later gave the new revision to more devices.
	WaveStartedAt time.Time `json:"waveStartedAt,omitzero"`
	// PauseStartedAt is when the current step's devices were all healthy,
	// which starts its pause; zero until then.
	PauseStartedAt time.Time `json:"pauseStartedAt,omitzero"`
	// Paused is the operator's pause (fleet rollout pause); the caller sets
	// and clears it.
	Paused bool `json:"paused,omitempty"`
	// Reason says in one line why the rollout stopped or rolled back.
	Reason string `json:"reason,omitempty"`
	// FinishedAt is when the phase became final.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Device is one targeted device as the hub sees it.
type Device struct {
	// Name is the device's name, unique among the devices of one call.
	Name string
	// Labels are the device's labels, for selectorOrder.
	Labels map[string]string
	// Online says whether the device is connected now, and OnlineSince
	// when it last connected (zero: long ago).
	Online      bool
	OnlineSince time.Time
	// Revision is the revision the hub assigns the device now ("" none).
	Revision string
	// AssignedAt is when the device was given Revision: the Now of the
	// call whose Plan.Added named it. Zero means unknown: the wave's start
	// stands in for it, which moves with every wave, so keep it.
	AssignedAt time.Time
	// Ready says whether the device reports the new revision's pod Ready
	// (readiness probes where the pod has them, else running), and
	// ReadyChangedAt since when Ready has had that value (zero: long ago).
	Ready          bool
	ReadyChangedAt time.Time
	// Failed says the device reports the new revision failing: its pod
	// crash-loops or its image cannot be pulled; Reason says how
	// ("ImagePullBackOff").
	Failed bool
	Reason string
	// WindowOpensAt is when the device's update window lets it switch to
	// Revision, once it has reported holding Revision back for its
	// window (zero: it never did). Until then the device is pending,
	// never failed; its progress deadline counts from then.
	WindowOpensAt time.Time
}

// Input is everything a plan depends on.
type Input struct {
	// Strategy is the Deployment's validated spec.strategy.staged; nil
	// reads as one step of 100%.
	Strategy *schema.Staged
	// Revision is the revision being rolled out; LastGood the last one
	// whose rollout completed ("" none), which a rollback returns to.
	Revision string
	LastGood string
	// Devices are the targeted devices, in any order.
	Devices []Device
	// Names, if set, name Revision and LastGood in the reasons the plan
	// gives ("3" for "revision 3"); the revisions themselves otherwise.
	Names Names
	// State is the State of the previous plan.
	State State
	// Now is the time of the call.
	Now time.Time
}

// Names are how reasons name the revisions of an Input.
type Names struct {
	Revision, LastGood string
}

// Plan is the outcome of one call.
type Plan struct {
	// State is the state to persist and pass to the next call.
	State State
	// New names the devices that run the new revision, Old those that run
	// the last good one (or nothing when there is none); both sorted, and
	// together every device.
	New []string
	Old []string
	// Added names the devices of New that did not run the new revision
	// before this call, sorted: the caller records Now as their
	// AssignedAt.
	Added []string
	// Status summarises the rollout for rollout status and describe.
	Status Status
	// RecheckAt is the earliest time at which the plan may change without
	// any input changing (a deadline, minReadySeconds, a pause ending);
	// zero when only new input can change it.
	RecheckAt time.Time
}

// Status summarises a rollout. The counts are about the new revision.
type Status struct {
	Revision string `json:"revision"`
	Phase    Phase  `json:"phase"`
	// Step is the current step, from 1, of Steps.
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Targeted counts the devices; Updated those assigned the new
	// revision; Ready those of them healthy; Failed those of them failed
	// (online only); Pending the rest (Targeted - Ready - Failed): not on
	// the new revision yet, starting it, or offline.
	Targeted int `json:"targeted"`
	Updated  int `json:"updated"`
	Ready    int `json:"ready"`
	Failed   int `json:"failed"`
	Pending  int `json:"pending"`
	// Waiting says what the rollout waits for, and WaitUntil when that
	// wait ends at the latest (zero: no bound, such as an operator's
	// pause).
	Waiting   string    `json:"waiting,omitempty"`
	WaitUntil time.Time `json:"waitUntil,omitzero"`
	// Reason says in one line why the rollout stopped or rolled back.
	Reason string `json:"reason,omitempty"`
}

// health is what a device's reports say about the new revision.
type health uint8

const (
	notOnNew       health = iota // not assigned the new revision
	fresh                        // given it by this call
	starting                     // online, not Ready, within its deadline
	warming                      // Ready for less than minReadySeconds
	offlineWaiting               // offline, not healthy, the step still waits for it
	offlinePending               // offline, not healthy, the step no longer waits
	healthy
	failed
)

// blocks reports whether a device in health h holds the step back.
func (h health) blocks() bool {
	return h == fresh || h == starting || h == warming || h == offlineWaiting
}

// verdict is one device's health, when it may change by time alone, and
// why it failed.
type verdict struct {
	h      health
	at     time.Time
	reason string
}

type planner struct {
	in       Input
	s        *schema.Staged
	now      time.Time
	deadline time.Duration
	minReady time.Duration
	st       State
	verdicts []verdict
	onNew    []bool
}

// Next plans the next move of a staged rollout. It is pure: the same input
// gives the same plan, and it does not modify in.
func Next(in Input) Plan {
	s := in.Strategy
	if s == nil {
		s = &schema.Staged{}
	}
	p := &planner{
		in:       in,
		s:        s,
		now:      in.Now,
		deadline: s.ProgressDeadline(),
		minReady: s.MinReady(),
		st:       in.State,
		verdicts: make([]verdict, len(in.Devices)),
		onNew:    make([]bool, len(in.Devices)),
	}
	p.normalize()
	for i := range in.Devices {
		d := &in.Devices[i]
		p.onNew[i] = d.Revision == in.Revision
		p.verdicts[i] = p.judge(d)
	}
	var added []int
	switch p.st.Phase {
	case PhaseRolledBack:
		clear(p.onNew)
	case PhaseComplete:
		for i := range p.onNew {
			if !p.onNew[i] {
				p.onNew[i] = true
				p.verdicts[i] = p.freshVerdict()
				added = append(added, i)
			}
		}
	case PhaseStopped:
		// The devices stay where they are.
	default:
		added = p.progress()
	}
	return p.result(added)
}

// normalize discards a state for another revision and repairs one that
// validation would not have produced.
func (p *planner) normalize() {
	st := &p.st
	if st.Revision != p.in.Revision {
		*st = State{Revision: p.in.Revision, Paused: st.Paused, WaveStartedAt: p.now}
	}
	switch st.Phase {
	case PhaseProgressing, PhasePaused, PhaseComplete, PhaseStopped, PhaseRolledBack:
	default:
		st.Phase = PhaseProgressing
	}
	if st.Phase == PhaseRolledBack && p.in.LastGood == "" {
		// Nothing to roll back to: a state from a caller that lost its
		// last good revision.
		st.Phase = PhaseStopped
	}
	st.Step = min(max(st.Step, 0), p.s.NumSteps()-1)
	if p.in.Revision == p.in.LastGood && st.Phase != PhaseComplete {
		// The last good revision: every device may run it at once.
		st.Phase = PhaseComplete
		st.FinishedAt = p.now
		st.Reason = ""
	}
}

// judge returns what a device's reports say about the new revision.
func (p *planner) judge(d *Device) verdict {
	if d.Revision != p.in.Revision {
		return verdict{h: notOnNew}
	}
	assigned := d.AssignedAt
	if assigned.IsZero() {
		assigned = p.st.WaveStartedAt
	}
	readyAt := d.ReadyChangedAt.Add(p.minReady)
	if !d.Online {
		if d.Ready && !p.now.Before(readyAt) {
			return verdict{h: healthy}
		}
		if wait := assigned.Add(p.deadline); p.now.Before(wait) {
			return verdict{h: offlineWaiting, at: wait}
		}
		return verdict{h: offlinePending}
	}
	if !d.Ready && p.now.Before(d.WindowOpensAt) {
		// Outside its update window: pending, its images pulled ahead.
		return verdict{h: starting, at: d.WindowOpensAt}
	}
	if d.Failed {
		return verdict{h: failed, reason: cmp.Or(d.Reason, "failed")}
	}
	if d.Ready {
		if !p.now.Before(readyAt) {
			return verdict{h: healthy}
		}
		return verdict{h: warming, at: readyAt}
	}
	since := latest(assigned, d.OnlineSince, d.ReadyChangedAt, d.WindowOpensAt)
	if deadline := since.Add(p.deadline); p.now.Before(deadline) {
		return verdict{h: starting, at: deadline}
	}
	return verdict{h: failed, reason: fmt.Sprintf("not Ready within %v", p.deadline)}
}

// freshVerdict is the verdict on a device given the new revision now.
func (p *planner) freshVerdict() verdict {
	return verdict{h: fresh, at: p.now.Add(p.deadline)}
}

// progress runs the steps of a rollout that is not final: it stops the
// rollout at the failure threshold, or gives the new revision to the
// devices the current step allows and starts the next steps whose turn
// has come. It returns the devices it gave the new revision.
func (p *planner) progress() []int {
	st := &p.st
	n := len(p.in.Devices)
	failures, updated, blocking := 0, 0, 0
	for i, v := range p.verdicts {
		if p.onNew[i] {
			updated++
		}
		if v.h == failed {
			failures++
		}
		if v.h.blocks() {
			blocking++
		}
	}
	if failures >= p.s.FailureLimit(n) {
		p.stop(failures)
		return nil
	}
	st.Phase = PhaseProgressing
	if st.Paused {
		st.Phase = PhasePaused
		return nil
	}
	var added []int
	var order []int
	for {
		if target := p.s.StepTarget(st.Step, n); updated < target {
			if order == nil {
				order = p.waveOrder()
			}
			for _, i := range order[len(added):][:target-updated] {
				p.onNew[i] = true
				p.verdicts[i] = p.freshVerdict()
				added = append(added, i)
			}
			blocking += target - updated
			updated = target
			st.WaveStartedAt = p.now
		}
		if blocking > 0 {
			// The pause counts from the moment every device is healthy.
			st.PauseStartedAt = time.Time{}
			break
		}
		if pause := p.s.StepPause(st.Step); pause > 0 {
			if st.PauseStartedAt.IsZero() {
				st.PauseStartedAt = p.now
			}
			if p.now.Before(st.PauseStartedAt.Add(pause)) {
				break
			}
		}
		if st.Step >= p.s.NumSteps()-1 {
			st.Phase = PhaseComplete
			st.FinishedAt = p.now
			st.PauseStartedAt = time.Time{}
			break
		}
		st.Step++
		st.PauseStartedAt = time.Time{}
	}
	return added
}

// waveOrder returns the devices not on the new revision in the order they
// get it: by selectorOrder rank, online first, by name.
func (p *planner) waveOrder() []int {
	type key struct {
		rank   int
		online bool
		name   string
		i      int
	}
	keys := make([]key, 0, len(p.in.Devices))
	for i := range p.in.Devices {
		if !p.onNew[i] {
			d := &p.in.Devices[i]
			keys = append(keys, key{p.s.OrderRank(d.Labels), d.Online, d.Name, i})
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if a.online != b.online {
			if a.online {
				return -1
			}
			return 1
		}
		return cmp.Or(strings.Compare(a.name, b.name), cmp.Compare(a.i, b.i))
	})
	order := make([]int, len(keys))
	for j, k := range keys {
		order[j] = k.i
	}
	return order
}

// stop ends the rollout at the failure threshold: a rollback to the last
// good revision when the strategy asks for one and there is one.
func (p *planner) stop(failures int) {
	st := &p.st
	const shown = 3
	var first []int // the first failed devices by name
	for i, v := range p.verdicts {
		if v.h != failed {
			continue
		}
		at, _ := slices.BinarySearchFunc(first, p.in.Devices[i].Name, func(j int, name string) int {
			return strings.Compare(p.in.Devices[j].Name, name)
		})
		if at < shown {
			first = slices.Insert(first, at, i)[:min(len(first)+1, shown)]
		}
	}
	var names []string
	for _, i := range first {
		names = append(names, p.in.Devices[i].Name+" ("+p.verdicts[i].reason+")")
	}
	list := strings.Join(names, ", ")
	if failures > shown {
		list += fmt.Sprintf(" and %d more", failures-shown)
	}
	threshold := cmp.Or(string(p.s.FailureThreshold), "0")
	why := fmt.Sprintf("%d of %d devices failed revision %s, reaching failureThreshold %s: %s",
		failures, len(p.in.Devices), cmp.Or(p.in.Names.Revision, p.in.Revision), threshold, list)
	st.PauseStartedAt = time.Time{}
	st.FinishedAt = p.now
	switch {
	case p.s.AutoRollback && p.in.LastGood != "":
		st.Phase = PhaseRolledBack
		st.Reason = fmt.Sprintf("rolled back to revision %s: %s", cmp.Or(p.in.Names.LastGood, p.in.LastGood), why)
		clear(p.onNew)
	case p.s.AutoRollback:
		st.Phase = PhaseStopped
		st.Reason = fmt.Sprintf("stopped: %s; not rolled back: no earlier revision completed its rollout", why)
	default:
		st.Phase = PhaseStopped
		st.Reason = fmt.Sprintf("stopped: %s; autoRollback is off", why)
	}
}

// result assembles the plan from the final state and assignment.
func (p *planner) result(added []int) Plan {
	st := p.st
	out := Plan{State: st}
	byName := p.byName()
	updated := 0
	for _, on := range p.onNew {
		if on {
			updated++
		}
	}
	out.New = make([]string, 0, updated)
	out.Old = make([]string, 0, len(p.onNew)-updated)
	status := Status{
		Revision: p.in.Revision,
		Phase:    st.Phase,
		Step:     st.Step + 1,
		Steps:    p.s.NumSteps(),
		Targeted: len(p.in.Devices),
		Reason:   st.Reason,
	}
	var wait waitCounts
	for _, i := range byName {
		name := p.in.Devices[i].Name
		if !p.onNew[i] {
			out.Old = append(out.Old, name)
			continue
		}
		out.New = append(out.New, name)
		status.Updated++
		v := p.verdicts[i]
		switch v.h {
		case healthy:
			status.Ready++
		case failed:
			status.Failed++
		case fresh:
			if p.in.Devices[i].Online {
				wait.starting++
			} else {
				wait.offline++
			}
		case starting:
			wait.starting++
		case warming:
			wait.warming++
		case offlineWaiting:
			wait.offline++
		}
		if !st.Phase.Final() && !v.at.IsZero() && v.at.After(p.now) {
			if out.RecheckAt.IsZero() || v.at.Before(out.RecheckAt) {
				out.RecheckAt = v.at
			}
			if v.h.blocks() && v.at.After(status.WaitUntil) {
				status.WaitUntil = v.at
			}
		}
	}
	status.Pending = status.Targeted - status.Ready - status.Failed
	for _, i := range added {
		out.Added = append(out.Added, p.in.Devices[i].Name)
	}
	slices.Sort(out.Added)

	p.waiting(&out, &status, wait)
	out.Status = status
	return out
}

// waitCounts are the devices on the new revision that the step waits for,
// by why.
type waitCounts struct{ fresh, starting, warming, offline int }

// waiting says in status what the rollout waits for and until when, and
// moves out.RecheckAt to the end of a pause between steps.
func (p *planner) waiting(out *Plan, status *Status, wait waitCounts) {
	st := p.st
	blocking := wait.starting + wait.warming + wait.offline
	switch {
	case st.Phase == PhasePaused:
		status.Waiting = "paused by an operator: no step starts until the rollout is resumed"
		status.WaitUntil = time.Time{}
	case st.Phase != PhaseProgressing:
		status.WaitUntil = time.Time{}
	case blocking > 0:
		var parts []string
		for _, c := range []struct {
			n    int
			what string
		}{
			{wait.starting, "starting"},
			{wait.warming, fmt.Sprintf("Ready for less than %v", p.minReady)},
			{wait.offline, "offline"},
		} {
			if c.n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
			}
		}
		status.Waiting = fmt.Sprintf("step %d of %d: %d %s to become healthy (%s)",
			status.Step, status.Steps, blocking, plural(blocking, "device", "devices"), strings.Join(parts, ", "))
	case !st.PauseStartedAt.IsZero():
		pause := p.s.StepPause(st.Step)
		end := st.PauseStartedAt.Add(pause)
		next := fmt.Sprintf("step %d", status.Step+1)
		if status.Step >= status.Steps {
			next = "completing"
		}
		status.Waiting = fmt.Sprintf("step %d of %d: pausing %v before %s", status.Step, status.Steps, pause, next)
		status.WaitUntil = end
		if out.RecheckAt.IsZero() || end.Before(out.RecheckAt) {
			out.RecheckAt = end
		}
	}
}

// byName returns the device indices in name order.
func (p *planner) byName() []int {
	devs := p.in.Devices
	idx := make([]int, len(devs))
	for i := range idx {
		idx[i] = i
	}
	if slices.IsSortedFunc(devs, func(a, b Device) int { return strings.Compare(a.Name, b.Name) }) {
		return idx // the usual case: the hub lists devices by name
	}
	type key struct {
		name string
		i    int
	}
	keys := make([]key, len(devs))
	for i := range devs {
		keys[i] = key{devs[i].Name, i}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(strings.Compare(a.name, b.name), cmp.Compare(a.i, b.i)) })
	for j, k := range keys {
		idx[j] = k.i
	}
	return idx
}

// IsNew reports whether the plan assigns the device the new revision.
func (p Plan) IsNew(name string) bool {
	_, ok := slices.BinarySearch(p.New, name)
	return ok
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
