package edgeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

func TestAgentAppliesRetainedDesiredState(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	web := podOf("web", schema.RestartAlways, "nginx:1", "sidecar:1")
	job := podOf("job", schema.RestartNever, "busybox:1")
	// Published before the agent exists: retained state is all it needs.
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, web, job))

	rt := runtime.NewFake(runtime.FakeOptions{})
	dir := t.TempDir()
	a, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
	st := b.awaitApplied("pi-1", 1, 2, schema.PhaseRunning)

	if st.Store != "s1" || st.Agent.Version != "test" || st.Agent.OS == "" || st.Node == nil || st.Time.IsZero() {
		t.Errorf("status = %+v", st)
	}
	if got := st.Pods[0].Containers; len(got) != 2 || got[0].State != schema.ContainerRunning || got[0].StartedAt == nil || got[1].Image != "sidecar:1" {
		t.Errorf("container statuses = %+v", got)
	}
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		t.Errorf("status invalid: %v", err)
	}
	if b.onlineOf("pi-1") != schema.Online || !a.Connected() {
		t.Errorf("online = %q", b.onlineOf("pi-1"))
	}
	created := rt.Created()
	if len(created) != 3 {
		t.Fatalf("created %d containers", len(created))
	}
	for _, c := range created {
		if c.ID != reconcile_ID(c) || !strings.HasPrefix(c.LogPath, filepath.Join(dir, "logs", c.Pod)) || !slices.Contains(c.Env, "POD="+c.Pod) {
			t.Errorf("container spec %+v", c)
		}
	}
	b.await("a Started event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "Started") })

	// The job completes: Never means it stays completed.
	if err := rt.Exit(containerID(job, 0), 0); err != nil {
		t.Fatal(err)
	}
	b.await("job Succeeded", func() bool {
		st, _ := b.lastStatus("pi-1")
		return len(st.Pods) == 2 && st.Pods[1].Phase == schema.PhaseSucceeded
	})

	stop()
	// The broker retains "offline" before acking it; its subscribers may
	// hear of it a moment later.
	b.await("offline announced on shutdown", func() bool { return b.onlineOf("pi-1") == schema.Offline })
	if msgs := b.srv.Topics.Messages(schema.Topics{}.Device("pi-1", schema.TopicOnline)); len(msgs) != 1 || string(msgs[0].Payload) != schema.Offline {
		t.Errorf("retained online = %v, want offline", msgs)
	}
	c := rt.Calls()
	if c.Stop != 0 || c.Remove != 0 {
		t.Errorf("shutdown touched containers: %+v", c)
	}
	if ctr, _ := rt.Get(containerID(web, 0)); ctr.State != runtime.StateRunning {
		t.Errorf("web is %s after agent shutdown", ctr.State)
	}
}

// reconcile_ID recomputes the deterministic ID from the spec's labels.
func reconcile_ID(c runtime.ContainerSpec) string {
	return fmt.Sprintf("%s-%s-%s", c.Pod, c.Name, c.PodHash[:8])
}

func TestAgentRefusesBadCredentials(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "right")
	o := fastOptions(t, "pi-1", "tcp://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), t.TempDir())
	o.Token = "wrong"
	a, _ := runAgent(t, o)
	b.await("two refused attempts", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.logins) >= 2
	})
	if a.Connected() {
		t.Fatal("connected with a wrong token")
	}
}

func TestAgentConvergesToLatestAfterDisconnect(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	p := startProxy(t, b.addr)
	rt := runtime.NewFake(runtime.FakeOptions{})
	a, _ := runAgent(t, fastOptions(t, "pi-1", "tcp://"+p.addr(), rt, t.TempDir()))

	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, podOf("web", schema.RestartAlways, "web:1")))
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)

	p.cut()
	b.await("the last will", func() bool { return b.onlineOf("pi-1") == schema.Offline })
	b.await("the agent to notice", func() bool { return !a.Connected() })
	for gen := int64(2); gen <= 4; gen++ {
		b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", gen, podOf("web", schema.RestartAlways, fmt.Sprintf("web:%d", gen))))
	}
	p.restore()
	st := b.awaitApplied("pi-1", 4, 1, schema.PhaseRunning)
	if b.onlineOf("pi-1") != schema.Online {
		t.Errorf("online not re-announced after reconnect")
	}
	var images []string
	for _, c := range rt.Created() {
		images = append(images, c.Image)
	}
	if !slices.Equal(images, []string{"web:1", "web:4"}) {
		t.Fatalf("created images %v: intermediate desired states were applied", images)
	}
	if st.Pods[0].Containers[0].Image != "web:4" {
		t.Fatalf("status = %+v", st.Pods[0])
	}
	l, _ := rt.List(context.Background())
	if len(l) != 1 || l[0].Image != "web:4" {
		t.Fatalf("running %+v", l)
	}
}

