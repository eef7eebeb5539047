package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/fleetmq/fleet/hub/agentplan"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// agentStage keeps the AgentRollouts: it plans each with hub/agentplan
// (the Deployments' staged planner), says which agent each device's
// desired state names, and writes the planner's state and each rollout's
// status to the store. It reads the fleet; it belongs to the Run
// goroutine. A device matched by several rollouts follows the first by
// name.
type agentStage struct {
	log      *slog.Logger
	rollouts map[string]*schema.AgentRollout
	states   map[string]agentplan.State
	dirty    map[string]bool // states to write (absent from states: delete)
	statuses map[string]*schema.AgentRolloutStatus
	// stale are the rollouts whose status in the store differs from
	// statuses.
	stale   map[string]bool
	agents  map[string]*schema.DesiredAgent // per device
	recheck time.Time
	// online and version are when the stage saw each device's
	// connection, and its reported version, last change (unseen: long
	// ago), for the planner's deadlines.
	online  map[string]onlineMark
	version map[string]versionMark
}

// versionMark is a device's reported agent version and since when.
type versionMark struct {
	version string
	since   time.Time
}

func newAgentStage(log *slog.Logger) *agentStage {
	return &agentStage{log: log, rollouts: map[string]*schema.AgentRollout{}, states: map[string]agentplan.State{},
		dirty: map[string]bool{}, statuses: map[string]*schema.AgentRolloutStatus{}, stale: map[string]bool{}, agents: map[string]*schema.DesiredAgent{},
		online: map[string]onlineMark{}, version: map[string]versionMark{}}
}

// active reports whether any AgentRollout exists: then every pass is a
// full one, since any device's report can move a rollout.
func (s *agentStage) active() bool { return len(s.rollouts) > 0 }

// agent is what device's desired state names (nil: nothing).
func (s *agentStage) agent(device string) *schema.DesiredAgent { return s.agents[device] }

// load reads every AgentRollout and planner state.
func (s *agentStage) load(ctx context.Context, st *store.Store) error {
	rollouts := map[string]*schema.AgentRollout{}
	states := map[string]agentplan.State{}
	err := st.View(ctx, func(t *store.Txn) error {
		if err := t.ListObjects(schema.KindAgentRollout, func(o schema.Object) error {
			a := o.(*schema.AgentRollout)
			rollouts[a.Metadata.Name] = a
			return nil
		}); err != nil {
			return err
		}
		return t.Scan(store.AgentRolloutPrefix, func(key string, val []byte) error {
			var ps agentplan.State
			if err := json.Unmarshal(val, &ps); err != nil {
				// Never fatal: the rollout starts again from its first step.
				s.log.Error("stored agent rollout state does not decode; starting it again", "key", key, "err", err)
				return nil
			}
			states[key[len(store.AgentRolloutPrefix):]] = ps
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("load agent rollouts: %w", err)
	}
	s.rollouts, s.states = rollouts, states
	clear(s.statuses)
	for name, a := range rollouts {
		s.statuses[name] = a.Status
	}
	return nil
}

// apply applies a store event about an AgentRollout.
func (s *agentStage) apply(ev store.Event) {
	if ev.Type == store.EventDeleted {
		delete(s.rollouts, ev.Name)
		delete(s.statuses, ev.Name)
		delete(s.stale, ev.Name)
		if _, ok := s.states[ev.Name]; ok {
			delete(s.states, ev.Name)
			s.dirty[ev.Name] = true
		}
		return
	}
	var a schema.AgentRollout
	if err := json.Unmarshal(ev.Object, &a); err != nil {
		s.log.Error("agentrollout event does not decode", "name", ev.Name, "err", err)
		return
	}
	s.rollouts[ev.Name] = &a
	s.statuses[ev.Name] = a.Status
}

// plan plans every rollout at now over the fleet's devices.
func (s *agentStage) plan(f fleetView, now time.Time) {
	clear(s.agents)
	s.recheck = time.Time{}
	for _, name := range slices.Sorted(maps.Keys(s.rollouts)) {
		a := s.rollouts[name]
		var devs []agentplan.Device
		for _, dev := range f.selectNames(a.Spec.Selector) {
			if _, taken := s.agents[dev]; taken {
				continue
			}
			devs = append(devs, s.device(f, dev, a.Spec.Version, now))
		}
		p := agentplan.Next(agentplan.Input{Rollout: a, Devices: devs, State: s.states[name], Now: now})
		if !sameJSON(p.State, s.states[name]) {
			s.states[name] = p.State
			s.dirty[name] = true
		}
		for dev, ag := range p.Agents {
			s.agents[dev] = ag
		}
		st := p.Status
		if !sameJSON(&st, s.statuses[name]) {
			s.statuses[name] = &st
			s.stale[name] = true
		}
		if !p.RecheckAt.IsZero() && (s.recheck.IsZero() || p.RecheckAt.Before(s.recheck)) {
			s.recheck = p.RecheckAt
		}
	}
	for name := range s.online {
		if _, ok := f.device(name); !ok {
			delete(s.online, name)
			delete(s.version, name)
		}
	}
}

// device is one device as the planner sees it at now: a device that
// comes back online, or changes version, is timed from then. A device
// whose agent reports (status.agent.upgrade) that version failed, or
// was refused, is failed, with the agent's words as the reason.
func (s *agentStage) device(f fleetView, name, version string, now time.Time) agentplan.Device {
	d, _ := f.device(name)
	out := agentplan.Device{Name: name, Labels: d.Labels, Arch: d.Labels[schema.LabelArch]}
	st, online := f.deviceState(name, d.UID)
	out.Online = online
	if st != nil {
		out.Version = st.Agent.Version
		if up := st.Agent.Upgrade; up != nil && up.Phase == schema.AgentUpgradeFailed && up.Version == version {
			out.Failed, out.Reason = true, up.Message
		}
		if out.Arch == "" {
			out.Arch = st.Agent.Arch
		}
	}
	mark, seen := s.online[name]
	if !seen || mark.online != online {
		mark = onlineMark{online: online}
		if seen {
			mark.since = now
		}
		s.online[name] = mark
	}
	if online {
		out.OnlineSince = mark.since
	}
	v, seen := s.version[name]
	if !seen || v.version != out.Version {
		v = versionMark{version: out.Version}
		if seen {
			v.since = now
		}
		s.version[name] = v
	}
	out.VersionSince = v.since
	return out
}

// save writes the changed planner states, then the changed statuses.
func (s *agentStage) save(ctx context.Context, st *store.Store) error {
	if err := writeRecords(ctx, st, s.dirty, s.states, store.AgentRolloutKey, "agent rollout"); err != nil {
		return err
	}
	clear(s.dirty)
	for _, name := range slices.Sorted(maps.Keys(s.stale)) {
		status := s.statuses[name]
		_, err := st.Mutate(ctx, schema.KindAgentRollout, name, func(o schema.Object) error {
			o.(*schema.AgentRollout).Status = status
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("store status of agentrollout %s: %w", name, err)
		}
		delete(s.stale, name)
	}
	return nil
}

// sameAgent reports whether two desired agents are equal.
func sameAgent(a, b *schema.DesiredAgent) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sameJSON reports whether a and b encode alike: what the store holds
// decodes with other time locations and nil slices than the planner
// makes, and only a real difference is to be written.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
