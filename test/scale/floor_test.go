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
