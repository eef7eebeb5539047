package test

import (
	"maps"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestE2EAgentBrokerList: real fleet-agent processes on containerd, given
// two hubs' brokers (--broker a,b), follow the fleet from one hub to the
// other and back. Two hubs keep the fleet in one etcd store (the second
// with the first one's key files); only one runs at a time (on main no
// hub refuses devices yet, so the one that runs is the one devices
// need). kill -9 of the running hub and the start of the other: every
// agent lands on the other's broker, is online there and converges on a
// change applied through it; then back. No container is restarted by a
// move; the agents' logs say which broker they are on.
func TestE2EAgentBrokerList(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true, Members: 1})
	f := StartFleet(t, FleetOptions{Agents: 2, HubArgs: etcdArgs(c, "/fleet/brokers/"),
		Labels: func(int) map[string]string { return map[string]string{"site": "a"} }})
	h1 := f.Hub
	addr2 := freeAddr(t)
	second := "tcp://" + addr2
	list := f.BrokerURL + "," + second
	for _, a := range f.Agents {
		a.SetBroker(list)
		a.Restart(t) // with the list; the restart itself restarts nothing
	}
	f.Apply(t, webYAML("web", f.Image, map[string]string{"site": "a"}))
	for _, d := range f.Devices() {
		f.AwaitContainerRunning(t, d, "web")
	}
	f.AwaitConverged(t, e2eConverge, f.Devices()...)
	pids := f.TaskPIDs(t)
	if len(pids) != 2 {
		t.Fatalf("%d containers running, want 2: %v", len(pids), pids)
	}

	// The first hub dies; the second starts, with the first one's keys.
	dir2 := filepath.Join(t.TempDir(), "fleet-data")
	for _, name := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(h1.DataDir, name), filepath.Join(dir2, name))
	}
	marks := map[string]int{}
	for _, a := range f.Agents {
		marks[a.Device] = a.LogMark()
	}
	start := time.Now()
	h1.Kill()
	h2 := StartHub(t, HubOptions{DataDir: dir2, Args: etcdArgs(c, "/fleet/brokers/"), MQTTAddr: addr2})
	f.Hub = h2
	for _, a := range f.Agents {
		a.AwaitLog(t, marks[a.Device], `msg="mqtt connected" device=`+a.Device+` broker=`+second, time.Minute)
	}
	onSecond := time.Now()
	t.Logf("every agent on the second hub's broker %s after %v (kill -9 of the first hub, start of the second included)", second, onSecond.Sub(start).Round(time.Millisecond))
	f.AwaitDevices(t, e2eConverge, "online and converged on the second hub", func(d schema.Device) bool {
		return Converged(d)
	}, f.Devices()...)
	if got := f.TaskPIDs(t); !maps.Equal(got, pids) {
		t.Fatalf("containers after moving to the second broker %v, before %v: a move restarted them", got, pids)
	}
	f.Apply(t, webYAML("web2", f.Image, map[string]string{"site": "a"}))
	for _, d := range f.Devices() {
		f.AwaitContainerRunning(t, d, "web2")
	}
	f.AwaitConverged(t, e2eConverge, f.Devices()...)
	pids = f.TaskPIDs(t)
	if len(pids) != 4 {
		t.Fatalf("%d containers running after a change through the second hub, want 4: %v", len(pids), pids)
	}

	// And back: the second dies, the first comes back on its address
	// (a standby until the second's lease ends). The agents' connections
	// to the second outlast their StableAfter first, as a real fleet's
	// would between two failovers, so that this move's backoff starts
	// afresh rather than from the first move's.
	for time.Since(onSecond) < agentStableAfter {
		time.Sleep(pollEvery) // poll interval
	}
	for _, a := range f.Agents {
		marks[a.Device] = a.LogMark()
	}
	h2.Kill()
	f.Hub = h1
	h1.Restart()
	for _, a := range f.Agents {
		// The lease, then the agent's backoff (at most 1 min).
		a.AwaitLog(t, marks[a.Device], `msg="mqtt connected" device=`+a.Device+` broker=`+h1.MQTTURL, 100*time.Second)
	}
	f.AwaitDevices(t, e2eConverge, "online and converged on the first hub again", func(d schema.Device) bool {
		return Converged(d)
	}, f.Devices()...)
	if got := f.TaskPIDs(t); !maps.Equal(got, pids) {
		t.Fatalf("containers after moving back %v, before %v: a move restarted them", got, pids)
	}
}
