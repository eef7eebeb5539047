package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EIdleAgentSendsOnlyKeepalives: a real agent on real containerd,
// three pods running, nothing changing: over several keepalives and many
// resyncs it sends nothing but MQTT pings (2 bytes each; a status or an
// event would be hundreds), and the hub keeps it online all along, its
// presence being the session (issue 31). Then a change still goes out at
// once.
func TestE2EIdleAgentSendsOnlyKeepalives(t *testing.T) {
	const keepalive = 5 * time.Second
	f := StartFleet(t, FleetOptions{Agents: 1, Proxy: true, AgentArgs: []string{"--keepalive", keepalive.String()}})
	dev := f.Devices()[0]
	a := f.Agent(t, dev)
	var deps []e2eDep
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("idle-%d", i)
		deps = append(deps, e2eDep{Name: name, Selector: map[string]string{"fleet/device": dev}})
		names = append(names, name)
	}
	f.deleteOnCleanup(t, names...)
	f.applyDeps(t, deps...)
	f.AwaitConverged(t, 60*time.Second, dev)

	// Whatever follows the convergence (the last acknowledgements) ends
	// within a few resyncs (2 s each): wait until a keepalive passes
	// with no more than a ping sent.
	// The window is measured in time: what is tested is that nothing
	// happens in it.
	up0, down0 := a.Proxy.Bytes()
	quiet := time.NewTicker(keepalive + time.Second)
	defer quiet.Stop()
	for settle := time.Now().Add(60 * time.Second); ; {
		<-quiet.C
		u, d := a.Proxy.Bytes()
		if u-up0 <= 2 {
			up0, down0 = u, d
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("the agent never went quiet after converging: %d bytes in the last %v", u-up0, keepalive+time.Second)
		}
		up0, down0 = u, d
	}

	const keepalives = 4
	window := keepalives * keepalive
	start := time.Now()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for time.Since(start) < window {
		// The device must stay online throughout: no status arrives, and
		// none is needed.
		var d schema.Device
		f.Get(t, "/v1/devices/"+dev, &d)
		if d.Status == nil || !d.Status.Online || d.Status.Stale || !d.Status.Converged {
			t.Fatalf("idle device at %v: status %+v, want online and converged", time.Since(start).Round(time.Millisecond), d.Status)
		}
		<-check.C
	}
	up, down := a.Proxy.Bytes()
	up, down = up-up0, down-down0
	t.Logf("idle for %v (%d keepalives of %v, resync 2 s): %d bytes up, %d bytes down", window, keepalives, keepalive, up, down)
	// A PINGREQ is 2 bytes, its PINGRESP 2: at most one a keepalive, and
	// one more for the edges of the window.
	if up > 2*(keepalives+1) || down > 2*(keepalives+1) {
		t.Errorf("an idle agent sent %d bytes and got %d in %v: want only pings (2 bytes each, at most %d)", up, down, window, keepalives+1)
	}
	if up < 2 {
		t.Errorf("an idle agent sent %d bytes in %d keepalives: its pings are missing (is the proxy counting?)", up, keepalives)
	}

	// A change is not held back by the quiet.
	deps[0].Args = []string{"echo", "v2", "sleep", "forever"}
	f.applyDeps(t, deps...)
	f.AwaitConverged(t, 60*time.Second, dev)
	if u, _ := a.Proxy.Bytes(); u-up0-up < 200 {
		t.Errorf("the change sent %d bytes: no status", u-up0-up)
	}
}