func TestAgentKeepsLastGoodStateOnBadPayloads(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	rt := runtime.NewFake(runtime.FakeOptions{})
	a, _ := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, t.TempDir()))
	web := podOf("web", schema.RestartAlways, "web:5")
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 5, web))
	b.awaitApplied("pi-1", 5, 1, schema.PhaseRunning)
	calls := rt.Calls()

	b.publishDesired("pi-1", []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"pi-1","generation":6,"pods":[{"name":"BAD"`))
	b.await("InvalidDesiredState event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "InvalidDesiredState") })
	b.await("the refusal in status", func() bool {
		st, _ := b.lastStatus("pi-1")
		return strings.Contains(st.Message, "refused")
	})
	b.publishDesired("pi-1", []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"pi-1","generation":7,"pods":[{"name":"x","spec":{"containers":[]}}]}`))
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 3, podOf("old", schema.RestartAlways, "old:1")))
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 5, web))
	b.publishDesired("pi-1", desiredJSON(t, "pi-2", "s1", 9, podOf("theirs", schema.RestartAlways, "x:1")))
	b.publishDesired("pi-1", nil) // the hub clears the topic
	b.await("all payloads handled", func() bool {
		s := a.Stats()
		return s.Invalid == 2 && s.Stale == 1 && s.Duplicate >= 1 && s.OtherDevice == 1 && s.Cleared == 1
	})
	b.await("DesiredStateCleared event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "DesiredStateCleared") })
	if c := rt.Calls(); c.Create != calls.Create || c.Remove != 0 || c.Stop != 0 {
		t.Fatalf("bad payloads changed containers: %+v -> %+v", calls, c)
	}
	st, _ := b.lastStatus("pi-1")
	if st.ObservedGeneration != 5 || st.Pods[0].Phase != schema.PhaseRunning {
		t.Fatalf("status = %+v", st)
	}

	// A new hub store restarts generations: accepted.
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s2", 1, podOf("web", schema.RestartAlways, "web:new-store")))
	st = b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	if st.Store != "s2" || st.Message != "" {
		t.Fatalf("status after new store = %+v", st)
	}
}

func TestAgentRestartAdoptsRunningContainers(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	rt := runtime.NewFake(runtime.FakeOptions{})
	dir := t.TempDir()
	_, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1,
		podOf("web", schema.RestartAlways, "web:1", "side:1"), podOf("db", schema.RestartOnFailure, "db:1")))
	b.awaitApplied("pi-1", 1, 2, schema.PhaseRunning)
	stop()
	before := rt.Calls()
	b.mu.Lock()
	n := b.nstatus["pi-1"]
	b.mu.Unlock()

	// A new agent over the same runtime and state dir.
	runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
	b.await("a status from the new agent", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.nstatus["pi-1"] > n && b.online["pi-1"] == schema.Online
	})
	b.awaitApplied("pi-1", 1, 2, schema.PhaseRunning)
	after := rt.Calls()
	if after.Create != before.Create || after.Start != before.Start || after.Stop != 0 || after.Remove != 0 {
		t.Fatalf("restarted agent restarted healthy containers: before %+v, after %+v", before, after)
	}
}

func TestAgentRunsFromPersistedStateWithoutBroker(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	dir := t.TempDir()
	web := podOf("web", schema.RestartAlways, "web:1")
	once := podOf("once", schema.RestartNever, "once:1")
	{
		rt := runtime.NewFake(runtime.FakeOptions{})
		_, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
		b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 3, web, once))
		b.awaitApplied("pi-1", 3, 2, schema.PhaseRunning)
		stop()
	}

	// Reboot: containerd lost every container, and no broker is
	// reachable (a closed port).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + ln.Addr().String()
	ln.Close()
	rt := runtime.NewFake(runtime.FakeOptions{})
	a, _ := runAgent(t, fastOptions(t, "pi-1", dead, rt, dir))
	running := func(id string) func() bool {
		return func() bool { c, ok := rt.Get(id); return ok && c.State == runtime.StateRunning }
	}
	b.await("containers from persisted state", func() bool { return running(containerID(web, 0))() && running(containerID(once, 0))() })

	// Crash: restarted per policy, still offline.
	if err := rt.Exit(containerID(web, 0), 1); err != nil {
		t.Fatal(err)
	}
	b.await("web restarted after its backoff", running(containerID(web, 0)))
	if err := rt.Exit(containerID(web, 0), 2); err != nil {
		t.Fatal(err)
	}
	b.await("web restarted again", func() bool { return running(containerID(web, 0))() && rt.Calls().Start == 4 })
	if err := rt.Exit(containerID(once, 0), 1); err != nil {
		t.Fatal(err)
	}
	// Let a full pass see the exit: a later crash restart orders after it.
	if err := rt.Exit(containerID(web, 0), 3); err != nil {
		t.Fatal(err)
	}
	b.await("web restarted a third time", func() bool { return running(containerID(web, 0))() && rt.Calls().Start == 5 })
	if c, _ := rt.Get(containerID(once, 0)); c.State != runtime.StateExited {
		t.Fatalf("Never-policy container is %s", c.State)
	}
	if a.Connected() {
		t.Fatal("connected to a closed port?")
	}
}

