package edgeagent

import (
	"testing"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// TestAgentFollowsBrokerList: an agent given two brokers (two hubs'
// embedded brokers, each behind a proxy that can cut it) applies the
// desired state from the first; when the first goes away it moves to
// the second and converges on a change published there; when the
// second goes away it comes back to the first. Its container is never
// stopped or restarted by the moves.
func TestAgentFollowsBrokerList(t *testing.T) {
	a1, a2 := startBroker(t, nil), startBroker(t, nil)
	p1, p2 := startProxy(t, a1.addr), startProxy(t, a2.addr)
	web := podOf("web", schema.RestartAlways, "web:1")
	for _, b := range []*testBroker{a1, a2} {
		b.addDevice("pi-1", "token-pi-1")
		b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, web))
	}
	first, second := "tcp://"+p1.addr(), "tcp://"+p2.addr()
	p2.cut() // only the first is up at start
	rt := runtime.NewFake(runtime.FakeOptions{})
	o := fastOptions(t, "pi-1", "", rt, t.TempDir())
	o.Brokers = []string{first, second}
	a, _ := runAgent(t, o)
	a1.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	if a.Broker() != first {
		t.Fatalf("on broker %q, want the first %s", a.Broker(), first)
	}

	// The first hub goes away: the agent lands on the second.
	p2.restore()
	p1.cut()
	a2.await("the agent on the second broker", func() bool { return a.Broker() == second })
	a2.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	web2 := podOf("web", schema.RestartAlways, "web:2")
	a2.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 2, web2))
	a2.awaitApplied("pi-1", 2, 1, schema.PhaseRunning)

	// And back, round-robin, when the second goes away.
	a1.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 2, web2)) // the new leader rebuilt it
	p1.restore()
	p2.cut()
	a1.await("the agent back on the first broker", func() bool { return a.Broker() == first })
	a1.awaitApplied("pi-1", 2, 1, schema.PhaseRunning)

	created := rt.Created()
	if len(created) != 2 || created[0].Image != "web:1" || created[1].Image != "web:2" {
		t.Fatalf("created %+v, want web:1 then web:2 only", created)
	}
	if c := rt.Calls(); c.Stop != 1 || c.Remove != 1 {
		t.Fatalf("calls %+v: the moves between brokers touched containers (only the change to web:2 may)", c)
	}
}
