package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/hub/rollout"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Staged rollouts. The wave planner (hub/rollout) is a pure function; this
// file gives it its inputs and keeps its outputs: for each Staged
// deployment a rolloutRecord, persisted at store.RolloutKey before the
// desired states that follow from it are written, so a hub killed in the
// middle of a rollout plans the same waves when it starts again.
//
// The revisions a rollout moves between are pod template hashes, the
// hashes devices report. The last good revision, which devices outside the
// waves run and a rollback returns to, is the revision of the last
// rollout that completed; for the first Staged rollout of a deployment, the
// newest earlier revision not marked Failed or RolledBack in its history.

// rolloutRecord is what the controller keeps, and persists, per Staged
// deployment.
type rolloutRecord struct {
	// Hash and Revision identify the revision being rolled out.
	Hash     string `json:"hash"`
	Revision int64  `json:"revision"`
	// State is the planner's state.
	State rollout.State `json:"state"`
	// LastGood is the pod of the last good revision (nil: none, a first
	// rollout), and LastGoodRevision its number (0: unknown).
	LastGood         *schema.Pod `json:"lastGood,omitempty"`
	LastGoodRevision int64       `json:"lastGoodRevision,omitempty"`
	// AssignedAt is when each device was given the revision, while the
	// rollout is not final.
	AssignedAt map[string]time.Time `json:"assignedAt,omitempty"`
	// WindowOpensAt is, for each device that reported holding the
	// revision back for its update window, when the window opens: its
	// progress deadline counts from then.
	WindowOpensAt map[string]time.Time `json:"windowOpensAt,omitempty"`
	// StartedAt is when the rollout of this revision started.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Condition is the Progressing condition's reason, and ConditionAt
	// when it last changed.
	Condition   string    `json:"condition,omitempty"`
	ConditionAt time.Time `json:"conditionAt,omitzero"`
	// Events are the most recent transitions, oldest first.
	Events []schema.RolloutEvent `json:"events,omitempty"`
	// OutcomeDone says the revision's outcome (Complete or Failed) is
	// recorded in the deployment's history.
	OutcomeDone bool `json:"outcomeDone,omitempty"`
	// Rollback, once the planner rolled the revision back, is the
	// rollback to write to the Deployment (autorollback.go), and
	// RollbackDone says it is written (or cannot be).
	Rollback     *schema.AutoRollback `json:"rollback,omitempty"`
	RollbackDone bool                 `json:"rollbackDone,omitempty"`
	// RolledBackFrom is set when this revision is the automatic rollback
	// of a failed one: the failed record's Rollback.
	RolledBackFrom *schema.AutoRollback `json:"rolledBackFrom,omitempty"`
}

func (r *rolloutRecord) lastGoodHash() string {
	if r.LastGood == nil {
		return ""
	}
	return r.LastGood.Hash
}

// onlineMark is what the controller last saw of a device's connection.
type onlineMark struct {
	online bool
	since  time.Time
}

// outcomeWrite is a revision outcome to record in a deployment's history.
type outcomeWrite struct {
	deployment string
	revision   int64
	outcome    schema.RevisionOutcome
	reason     string
}

// stagedRollouts places Staged deployments and keeps their records. It
// belongs to the controller's Run goroutine.
type stagedRollouts struct {
	log *slog.Logger
	// revisions reads a deployment's history, newest first.
	revisions func(deployment string) ([]schema.DeploymentRevision, error)
	recs      map[string]*rolloutRecord
	status    map[string]rollout.Status // the last plan's status
	recheck   map[string]time.Time      // when a plan may change by time alone
	online    map[string]onlineMark     // by device
	dirty     map[string]bool           // records to write
	outcomes  []outcomeWrite            // to write
	rollbacks []rollbackWrite           // to write, after the outcomes
}

func newStagedRollouts(log *slog.Logger, revisions func(string) ([]schema.DeploymentRevision, error)) *stagedRollouts {
	return &stagedRollouts{
		log:       log,
		revisions: revisions,
		recs:      map[string]*rolloutRecord{},
		status:    map[string]rollout.Status{},
		recheck:   map[string]time.Time{},
		online:    map[string]onlineMark{},
		dirty:     map[string]bool{},
	}
}

// replace installs the records read from the store (hub start, reload).
func (s *stagedRollouts) replace(recs map[string]*rolloutRecord) {
	s.recs = recs
	clear(s.status)
	clear(s.recheck)
	clear(s.dirty)
}

