package printers

import (
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestPodRowHeldUpdate: the STATUS cell of a pod whose new revision waits
// for its update window says until when, in the device's zone.
func TestPodRowHeldUpdate(t *testing.T) {
	until := time.Date(2026, 12, 3, 1, 0, 0, 0, time.FixedZone("", 5*3600+1800))
	p := DevicePod{Device: "pi-1", Reachable: true, PodStatus: schema.PodStatus{
		Name: "web", Phase: schema.PhaseRunning, Ready: true,
		Containers: []schema.ContainerStatus{{Name: "app", State: schema.ContainerRunning}},
		Update:     &schema.PodUpdate{Hash: "abc", State: schema.UpdateWaiting, Reason: schema.UpdateReasonWindow, Until: &until},
	}}
	if got, want := PodRow(p, false, until)[3], "Running (waiting for window until 2026-12-03T01:00:00+05:30)"; got != want {
		t.Errorf("STATUS %q, want %q", got, want)
	}
	// The device's message carries its local time; the hub's Until is UTC.
	utc := until.UTC()
	p.Update.Until, p.Update.Message = &utc, "downloaded; waiting for window until 2026-12-03T01:00:00+05:30"
	if got, want := PodRow(p, false, until)[3], "Running (waiting for window until 2026-12-03T01:00:00+05:30)"; got != want {
		t.Errorf("STATUS %q, want %q", got, want)
	}
	p.Update.Reason = schema.UpdateReasonLock
	if got := PodRow(p, false, until)[3]; got != "Running (waiting for update lock)" {
		t.Errorf("STATUS %q under a lock", got)
	}
	p.Update = &schema.PodUpdate{Hash: "abc", State: schema.UpdateSwitched}
	if got := PodRow(p, false, until)[3]; got != "Running" {
		t.Errorf("STATUS %q once switched", got)
	}
	p.Reachable = false
	p.Update = &schema.PodUpdate{Hash: "abc", State: schema.UpdateWaiting, Reason: schema.UpdateReasonWindow, Until: &until}
	if got := PodRow(p, false, until)[3]; got != "Unknown" {
		t.Errorf("STATUS %q of an unreachable device", got)
	}
}
