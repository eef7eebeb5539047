package controller

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/rollout"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestAutoRollbackWrittenAfterRestart: a hub stopped after it stored a
// rolled-back rollout but before it wrote the rollback to the Deployment
// writes it when it starts again: the Deployment's current revision is
// then the last good template, and its rollout says which revision
// failed.
func TestAutoRollbackWrittenAfterRestart(t *testing.T) {
	f := newStagedFleet(t, 2)
	v1 := stagedWeb("app:1")
	h1 := hashOf(t, v1)
	apply(t, f.st, v1)
	f.await("v1 on one device", func(hs []string, _ *schema.RolloutStatus) bool { return count(hs, h1) == 1 })
	f.reportAll(h1)
	f.await("v1 on all", func(hs []string, _ *schema.RolloutStatus) bool { return count(hs, h1) == 2 })
	f.reportAll(h1)
	f.await("v1 complete", func(_ []string, rs *schema.RolloutStatus) bool { return rs.Phase == schema.RolloutComplete })
	f.stop()

	// What the hub had stored when it stopped: v2 is the current
	// revision, its rollout rolled back, the rollback not written.
	v2 := stagedWeb("app:2")
	h2 := hashOf(t, v2)
	apply(t, f.st, v2)
	revs, err := f.st.DeploymentRevisions(t.Context(), "web")
	if err != nil || len(revs) != 2 || revs[0].Hash != h2 || revs[1].Hash != h1 {
		t.Fatalf("history: %+v, %v", revs, err)
	}
	now := f.clock.Now()
	reason := "rolled back to revision 1: 2 of 2 devices failed revision 2, reaching failureThreshold 2: d0 (ImagePullBackOff), d1 (ImagePullBackOff)"
	rb := &schema.AutoRollback{Revision: 2, Hash: h2, ToRevision: 1, Step: 2, Steps: 3, Reason: reason, At: now}
	rec := rolloutRecord{
		Hash: h2, Revision: 2, LastGood: &schema.Pod{Name: "web", Hash: h1, Spec: revs[1].Template.Spec}, LastGoodRevision: 1,
		State:     rollout.State{Revision: h2, Phase: schema.RolloutRolledBack, Step: 1, Reason: reason, FinishedAt: now},
		StartedAt: now, Condition: "RolloutRolledBack", ConditionAt: now, OutcomeDone: true, Rollback: rb,
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Write(t.Context(), func(tx *store.Txn) error { return tx.Set(store.RolloutKey("web"), raw) }); err != nil {
		t.Fatal(err)
	}
	if err := f.st.SetRevisionOutcome(t.Context(), "web", 2, schema.OutcomeFailed, reason); err != nil {
		t.Fatal(err)
	}

	f.start()
	f.await("the rollback written after the restart", func(hs []string, rs *schema.RolloutStatus) bool {
		return rs.Revision == 3 && rs.Hash == h1 && rs.Phase == schema.RolloutComplete && rs.RolledBackFrom != nil && count(hs, h1) == 2
	})
	if got := f.rollout().RolledBackFrom; got.Revision != 2 || got.Reason != reason {
		t.Errorf("rolled back from %+v", got)
	}
	obj, err := f.st.Get(t.Context(), schema.KindDeployment, "web")
	if err != nil {
		t.Fatal(err)
	}
	if d := obj.(*schema.Deployment); d.Status.Revision != 3 || schema.TemplateHash(d.Spec.Template) != h1 {
		t.Errorf("the deployment after the restart: revision %d, template %s; want 3, v1's %s", d.Status.Revision, schema.TemplateHash(d.Spec.Template), h1)
	}
	r2, err := f.st.DeploymentRevision(t.Context(), "web", 2)
	if err != nil || r2.Outcome != schema.OutcomeFailed || r2.Reason != reason {
		t.Errorf("revision 2: %+v, %v; want Failed with the reason", r2, err)
	}
	r3, err := f.st.DeploymentRevision(t.Context(), "web", 3)
	if err != nil || !strings.HasPrefix(r3.ChangeCause, "rollback to revision 1 by the hub") {
		t.Errorf("revision 3: %+v, %v", r3, err)
	}
}