// place decides the pod a Staged deployment puts on each device it
// targets (pods[i] for targeted[i]; no name: none) by asking the planner,
// and records the plan. held > 0 while the rollout is not final: a report
// or a device joining can change the plan.
func (s *stagedRollouts) place(dep *schema.Deployment, targeted []*DeviceView, now time.Time) (pods []schema.Pod, held int) {
	name := dep.Metadata.Name
	hash := schema.TemplateHash(dep.Spec.Template)
	rec := s.recs[name]
	if rec == nil || rec.Hash != hash {
		rec = s.start(dep, hash, rec, now)
	}
	devs := make([]rollout.Device, len(targeted))
	for i, d := range targeted {
		devs[i] = s.device(name, hash, d, rec, now)
	}
	st := rec.State
	st.Paused = dep.Spec.Paused
	plan := rollout.Next(rollout.Input{
		Strategy: dep.Spec.Strategy.Staged,
		Revision: hash,
		LastGood: rec.lastGoodHash(),
		Names:    rollout.Names{Revision: revisionName(rec.Revision, hash), LastGood: revisionName(rec.LastGoodRevision, rec.lastGoodHash())},
		Devices:  devs,
		State:    st,
		Now:      now,
	})
	s.record(dep, rec, plan, now)
	s.queueRollback(dep, rec)

	pods = make([]schema.Pod, len(targeted))
	newPod := templatePod(dep, hash)
	for i, d := range targeted {
		switch {
		case plan.IsNew(d.Name):
			pods[i] = newPod
		case rec.LastGood != nil:
			pods[i] = *rec.LastGood
			pods[i].Name = name
		}
	}
	if !plan.State.Phase.Final() {
		held = 1 + len(plan.Old)
	}
	return pods, held
}

// revisionName is how reasons name a revision: its number, else its hash.
func revisionName(n int64, hash string) string {
	if n > 0 {
		return strconv.FormatInt(n, 10)
	}
	return hash
}

// start begins the rollout of a new revision: it finds the last good
// revision (see the file's comment) and returns the new record.
func (s *stagedRollouts) start(dep *schema.Deployment, hash string, prev *rolloutRecord, now time.Time) *rolloutRecord {
	name := dep.Metadata.Name
	rec := &rolloutRecord{Hash: hash, Revision: depRevision(dep), StartedAt: now}
	var revs []schema.DeploymentRevision
	if s.revisions != nil {
		var err error
		if revs, err = s.revisions(name); err != nil {
			s.log.Warn("staged rollout: read revision history", "deployment", name, "err", err)
		}
	}
	find := func(h string) *schema.DeploymentRevision {
		for i := range revs {
			if revs[i].Hash == h && revs[i].Revision != rec.Revision {
				return &revs[i]
			}
		}
		return nil
	}
	var good *schema.DeploymentRevision
	switch {
	case prev != nil && prev.State.Phase == schema.RolloutComplete:
		good = find(prev.Hash)
		if good == nil {
			// Pruned from the history: the record still knows it.
			rec.LastGood = &schema.Pod{Name: name, Hash: prev.Hash}
			rec.LastGoodRevision = prev.Revision
		}
	case prev != nil:
		// The previous rollout did not complete: the last good revision
		// stays what it was.
		rec.LastGood, rec.LastGoodRevision = prev.LastGood, prev.LastGoodRevision
		if prev.LastGood != nil {
			if r := find(prev.LastGood.Hash); r != nil {
				rec.LastGoodRevision = r.Revision
			}
		}
	default:
		for i := range revs { // newest first
			r := &revs[i]
			if r.Revision < rec.Revision && r.Hash != hash && r.Outcome != schema.OutcomeFailed && r.Outcome != schema.OutcomeRolledBack {
				good = r
				break
			}
		}
	}
	if good != nil {
		rec.LastGood = &schema.Pod{Name: name, Spec: good.Template.Spec, Hash: good.Hash}
		if m := good.Template.Metadata; m != nil && len(m.Annotations) > 0 {
			rec.LastGood.Annotations = m.Annotations
		}
		rec.LastGoodRevision = good.Revision
	}
	if rec.LastGood != nil && len(rec.LastGood.Spec.Containers) == 0 {
		// Known by hash only, without a template to run: nothing to fall
		// back to.
		rec.LastGood, rec.LastGoodRevision = nil, 0
	}
	if rec.LastGood != nil && rec.LastGood.Hash == hash {
		// Back to the last good template (an undo, or the hub's own
		// rollback): this revision is it, under its new number.
		rec.LastGoodRevision = rec.Revision
		if prev != nil && prev.Rollback != nil && prev.State.Phase == schema.RolloutRolledBack {
			continueRollback(rec, prev)
		}
	}
	s.recs[name] = rec
	s.dirty[name] = true
	s.log.Info("staged rollout started", "deployment", name, "revision", rec.Revision, "hash", hash, "last_good_revision", rec.LastGoodRevision)
	return rec
}