func TestManyAgentsInOneProcess(t *testing.T) {
	b := startBroker(t, nil)
	const n = 40
	rts := make([]*runtime.Fake, n)
	for i := range n {
		dev := fmt.Sprintf("hollow-%02d", i)
		b.addDevice(dev, "token-"+dev)
		b.publishDesired(dev, desiredJSON(t, dev, "s1", int64(i+1), podOf("app", schema.RestartAlways, "app:1")))
		rts[i] = runtime.NewFake(runtime.FakeOptions{StartLatency: runtime.LogNormalLatency(5*time.Millisecond, 0.5, uint64(i+1))})
		o := fastOptions(t, dev, "tcp://"+b.addr, rts[i], t.TempDir())
		o.Logger = nil
		o.Seed = uint64(i + 1)
		runAgent(t, o)
	}
	for i := range n {
		b.awaitApplied(fmt.Sprintf("hollow-%02d", i), int64(i+1), 1, schema.PhaseRunning)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.badTopic) > 0 {
		t.Fatalf("bad messages on %v", b.badTopic)
	}
}

func TestAgentOverTLS(t *testing.T) {
	dir := t.TempDir()
	cert := mqttiotest.SelfSigned(t)
	caFile, _ := cert.WriteFiles(t, dir, "ca")
	b := startBroker(t, &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12})
	b.addDevice("pi-1", "token-pi-1")
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, podOf("web", schema.RestartAlways, "web:1")))
	tlsCfg, err := mqttio.TLSConfig(nil, caFile)
	if err != nil {
		t.Fatal(err)
	}
	o := fastOptions(t, "pi-1", "ssl://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), filepath.Join(dir, "state"))
	o.TLSConfig = tlsCfg
	runAgent(t, o)
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
}

func TestNewValidatesOptions(t *testing.T) {
	rt := runtime.NewFake(runtime.FakeOptions{})
	for _, o := range []Options{
		{Device: "", Runtime: rt},
		{Device: "Not_Valid", Runtime: rt},
		{Device: "ok"},
		{Device: "ok", Runtime: rt, Broker: "http://x"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

func TestAgentSurvivesCorruptStateFiles(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"desired.json", "agent.json"} {
		if err := os.WriteFile(filepath.Join(dir, "v1", f), []byte("{\x00 torn write"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 2, podOf("web", schema.RestartAlways, "web:1")))
	runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), dir))
	b.awaitApplied("pi-1", 2, 1, schema.PhaseRunning)
	b.await("StateFileCorrupt events", func() bool {
		n := 0
		for _, r := range b.eventReasons("pi-1") {
			if r == "StateFileCorrupt" {
				n++
			}
		}
		return n == 2
	})
	if _, err := os.Stat(filepath.Join(dir, "v1", "desired.json.corrupt")); err != nil {
		t.Errorf("corrupt file not kept for inspection: %v", err)
	}
}

// TestBurstOfDesiredStatesAppliesTheLast: 1,000 desired states published
// back to back (a runaway publisher, or a hub replaying changes) wait in
// no queue: each is judged as it arrives and the inbox keeps the newest,
// so the agent ends running the last one, and what it creates on the way
// only ever moves forward.
func TestBurstOfDesiredStatesAppliesTheLast(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	rt := runtime.NewFake(runtime.FakeOptions{})
	a, _ := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, t.TempDir()))
	app := func(gen int64) schema.Pod {
		return podOf("app", schema.RestartAlways, "app:"+strconv.FormatInt(gen, 10))
	}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, app(1)))
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)

	// In bursts of 100 back to back: the test broker drops what does not
	// fit its queue of 256 writes to a client, as Fleet's broker would.
	const last = 1001
	judged := func() int64 { s := a.Stats(); return s.Accepted + s.Stale + s.Duplicate }
	for gen := int64(2); gen <= last; gen++ {
		b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", gen, app(gen)))
		if gen%100 == 1 {
			b.await("the burst judged", func() bool { return judged() == gen })
		}
	}
	st := b.awaitApplied("pi-1", last, 1, schema.PhaseRunning)
	if got := st.Pods[0].Containers[0].Image; got != "app:1001" {
		t.Errorf("running %s, want app:1001", got)
	}
	prev := int64(0)
	for _, c := range rt.Created() {
		gen, err := strconv.ParseInt(strings.TrimPrefix(c.Image, "app:"), 10, 64)
		if err != nil {
			t.Fatalf("created %s", c.Image)
		}
		if gen <= prev {
			t.Fatalf("created app:%d after app:%d: an older desired state applied after a newer one", gen, prev)
		}
		prev = gen
	}
	if prev != last {
		t.Errorf("last created app:%d, want app:%d", prev, last)
	}
	// paho hands each message to the agent on a goroutine of its own, so
	// some come after a newer one (stale); every one is judged, none
	// dropped on the way.
	if s := a.Stats(); s.Accepted < 2 || s.Accepted+s.Stale+s.Duplicate != last || s.Invalid != 0 {
		t.Errorf("stats %+v: want at least 2 accepted and all %d payloads judged", s, last)
	}
}
