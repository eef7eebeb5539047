package main

import (
	"context"
	"testing"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// TestFloorEchoes: the floor counts, per device, its first status of the
// desired generation after begin, and nothing else.
func TestFloorEchoes(t *testing.T) {
	topics := schema.Topics{}
	cfg := floorConfig{
		Devices: []hollow.Device{{Name: "d0"}, {Name: "d1"}},
		Desired: schema.DesiredState{Generation: 2},
	}
	e := newFloorEchoes(cfg, topics)
	status := func(dev string) string { return topics.Device(dev, schema.TopicStatus) }
	e.handle(status("d0"), []byte(`{"observedGeneration":2}`)) // before begin
	e.begin()
	e.handle(status("d0"), []byte(`{"observedGeneration":1}`))                             // another generation
	e.handle(topics.Device("d0", schema.TopicDesired), []byte(`{"observedGeneration":2}`)) // not a status
	e.handle(status("d0"), nil)                                                            // a cleared retained status
	e.handle(status("nobody"), []byte(`{"observedGeneration":2}`))                         // not a floor device
	if e.lat[0] != -1 || e.lat[1] != -1 || e.got != 0 {
		t.Fatalf("echoes counted too early: lat %v, got %d", e.lat, e.got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := e.wait(ctx, 0); got != "0 of 2 echoes within 0s" {
		t.Errorf("wait past ctx = %q", got)
	}
	e.handle(status("d1"), []byte(`{"observedGeneration":2}`))
	e.handle(status("d1"), []byte(`{"observedGeneration":2}`)) // a second echo
	if e.got != 1 || e.lat[1] < 0 {
		t.Fatalf("after d1: lat %v, got %d", e.lat, e.got)
	}
	e.handle(status("d0"), []byte(`{"observedGeneration":2}`))
	if got := e.wait(context.Background(), 0); got != "" {
		t.Errorf("wait with every echo = %q", got)
	}
	if e.wall() < max(e.lat[0], e.lat[1]) || e.lat[0] < 0 {
		t.Errorf("wall %v, lat %v", e.wall(), e.lat)
	}
}

// TestRolloutOf: the rollout phase finds v2's end in the current
// revision's rolledBackFrom once the hub wrote its rollback.
func TestRolloutOf(t *testing.T) {
	cur := &schema.RolloutStatus{Revision: 3, Hash: "v1", Phase: schema.RolloutComplete,
		RolledBackFrom: &schema.AutoRollback{Revision: 2, Hash: "v2", Step: 3, Steps: 4, Reason: "failed"}}
	if got := rolloutOf(cur, "v1"); got != cur {
		t.Errorf("the current revision's own: %+v", got)
	}
	if got := rolloutOf(cur, "v2"); got == nil || got.Phase != schema.RolloutRolledBack || got.Step != 3 || got.Revision != 2 {
		t.Errorf("the rolled-back revision: %+v", got)
	}
	if rolloutOf(cur, "v9") != nil || rolloutOf(nil, "v2") != nil {
		t.Error("a revision the status does not name")
	}
}