// device is what the planner needs to know of one targeted device.
func (s *stagedRollouts) device(depName, hash string, d *DeviceView, rec *rolloutRecord, now time.Time) rollout.Device {
	out := rollout.Device{Name: d.Name, Labels: d.Labels, Online: d.Online, AssignedAt: rec.AssignedAt[d.Name]}
	if p := findPod(d.Prev, depName); p != nil {
		out.Revision = p.Hash
	}
	mark, seen := s.online[d.Name]
	if !seen || mark.online != d.Online {
		mark = onlineMark{online: d.Online}
		if seen {
			mark.since = now // a transition we saw; unseen: long ago
		}
		s.online[d.Name] = mark
	}
	if d.Online {
		out.OnlineSince = mark.since
	}
	if out.Revision == hash {
		out.Ready, out.ReadyChangedAt, out.Failed, out.Reason = podHealth(d.Status, depName, hash, now)
		if at, ok := windowOpensAt(d.Status, depName, hash); ok && !rec.WindowOpensAt[d.Name].Equal(at) {
			if rec.WindowOpensAt == nil {
				rec.WindowOpensAt = map[string]time.Time{}
			}
			rec.WindowOpensAt[d.Name] = at
			s.dirty[depName] = true
		}
		out.WindowOpensAt = rec.WindowOpensAt[d.Name]
	}
	return out
}

// windowOpensAt reads from a device's report when its update window
// lets it switch pod depName to hash, while it holds it back.
func windowOpensAt(st *schema.DeviceStatus, depName, hash string) (time.Time, bool) {
	if st == nil {
		return time.Time{}, false
	}
	for i := range st.Pods {
		u := st.Pods[i].Update
		if st.Pods[i].Name == depName && u != nil && u.Hash == hash && u.Reason == schema.UpdateReasonWindow && u.Until != nil {
			return u.Until.UTC(), true
		}
	}
	return time.Time{}, false
}

// failReasons are the container reasons that fail a revision on a device.
var failReasons = map[string]bool{
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"CrashLoopBackOff":           true,
	"CreateContainerError":       true,
	"CreateContainerConfigError": true,
	"RunContainerError":          true,
}

// podHealth reads a device's report of pod depName at hash: whether it is
// Ready (running, or finished successfully) and since when (its latest
// container start, never later than now; zero when unknown), or failed
// (its phase is Failed, or a container waits for a reason in failReasons)
// and why.
func podHealth(st *schema.DeviceStatus, depName, hash string, now time.Time) (ready bool, since time.Time, failed bool, reason string) {
	if st == nil {
		return
	}
	for i := range st.Pods {
		p := &st.Pods[i]
		if p.Name == depName && p.RevisionFailed(hash) {
			// The device went back from hash to the revision it runs.
			return false, time.Time{}, true, p.FailedRevision.Reason
		}
		if p.Name != depName || p.Hash != hash {
			continue
		}
		for _, c := range p.Containers {
			if failReasons[c.Reason] {
				return false, time.Time{}, true, c.Reason
			}
		}
		if p.Phase == schema.PhaseFailed {
			return false, time.Time{}, true, "pod Failed"
		}
		if p.Ready || p.Phase == schema.PhaseSucceeded {
			for _, c := range p.Containers {
				if c.StartedAt != nil && c.StartedAt.After(since) {
					since = *c.StartedAt
				}
			}
			if since.After(now) {
				since = now // the device's clock is ahead
			}
			return true, since, false, ""
		}
	}
	return
}

