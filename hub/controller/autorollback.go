package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Automatic rollbacks. When the planner rolls a Staged rollout back
// (phase RolledBack), the devices are given the last good revision at
// once; the controller then writes the rollback to the Deployment as
// "fleet rollout undo" does (store.Rollback): the template of the last
// good revision becomes the current revision, under a new number, and the
// failed revision stays in the history, marked Failed with its reason. So
// the Deployment's current revision names what the devices run.
//
// The write is the last thing a flush does, after the records and the
// Failed outcome are stored; it names the resourceVersion the pass saw,
// so an operator's write since wins (the rollback is not written: the
// newer template is rolled out instead). The record notes it written
// (RollbackDone); a hub that stops before that writes it when it starts
// again. The Deployment's event then starts the rollout of the rollback
// revision, which is complete at once (every device runs it already) and
// carries, as RolledBackFrom, which revision failed and why: rollout
// status and describe say so.

// rollbackActor is who the history's change cause names for an automatic
// rollback.
const rollbackActor = "the hub (revision %d failed its staged rollout)"

// rollbackWrite is an automatic rollback to write.
type rollbackWrite struct {
	deployment      string
	from, to        int64
	resourceVersion string
}

// queueRollback queues the write of rec's rollback, if the planner rolled
// the revision back and it is not written yet.
func (s *stagedRollouts) queueRollback(dep *schema.Deployment, rec *rolloutRecord) {
	if rec.State.Phase != schema.RolloutRolledBack || rec.Rollback == nil || rec.RollbackDone {
		return
	}
	name := dep.Metadata.Name
	for _, w := range s.rollbacks {
		if w.deployment == name {
			return
		}
	}
	s.rollbacks = append(s.rollbacks, rollbackWrite{
		deployment: name, from: rec.Revision, to: rec.Rollback.ToRevision,
		resourceVersion: dep.Metadata.ResourceVersion,
	})
}

// continueRollback makes rec, the rollout of the last good template after
// prev was rolled back, the rollback of prev: it is marked so, and keeps
// prev's events.
func continueRollback(rec, prev *rolloutRecord) {
	rb := *prev.Rollback
	rec.RolledBackFrom = &rb
	rec.Events = append(rec.Events[:0:0], prev.Events...)
}

// rolledBackMessage says that rec is the rollback of a failed revision.
func rolledBackMessage(rec *rolloutRecord, targeted int) string {
	rb := rec.RolledBackFrom
	return fmt.Sprintf("revision %d failed and was rolled back; revision %d (the template of revision %d) runs on all %d devices: %s",
		rb.Revision, rec.Revision, rb.ToRevision, targeted, rb.Reason)
}

// writeRollbacks writes the queued rollbacks to the Deployments. A
// rollback that no longer applies (the Deployment changed or is gone, its
// last good revision left the history, its template is already the last
// good one) is dropped; another error stays to write.
func (s *stagedRollouts) writeRollbacks(ctx context.Context, st *store.Store) error {
	for len(s.rollbacks) > 0 {
		w := s.rollbacks[0]
		actx := store.WithActor(ctx, fmt.Sprintf(rollbackActor, w.from))
		res, err := st.Rollback(actx, w.deployment, w.to, w.resourceVersion, false)
		done := true
		switch {
		case errors.Is(err, store.ErrConflict):
			// Changed since the pass saw it: the next pass sees it as it
			// is, and queues the rollback again if it still applies.
			done = false
			s.log.Info("staged rollout: deployment changed before its automatic rollback was written", "deployment", w.deployment, "revision", w.from)
		case errors.Is(err, store.ErrNotFound), errors.Is(err, schema.ErrInvalid):
			s.log.Warn("staged rollout: automatic rollback not written; the devices run the last good revision, the deployment keeps the failed one",
				"deployment", w.deployment, "revision", w.from, "to_revision", w.to, "err", err)
		case err != nil:
			return fmt.Errorf("write the automatic rollback of revision %d of %s: %w", w.from, w.deployment, err)
		case res.Unchanged:
		default:
			s.log.Info("staged rollout: rolled back automatically", "deployment", w.deployment,
				"from", w.from, "to", w.to, "revision", res.Deployment.Status.Revision)
		}
		if rec := s.recs[w.deployment]; done && rec != nil && rec.Revision == w.from {
			rec.RollbackDone = true
			s.dirty[w.deployment] = true
		}
		s.rollbacks = s.rollbacks[1:]
	}
	if len(s.dirty) > 0 {
		return s.flushRecords(ctx, st)
	}
	return nil
}
