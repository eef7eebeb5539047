package fleetmodel

import (
	"slices"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// presenceCounts adds up DevicePresences, which the per-device metrics
// export: they must agree with the counts behind the fleet_devices*
// gauges (TestCountsMatchRecount checks it after every random step).
func presenceCounts(m *Model) (devices, online, converged int64) {
	for _, p := range m.DevicePresences() {
		devices++
		if p.Online {
			online++
		}
		if p.Converged {
			converged++
		}
	}
	return devices, online, converged
}

// TestDevicePresences: every registered device is listed, by name, with
// its own presence, convergence and last-seen time; a report of an
// earlier device of the same name does not count for the new one.
func TestDevicePresences(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	m := New(Options{Now: clk.Now, StaleAfter: -1})
	w := m.Writer()
	for _, n := range []string{"b", "a", "c"} {
		w.PutDevice(n, Device{UID: "u-" + n})
	}
	ds := &schema.DesiredState{Device: "a", Generation: 2, Store: "s"}
	w.SetDesired(1, func(int) (string, *schema.DesiredState) { return "a", ds })
	seen := clk.Now()
	m.UpdateReport("a", "u-a", func(r *Report, _ bool) bool {
		r.Online, r.LastSeen = true, seen
		r.Status = &schema.DeviceStatus{Device: "a", ObservedGeneration: 2, Store: "s"}
		return true
	})
	m.UpdateReport("c", "old-uid", func(r *Report, _ bool) bool {
		r.Online, r.LastSeen = true, seen
		return true
	})
	got := m.DevicePresences()
	want := []DevicePresence{{Name: "a", Online: true, Converged: true, LastSeen: seen}, {Name: "b"}, {Name: "c"}}
	if !slices.Equal(got, want) {
		t.Fatalf("DevicePresences:\n got %+v\nwant %+v", got, want)
	}
}

// TestDeploymentStatuses lists every recorded deployment status by name
// and forgets deleted ones.
func TestDeploymentStatuses(t *testing.T) {
	m := New(Options{})
	w := m.Writer()
	w.SetDeploymentStatus("web", schema.DeploymentStatus{Targeted: 3, Failed: 1})
	w.SetDeploymentStatus("api", schema.DeploymentStatus{Targeted: 2, Rollout: &schema.RolloutStatus{Phase: schema.RolloutStopped}})
	w.SetDeploymentStatus("gone", schema.DeploymentStatus{})
	w.DeleteDeploymentStatus("gone")
	got := m.DeploymentStatuses()
	var names []string
	for _, d := range got {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"api", "web"}) {
		t.Fatalf("names %v, want [api web]", names)
	}
	if got[0].Status.Rollout == nil || got[0].Status.Rollout.Phase != schema.RolloutStopped || got[1].Status.Failed != 1 {
		t.Fatalf("statuses %+v", got)
	}
}
