package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EClientIDSquatting: a stolen device token cannot hold another
// device's MQTT client ID to keep it offline. On a real hub with two real
// agents on containerd (embedded broker), while dev-2's agent is away:
// dev-1's token presenting dev-2's client ID is refused, and the audit
// trail gives the reason; a monitor credential may hold that client ID,
// but loses it the moment dev-2's agent comes back, which connects and
// converges as if nothing had happened.
func TestE2EClientIDSquatting(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2})
	const thief, victim = "dev-1", "dev-2"
	va := f.Agent(t, victim)
	b, err := os.ReadFile(filepath.Join(va.StateDir, "v1", "client-id"))
	if err != nil {
		t.Fatalf("read %s's client id: %v", victim, err)
	}
	victimID := strings.TrimSpace(string(b))
	if err := va.Stop(); err != nil {
		t.Fatal(err)
	}
	f.AwaitDevices(t, 30*time.Second, "offline", func(d schema.Device) bool {
		return d.Status != nil && !d.Status.Online
	}, victim)

	if c, err := dialMQTT(t, f.BrokerURL, thief, f.Token(thief), dialOpts{clientID: victimID}); err == nil {
		c.c.Disconnect(0)
		t.Fatalf("%s's token connected with %s's client ID %s", thief, victim, victimID)
	}
	mon := addMonitor(t, f.Hub, "squatter")
	squatter := mustDialMQTT(t, f.BrokerURL, "squatter", mon, dialOpts{clientID: victimID})

	va.Start(t)
	f.AwaitDevices(t, 60*time.Second, "back online", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Online
	}, victim)
	f.AwaitConverged(t, 60*time.Second, victim)
	select {
	case <-squatter.lost:
	case <-time.After(30 * time.Second):
		t.Error("the monitor holding the device's client ID kept its session after the device came back")
	}

	var l schema.AuditList
	f.Get(t, "/v1/audit?limit=0", &l)
	found := false
	for _, e := range l.Items {
		if e.Actor == thief && e.Action == "login" && strings.Contains(e.Detail, "not the device's own") {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry for %s's refused login naming the client ID", thief)
	}
}
