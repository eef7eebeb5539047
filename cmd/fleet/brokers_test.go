package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestDeviceAddEveryBroker: `fleet device add` gives the device every
// broker the hub knows of (GET /v1/info mqttURL, then brokers; a
// wildcard host becomes the hub's), in the join string and the agent's
// --broker; --broker, repeatable or comma-separated, gives the list
// instead.
func TestDeviceAddEveryBroker(t *testing.T) {
	e := newEnv(t)
	key, hash := hubSigningKey(t), "sha256:"+strings.Repeat("5a", 32)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://h1.example:8883", CAHash: hash, SigningKey: key,
		Brokers: []string{"ssl://h1.example:8883", "ssl://h2.example:8883", "ssl://0.0.0.0:9883"}})
	n := len(e.hub.Requests())
	out := e.ok("", "device", "add", "pi-1")
	if got := e.requestsSince(n); !slices.Equal(got, []string{"GET /v1/info", "POST /v1/devices", "POST /v1/devices/pi-1/token"}) {
		t.Fatalf("requests %v", got)
	}
	want := []string{"ssl://h1.example:8883", "ssl://h2.example:8883", "ssl://127.0.0.1:9883"}
	join, _, _ := joinLines(t, out)
	j, err := schema.ParseJoin(join)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.Brokers, want) || j.CAHash != hash {
		t.Fatalf("join string brokers %q, CA hash %q; want %q", j.Brokers, j.CAHash, want)
	}
	if line := "fleet-agent --broker " + strings.Join(want, ",") + " --device pi-1 "; !strings.Contains(out, line) {
		t.Errorf("no %q in:\n%s", line, out)
	}

	out = e.ok("", "device", "add", "pi-2", "--broker", "ssl://b.example:8883", "--broker", "ssl://a.example:8883,ssl://c.example")
	join, _, _ = joinLines(t, out)
	if j, err := schema.ParseJoin(join); err != nil || !slices.Equal(j.Brokers, []string{"ssl://b.example:8883", "ssl://a.example:8883", "ssl://c.example"}) {
		t.Fatalf("--broker: join string %+v, %v", j, err)
	}

	// rotate-token takes --broker too.
	out = e.ok("", "device", "rotate-token", "pi-2", "--broker", "ssl://z.example:8883")
	join, _, _ = joinLines(t, out)
	if j, err := schema.ParseJoin(join); err != nil || !slices.Equal(j.Brokers, []string{"ssl://z.example:8883"}) {
		t.Fatalf("rotate-token --broker: join string %+v, %v", j, err)
	}
}

// TestBrokerFlagNamesTheBadEntry: a malformed --broker entry is refused
// before anything is created, naming its position.
func TestBrokerFlagNamesTheBadEntry(t *testing.T) {
	e := newEnv(t)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://h1:8883", SigningKey: hubSigningKey(t)})
	for _, args := range [][]string{
		{"device", "add", "pi-1", "--broker", "ssl://h1:8883,ssl//h2:8883"},
		{"token", "create", "--broker", "ssl://h1:8883", "--broker", "ssl//h2:8883"},
	} {
		n := len(e.hub.Requests())
		r := e.run("", args...)
		if r.code == 0 || !strings.Contains(r.stderr, "--broker: broker 2 of 2: ") {
			t.Errorf("fleet %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		if got := e.requestsSince(n); len(got) != 0 {
			t.Errorf("fleet %s sent %v", strings.Join(args, " "), got)
		}
	}
	if e.hub.Device("pi-1") != nil {
		t.Fatal("the device was created")
	}
}

// TestTokenCreateEveryBroker: `fleet token create` puts every broker in
// the join string and in the agent's and install.sh's --broker.
func TestTokenCreateEveryBroker(t *testing.T) {
	e := newEnv(t)
	key := hubSigningKey(t)
	useRealAPI(t, e, "", schema.HubInfo{MQTTURL: "ssl://h1:8883", SigningKey: key, Brokers: []string{"ssl://h2:8883"}})
	out := e.ok("", "token", "create", "--uses", "1")
	join, _, _ := joinLines(t, out)
	j, err := schema.ParseJoin(join)
	if err != nil || !slices.Equal(j.Brokers, []string{"ssl://h1:8883", "ssl://h2:8883"}) {
		t.Fatalf("join string %+v, %v", j, err)
	}
	for _, want := range []string{"fleet-agent --broker ssl://h1:8883,ssl://h2:8883 ", "sudo ./install.sh --broker ssl://h1:8883,ssl://h2:8883 "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestDeviceAddLeaderBrokerFirst: asked through a standby hub on etcd,
// whose GET /v1/info brokers lists every hub's broker, the leader's
// first, `fleet device add` gives the device that order, not the
// standby's own broker first.
func TestDeviceAddLeaderBrokerFirst(t *testing.T) {
	e := newEnv(t)
	key := hubSigningKey(t)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "tcp://standby.example:1883", SigningKey: key,
		Brokers: []string{"tcp://leader.example:1883", "tcp://standby.example:1883"}})
	out := e.ok("", "device", "add", "pi-1")
	join, _, _ := joinLines(t, out)
	j, err := schema.ParseJoin(join)
	want := []string{"tcp://leader.example:1883", "tcp://standby.example:1883"}
	if err != nil || !slices.Equal(j.Brokers, want) {
		t.Fatalf("join string %+v, %v; want brokers %q", j, err, want)
	}
	if line := "fleet-agent --broker " + strings.Join(want, ",") + " "; !strings.Contains(out, line) {
		t.Errorf("no %q in:\n%s", line, out)
	}
}