// record keeps a plan: its state, the devices it gave the revision and
// when, its transitions as events and the condition, and the outcome of a
// final phase for the history.
func (s *stagedRollouts) record(dep *schema.Deployment, rec *rolloutRecord, plan rollout.Plan, now time.Time) {
	name := dep.Metadata.Name
	prev := rec.State
	next := plan.State
	s.status[name] = plan.Status
	if plan.RecheckAt.IsZero() {
		delete(s.recheck, name)
	} else {
		s.recheck[name] = plan.RecheckAt
	}
	changed := !sameState(prev, next) || len(plan.Added) > 0
	if len(plan.Added) > 0 && !next.Phase.Final() {
		if rec.AssignedAt == nil {
			rec.AssignedAt = map[string]time.Time{}
		}
		for _, d := range plan.Added {
			rec.AssignedAt[d] = now
		}
	}
	st := plan.Status
	event := func(typ, reason, msg string) {
		rec.Events = append(rec.Events, schema.RolloutEvent{Time: now, Type: typ, Reason: reason, Message: msg})
		if n := len(rec.Events) - schema.MaxRolloutEvents; n > 0 {
			rec.Events = slices.Delete(rec.Events, 0, n)
		}
		level := slog.LevelInfo
		if typ == schema.EventWarning {
			level = slog.LevelWarn
		}
		s.log.Log(context.Background(), level, "staged rollout: "+msg, "deployment", name, "revision", rec.Revision, "reason", reason)
		changed = true
	}
	if len(plan.Added) > 0 && next.Phase != schema.RolloutComplete || next.Step > prev.Step && !next.Phase.Final() {
		event(schema.EventNormal, "WaveStarted", fmt.Sprintf("step %d of %d: revision %d on %d of %d devices (%d added)",
			st.Step, st.Steps, rec.Revision, st.Updated, st.Targeted, len(plan.Added)))
	}
	if next.Phase != prev.Phase || prev.Phase == "" {
		switch next.Phase {
		case schema.RolloutPaused:
			event(schema.EventNormal, "Paused", fmt.Sprintf("paused at step %d of %d by an operator", st.Step, st.Steps))
		case schema.RolloutProgressing:
			if prev.Phase == schema.RolloutPaused {
				event(schema.EventNormal, "Resumed", fmt.Sprintf("resumed at step %d of %d", st.Step, st.Steps))
			}
		case schema.RolloutComplete:
			event(schema.EventNormal, "Complete", fmt.Sprintf("revision %d runs on all %d devices", rec.Revision, st.Targeted))
		case schema.RolloutStopped:
			event(schema.EventWarning, "Stopped", next.Reason)
		case schema.RolloutRolledBack:
			event(schema.EventWarning, "RolledBack", next.Reason)
			rec.Rollback = &schema.AutoRollback{
				Revision: rec.Revision, Hash: rec.Hash, ToRevision: rec.LastGoodRevision,
				Step: st.Step, Steps: st.Steps, Reason: next.Reason, At: now,
			}
		}
	}
	if next.Phase.Final() {
		rec.AssignedAt, rec.WindowOpensAt = nil, nil
		if !rec.OutcomeDone && rec.Revision > 0 {
			w := outcomeWrite{deployment: name, revision: rec.Revision, outcome: schema.OutcomeComplete}
			if next.Phase != schema.RolloutComplete {
				w.outcome, w.reason = schema.OutcomeFailed, next.Reason
			}
			s.outcomes = append(s.outcomes, w)
			rec.OutcomeDone = true
			changed = true
		}
	}
	if cond := conditionReason(next.Phase, rec.RolledBackFrom != nil); cond != rec.Condition {
		rec.Condition, rec.ConditionAt = cond, now
		changed = true
	}
	rec.State = next
	if changed {
		s.dirty[name] = true
	}
}

// sameState compares two planner states, times by instant.
func sameState(a, b rollout.State) bool {
	return a.Revision == b.Revision && a.Phase == b.Phase && a.Step == b.Step &&
		a.WaveStartedAt.Equal(b.WaveStartedAt) && a.PauseStartedAt.Equal(b.PauseStartedAt) &&
		a.Paused == b.Paused && a.Reason == b.Reason && a.FinishedAt.Equal(b.FinishedAt)
}

// conditionReason is the Progressing condition's reason in phase p;
// rolledBack says the revision is the automatic rollback of a failed one.
func conditionReason(p schema.RolloutPhase, rolledBack bool) string {
	switch p {
	case schema.RolloutComplete:
		if rolledBack {
			return "RolloutRolledBack"
		}
		return "RolloutComplete"
	case schema.RolloutPaused:
		return "RolloutPaused"
	case schema.RolloutStopped:
		return "RolloutStopped"
	case schema.RolloutRolledBack:
		return "RolloutRolledBack"
	}
	return "RolloutProgressing"
}

