package broker_test

import (
	"testing"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/schema"
)

// Bootstrap clients: username "bootstrap.<id>", client ID = request ID.
var bootstrapID = broker.Identity{Name: schema.BootstrapUsername("abcdef"), Role: broker.RoleBootstrap}

const (
	reqA = "req_a-0123456789abcdef"
	reqB = "req_b-0123456789abcdef"
)

func TestAllowedBootstrap(t *testing.T) {
	a := broker.Identity{Name: bootstrapID.Name, Role: broker.RoleBootstrap, Request: reqA}
	const read, write = false, true
	tests := []struct {
		id    broker.Identity
		topic string
		write bool
		want  bool
	}{
		{a, "fleet/v1/enroll/" + reqA + "/request", write, true},
		{a, "fleet/v1/enroll/" + reqA + "/response", read, true},
		// Nothing else: not the other direction, not another request,
		// no wildcard, no device topic.
		{a, "fleet/v1/enroll/" + reqA + "/response", write, false},
		{a, "fleet/v1/enroll/" + reqA + "/request", read, false},
		{a, "fleet/v1/enroll/" + reqB + "/response", read, false},
		{a, "fleet/v1/enroll/" + reqB + "/request", write, false},
		{a, "fleet/v1/enroll/+/response", read, false},
		{a, "fleet/v1/enroll/#", read, false},
		{a, "fleet/v1/enroll/" + reqA + "/+", read, false},
		{a, "#", read, false},
		{a, "fleet/v1/devices/+/desired", read, false},
		{a, "fleet/v1/devices/x/status", write, false},
		// Without a valid request ID it may do nothing.
		{broker.Identity{Name: bootstrapID.Name, Role: broker.RoleBootstrap}, "fleet/v1/enroll//request", write, false},
		{broker.Identity{Name: bootstrapID.Name, Role: broker.RoleBootstrap, Request: "+"}, "fleet/v1/enroll/+/response", read, false},
		{broker.Identity{Name: bootstrapID.Name, Role: broker.RoleBootstrap, Request: "a/b/c/d/e/f/g/h/i"}, "fleet/v1/enroll/a/b/c/d/e/f/g/h/i/request", write, false},
	}
	for _, tt := range tests {
		if got := broker.Allowed(topics, tt.id, tt.topic, tt.write); got != tt.want {
			t.Errorf("Allowed(%s request=%q, %q, write=%v) = %v, want %v", tt.id.Role, tt.id.Request, tt.topic, tt.write, got, tt.want)
		}
	}
}

func startBootstrapBroker(t *testing.T) (url string) {
	t.Helper()
	b, auth := startBroker(t)
	auth.Set(bootstrapID, "bootstrap-token")
	return brokerURL(b)
}

func dialBootstrap(t *testing.T, url, clientID string) (*client, error) {
	t.Helper()
	return dial(t, url, bootstrapID.Name, "bootstrap-token", clientOpts{clientID: clientID})
}

// TestEmbeddedBootstrapIsolation: a bootstrap client sends only its own
// request and reads only its own answer.
func TestEmbeddedBootstrapIsolation(t *testing.T) {
	testBootstrapIsolation(t, target{url: startBootstrapBroker(t), refusesSubscriptions: true})
}

// TestMosquittoBootstrapIsolation: the same with Mosquitto configured by
// the generated files.
func TestMosquittoBootstrapIsolation(t *testing.T) {
	accounts := append(testAccounts(), broker.MosquittoAccount{Identity: bootstrapID, Password: "bootstrap-token"})
	m := mosquittotest.Start(t, mosquittotest.Config{Topics: topics, Accounts: accounts})
	testBootstrapIsolation(t, target{url: m.URL})
}

func testBootstrapIsolation(t *testing.T, tg target) {
	url := tg.url
	hub := mustDial(t, url, hubID)
	hub.mustSubscribe(topics.EnrollRequestFilter())

	a, err := dialBootstrap(t, url, reqA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dialBootstrap(t, url, reqB)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		topics.Enroll(reqB, schema.TopicEnrollResponse),
		topics.Enroll("+", schema.TopicEnrollResponse),
		topics.Enroll(reqB, schema.TopicEnrollRequest),
		"fleet/v1/enroll/#",
		"#",
		topics.DeviceFilter(schema.TopicDesired),
	} {
		tg.subscribeForbidden(a, f)
	}
	a.mustSubscribe(topics.Enroll(reqA, schema.TopicEnrollResponse))
	b.mustSubscribe(topics.Enroll(reqB, schema.TopicEnrollResponse))

	// A request forged on b's topic (QoS 0: a denied QoS 1 publish would
	// cost a its connection) never reaches the hub; a's own does.
	a.publish(topics.Enroll(reqB, schema.TopicEnrollRequest), 0, false, "forged")
	a.publish(topics.Enroll(reqA, schema.TopicEnrollRequest), 1, true, "from a")
	hub.expect(topics.Enroll(reqA, schema.TopicEnrollRequest), "from a")

	// The hub answers both; each gets its own answer and nothing else.
	hub.publish(topics.Enroll(reqB, schema.TopicEnrollResponse), 1, false, "for b")
	hub.publish(topics.Enroll(reqA, schema.TopicEnrollResponse), 1, false, "for a")
	a.expect(topics.Enroll(reqA, schema.TopicEnrollResponse), "for a")
	b.expect(topics.Enroll(reqB, schema.TopicEnrollResponse), "for b")

	if !tg.refusesSubscriptions {
		return // Mosquitto drops a denied publish and keeps the client
	}
	// A denied QoS 1 publish ends the connection (MQTT 3.1.1, mochi).
	a.c.Publish(topics.Device(dev1.Name, schema.TopicStatus), 1, false, "forged")
	a.awaitLost()
}

// TestEmbeddedBootstrapConnectRules: the client ID must be a request ID no
// one else holds, with a clean session and no will.
func TestEmbeddedBootstrapConnectRules(t *testing.T) {
	url := startBootstrapBroker(t)
	for _, id := range []string{"short", "raspberry-pi-kitchen"} {
		// A device's client ID (its name) is never a request ID: a
		// bootstrap client cannot squat it.
		if _, err := dialBootstrap(t, url, id); err == nil {
			t.Errorf("bootstrap client with client ID %q (no request ID) connected", id)
		}
	}
	if _, err := dialBootstrap(t, url, "req_with/slash-0123456"); err == nil {
		t.Error("bootstrap client with '/' in its client ID connected")
	}
	if _, err := dial(t, url, bootstrapID.Name, "bootstrap-token", clientOpts{clientID: reqA,
		will: &message{Topic: topics.Enroll(reqA, schema.TopicEnrollRequest), Payload: "x"}}); err == nil {
		t.Error("bootstrap client with a will connected")
	}
	if _, err := dial(t, url, bootstrapID.Name, "wrong", clientOpts{clientID: reqA}); err == nil {
		t.Error("wrong bootstrap token accepted")
	}
	if _, err := dialBootstrap(t, url, reqA); err != nil {
		t.Fatal(err)
	}
	// Nobody, not even a client with the same bootstrap token, takes over
	// a request ID in use (it would inherit the answer).
	if _, err := dialBootstrap(t, url, reqA); err == nil {
		t.Error("a second bootstrap client took over a request ID in use")
	}
	if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{clientID: reqA}); err == nil {
		t.Error("a device took over a bootstrap client's request ID")
	}
}
