// Package agentplan plans an AgentRollout: which selected devices' desired
// state names the new agent release now, which the last good one, and
// where each device stands. It drives the same staged planner as
// Deployments (hub/rollout.Next) with the agent's version as the revision
// and "the device reports that version" as Ready, so waves, the failure
// threshold, autoRollback and offline devices (pending, never failed)
// behave exactly as they do for a pod. Next is pure: no clock, no store.
package agentplan

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fleetmq/fleet/hub/rollout"
	"github.com/fleetmq/fleet/schema"
)

// State is what the hub persists between calls, per AgentRollout; the zero
// State starts one.
type State struct {
	// Rollout is the staged planner's state for Spec.Version.
	Rollout rollout.State `json:"rollout"`
	// Spec is the spec this state is about; LastGood the spec of the last
	// version whose rollout completed (nil: none), which devices outside
	// the waves keep and a rollback returns to.
	Spec     *schema.AgentRolloutSpec `json:"spec,omitempty"`
	LastGood *schema.AgentRolloutSpec `json:"lastGood,omitempty"`
	// Assigned are the devices given a version, with when.
	Assigned map[string]Assignment `json:"assigned,omitempty"`
}

// Assignment is the version a device was given, and when.
type Assignment struct {
	Version string    `json:"version"`
	At      time.Time `json:"at"`
}

// Device is one selected device as the hub sees it.
type Device struct {
	Name   string
	Labels map[string]string
	// Online says whether the device is connected, OnlineSince since when.
	Online      bool
	OnlineSince time.Time
	// Arch is the device's architecture (fleet/arch), "" until it reports.
	Arch string
	// Version is the agent version the device last reported, and
	// VersionSince since when it has reported it (zero: long ago).
	Version      string
	VersionSince time.Time
	// Failed says the device reports that the new agent failed its trial
	// and it went back to its previous binary; Reason says why.
	Failed bool
	Reason string
}

// Input is everything a plan depends on.
type Input struct {
	Rollout *schema.AgentRollout // validated and defaulted
	Devices []Device             // the devices its selector matches
	State   State
	Now     time.Time
}

// Plan is the outcome of one call.
type Plan struct {
	// State is to persist and pass to the next call.
	State State
	// Agents is what each device's desired state names (desiredState.agent);
	// a device that is absent keeps the agent it runs.
	Agents map[string]*schema.DesiredAgent
	// Status is the AgentRollout's status.
	Status schema.AgentRolloutStatus
	// RecheckAt is when the plan may change with no new input (zero: never).
	RecheckAt time.Time
}

// Next plans the next move of an AgentRollout.
func Next(in Input) Plan {
	spec := in.Rollout.Spec
	st := in.State
	st.Assigned = cloneAssigned(st.Assigned)
	if st.Spec != nil && st.Spec.Version != spec.Version {
		if st.Rollout.Phase == rollout.PhaseComplete {
			prev := *st.Spec
			st.LastGood = &prev
		}
		st.Rollout = rollout.State{}
	}
	st.Spec = &spec
	st.Rollout.Paused = spec.Paused
	lastGood := ""
	if st.LastGood != nil {
		lastGood = st.LastGood.Version
	}
	devs := slices.Clone(in.Devices)
	slices.SortFunc(devs, func(a, b Device) int { return cmp.Compare(a.Name, b.Name) })
	rin := rollout.Input{
		Strategy: spec.Strategy.Staged, Revision: spec.Version, LastGood: lastGood,
		State: st.Rollout, Now: in.Now, Devices: make([]rollout.Device, len(devs)),
	}
	for i, d := range devs {
		a := st.Assigned[d.Name]
		ready := d.Version == spec.Version
		rin.Devices[i] = rollout.Device{
			Name: d.Name, Labels: d.Labels, Online: d.Online, OnlineSince: d.OnlineSince,
			Revision: a.Version, AssignedAt: a.At,
			Ready: ready, ReadyChangedAt: d.VersionSince,
			Failed: d.Failed && !ready, Reason: d.Reason,
		}
	}
	rp := rollout.Next(rin)
	st.Rollout = rp.State
	for _, name := range rp.Added {
		st.Assigned[name] = Assignment{Version: spec.Version, At: in.Now}
	}
	out := Plan{State: st, Agents: map[string]*schema.DesiredAgent{}, RecheckAt: rp.RecheckAt}
	onNew := map[string]bool{}
	for _, name := range rp.New {
		onNew[name] = true
	}
	for i, d := range devs {
		phase, reason := devicePhase(d, rin.Devices[i], onNew[d.Name], st, in.Now)
		desired := ""
		if want := desiredSpec(onNew[d.Name], st); want != nil {
			if a, ok := want.ArtifactFor(d.Arch); ok && d.Arch != "" {
				a.Rollout = in.Rollout.Metadata.Name
				out.Agents[d.Name] = &a
				desired = a.Version
			}
		}
		out.Status.Devices = append(out.Status.Devices, schema.AgentDeviceStatus{
			Name: d.Name, Version: d.Version, Desired: desired, Phase: phase, Online: d.Online, Reason: reason,
		})
	}
	out.Status.LastGoodVersion, out.Status.LastGood = lastGood, st.LastGood
	out.Status.ObservedGeneration = in.Rollout.Metadata.Generation
	out.Status.Rollout = rolloutStatus(rp, st, lastGood)
	return out
}

// desiredSpec is the spec a device runs: the new one on the waves, else
// the last good one (nil: none, the device keeps what it runs).
func desiredSpec(onNew bool, st State) *schema.AgentRolloutSpec {
	if onNew {
		return st.Spec
	}
	return st.LastGood
}

// devicePhase says where one device stands.
func devicePhase(d Device, rd rollout.Device, onNew bool, st State, now time.Time) (schema.AgentPhase, string) {
	v := st.Spec.Version
	switch {
	case onNew && d.Version == v:
		return schema.AgentUpdated, ""
	case !onNew && rd.Revision == v && st.Rollout.Phase == rollout.PhaseRolledBack:
		return schema.AgentRolledBack, st.Rollout.Reason
	case !onNew || !d.Online:
		return schema.AgentPending, ""
	case d.Failed:
		return schema.AgentFailed, cmp.Or(d.Reason, "the new agent failed its trial")
	}
	deadline := time.Duration(schema.DefaultProgressDeadlineSeconds) * time.Second
	if s := st.Spec.Strategy.Staged; s != nil {
		deadline = s.ProgressDeadline()
	}
	since := latest(st.Assigned[d.Name].At, d.OnlineSince)
	if !now.Before(since.Add(deadline)) {
		return schema.AgentFailed, fmt.Sprintf("not reporting %s within %v", v, deadline)
	}
	return schema.AgentUpdating, ""
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rolloutStatus is the staged planner's status in the API's shape.
func rolloutStatus(rp rollout.Plan, st State, lastGood string) *schema.RolloutStatus {
	s := rp.Status
	return &schema.RolloutStatus{
		Hash: s.Revision, Phase: s.Phase, Step: s.Step, Steps: s.Steps,
		Targeted: s.Targeted, Updated: s.Updated, Ready: s.Ready, Failed: s.Failed, Pending: s.Pending,
		Waiting: s.Waiting, WaitUntil: s.WaitUntil, Reason: s.Reason,
		StartedAt: st.Rollout.WaveStartedAt, FinishedAt: st.Rollout.FinishedAt,
	}
}

func cloneAssigned(m map[string]Assignment) map[string]Assignment {
	out := make(map[string]Assignment, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