// decorate adds a Staged deployment's rollout and its condition to its
// status.
func (s *stagedRollouts) decorate(name string, status schema.DeploymentStatus) schema.DeploymentStatus {
	rec, ok := s.recs[name]
	st, planned := s.status[name]
	if !ok || !planned {
		return status
	}
	rs := &schema.RolloutStatus{
		Revision: rec.Revision, Hash: rec.Hash, LastGoodRevision: rec.LastGoodRevision,
		Phase: st.Phase, Step: st.Step, Steps: st.Steps,
		Targeted: st.Targeted, Updated: st.Updated, Ready: st.Ready, Failed: st.Failed, Pending: st.Pending,
		Waiting: st.Waiting, WaitUntil: st.WaitUntil, Reason: st.Reason,
		StartedAt: rec.StartedAt, FinishedAt: rec.State.FinishedAt,
		Events: slices.Clone(rec.Events), RolledBackFrom: rec.RolledBackFrom,
	}
	status.Rollout = rs
	cond := schema.DeploymentCondition{
		Type: schema.ConditionProgressing, Status: "True", Reason: rec.Condition,
		Message: cmp.Or(st.Reason, st.Waiting), LastTransitionTime: rec.ConditionAt,
	}
	switch st.Phase {
	case schema.RolloutStopped, schema.RolloutRolledBack:
		cond.Status = "False"
	case schema.RolloutComplete:
		cond.Message = fmt.Sprintf("revision %d runs on all %d devices", rec.Revision, st.Targeted)
		if rec.RolledBackFrom != nil {
			cond.Status = "False"
			cond.Message = rolledBackMessage(rec, st.Targeted)
		}
	case schema.RolloutPaused:
		cond.Status = "Unknown"
	}
	status.Conditions = []schema.DeploymentCondition{cond}
	return status
}

// nextRecheck returns the earliest time a plan may change by time alone
// (zero: none).
func (s *stagedRollouts) nextRecheck() time.Time {
	var at time.Time
	for _, t := range s.recheck {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// due returns, and forgets, the deployments whose recheck time has come.
func (s *stagedRollouts) due(now time.Time) []string {
	var out []string
	for name, t := range s.recheck {
		if !t.After(now) {
			out = append(out, name)
			delete(s.recheck, name)
		}
	}
	slices.Sort(out)
	return out
}

// forget drops the records of deployments that are gone or no longer
// Staged (their stored record is deleted by the next flush).
func (s *stagedRollouts) forget(deployment func(string) (*schema.Deployment, bool)) {
	for name := range s.recs {
		if d, ok := deployment(name); !ok || d.Spec.Strategy.Type != schema.StrategyStaged {
			delete(s.recs, name)
			delete(s.status, name)
			delete(s.recheck, name)
			s.dirty[name] = true
		}
	}
}

// flush writes the changed records (deleting those forgotten) in one
// transaction, then the outcomes to the revision histories, then the
// automatic rollbacks to the Deployments (autorollback.go). What fails
// stays to write, and the error says so.
func (s *stagedRollouts) flush(ctx context.Context, st *store.Store) error {
	if err := s.flushRecords(ctx, st); err != nil {
		return err
	}
	for len(s.outcomes) > 0 {
		w := s.outcomes[0]
		err := st.SetRevisionOutcome(ctx, w.deployment, w.revision, w.outcome, w.reason)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("record outcome of revision %d of %s: %w", w.revision, w.deployment, err)
		}
		s.outcomes = s.outcomes[1:]
	}
	return s.writeRollbacks(ctx, st)
}

// flushRecords writes the changed records, deleting those forgotten, in
// one transaction.
func (s *stagedRollouts) flushRecords(ctx context.Context, st *store.Store) error {
	if err := writeRecords(ctx, st, s.dirty, s.recs, store.RolloutKey, "staged rollout"); err != nil {
		return err
	}
	clear(s.dirty)
	return nil
}

// writeRecords writes, in one transaction, the controller's own record of
// each dirty name under key(name), JSON-encoded, deleting those absent
// from recs; what names them in errors.
func writeRecords[T any](ctx context.Context, st *store.Store, dirty map[string]bool, recs map[string]T, key func(string) string, what string) error {
	if len(dirty) == 0 {
		return nil
	}
	_, err := st.Write(ctx, func(t *store.Txn) error {
		for _, name := range slices.Sorted(maps.Keys(dirty)) {
			rec, ok := recs[name]
			if !ok {
				if err := t.Delete(key(name)); err != nil {
					return err
				}
				continue
			}
			raw, err := json.Marshal(rec)
			if err != nil {
				return fmt.Errorf("encode %s %s: %w", what, name, err)
			}
			if err := t.Set(key(name), raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s records: %w", what, err)
	}
	return nil
}

// loadRollouts reads every stored rollout record.
func loadRollouts(t *store.Txn, log *slog.Logger) (map[string]*rolloutRecord, error) {
	out := map[string]*rolloutRecord{}
	err := t.Scan(store.RolloutPrefix, func(key string, val []byte) error {
		var rec rolloutRecord
		if err := json.Unmarshal(val, &rec); err != nil {
			// Never fatal: the rollout starts again from its first step,
			// which never gives the revision to more devices than have it.
			log.Error("stored rollout does not decode; starting it again", "key", key, "err", err)
			return nil
		}
		out[key[len(store.RolloutPrefix):]] = &rec
		return nil
	})
	return out, err
}
