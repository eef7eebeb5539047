package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
)

// waitTimeout bounds every wait for something that should happen.
const waitTimeout = 10 * time.Second

var topics schema.Topics

// The accounts every access test runs with.
var (
	hubID     = broker.Identity{Name: "fleet.hub", Role: broker.RoleHub}
	monitorID = broker.Identity{Name: "fleet.monitor", Role: broker.RoleMonitor}
	dev1      = broker.Identity{Name: "pi-1", Role: broker.RoleDevice}
	dev2      = broker.Identity{Name: "pi-2", Role: broker.RoleDevice}
)

func testAccounts() []broker.MosquittoAccount {
	return []broker.MosquittoAccount{
		{Identity: hubID, Password: "hub-token"},
		{Identity: monitorID, Password: "monitor-token"},
		{Identity: dev1, Password: "token-1"},
		{Identity: dev2, Password: "token-2"},
	}
}

func passwordOf(name string) string {
	for _, a := range testAccounts() {
		if a.Name == name {
			return a.Password
		}
	}
	panic("no account " + name)
}

// testLogger collects logs in memory and prints them if the test fails, so
// goroutines logging after the test ends never touch t.
func testLogger(t testing.TB) *slog.Logger {
	w := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", w.String())
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// message is one PUBLISH received by a test client.
type message struct {
	Topic    string
	Payload  string
	Retained bool
}

// client is a plain paho MQTT 3.1.1 client, as a device or an operator
// would use, recording what it receives in order.
type client struct {
	t    testing.TB
	name string
	c    paho.Client
	msgs chan message
	lost chan error
	seen map[[2]string]bool
	hist []message
}

type clientOpts struct {
	clientID string
	will     *message
	buffer   int // messages held before the test reads them (default 1000)
}

func dial(t testing.TB, url, username, password string, o clientOpts) (*client, error) {
	t.Helper()
	if o.buffer == 0 {
		o.buffer = 1000
	}
	cl := &client{t: t, name: username, msgs: make(chan message, o.buffer), lost: make(chan error, 1), seen: map[[2]string]bool{}}
	if o.clientID == "" {
		// A device's own shape (broker.DeviceClientID); any client
		// may use it.
		o.clientID = fmt.Sprintf("%s-%016x", username, time.Now().UnixNano())
	}
	po := paho.NewClientOptions().
		AddBroker(url).
		SetClientID(o.clientID).
		SetUsername(username).
		SetPassword(password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetOrderMatters(true).
		SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			select {
			case cl.msgs <- message{Topic: m.Topic(), Payload: string(m.Payload()), Retained: m.Retained()}:
			default:
				panic("test client message buffer full")
			}
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case cl.lost <- err:
			default:
			}
		})
	if o.will != nil {
		po.SetWill(o.will.Topic, o.will.Payload, 1, o.will.Retained)
	}
	cl.c = paho.NewClient(po)
	tok := cl.c.Connect()
	if !tok.WaitTimeout(waitTimeout) {
		return nil, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { cl.c.Disconnect(0) })
	return cl, nil
}

func mustDial(t testing.TB, url string, id broker.Identity) *client {
	t.Helper()
	c, err := dial(t, url, id.Name, passwordOf(id.Name), clientOpts{})
	if err != nil {
		t.Fatalf("connect as %s: %v", id.Name, err)
	}
	return c
}

// subscribe subscribes at QoS 1 and returns the SUBACK return code.
func (c *client) subscribe(filter string) byte {
	c.t.Helper()
	return c.subscribeQoS(filter, 1)
}

// subscribeQoS subscribes at qos and returns the SUBACK's code.
func (c *client) subscribeQoS(filter string, qos byte) byte {
	c.t.Helper()
	tok := c.c.Subscribe(filter, qos, nil)
	if !tok.WaitTimeout(waitTimeout) {
		c.t.Fatalf("%s: subscribe %q: no SUBACK", c.name, filter)
	}
	if err := tok.Error(); err != nil {
		c.t.Fatalf("%s: subscribe %q: %v", c.name, filter, err)
	}
	key := filter
	if strings.HasPrefix(key, "$share/") { // paho reports it under the filter alone
		key = strings.Join(strings.Split(key, "/")[2:], "/")
	}
	code, ok := tok.(*paho.SubscribeToken).Result()[key]
	if !ok {
		c.t.Fatalf("%s: subscribe %q: no result", c.name, filter)
	}
	return code
}

func (c *client) mustSubscribe(filter string) {
	c.t.Helper()
	if code := c.subscribe(filter); code != 1 {
		c.t.Fatalf("%s: subscribe %q: SUBACK %#x, want 0x01", c.name, filter, code)
	}
}

func (c *client) mustBeRefused(filter string) {
	c.t.Helper()
	if code := c.subscribe(filter); code != 0x80 {
		c.t.Fatalf("%s: subscribe %q: SUBACK %#x, want 0x80 (refused)", c.name, filter, code)
	}
}

// publish publishes and, for QoS 1, waits for the PUBACK.
func (c *client) publish(topic string, qos byte, retained bool, payload string) {
	c.t.Helper()
	tok := c.c.Publish(topic, qos, retained, payload)
	if !tok.WaitTimeout(waitTimeout) {
		c.t.Fatalf("%s: publish %q: not acknowledged", c.name, topic)
	}
	if err := tok.Error(); err != nil {
		c.t.Fatalf("%s: publish %q: %v", c.name, topic, err)
	}
}

// next returns the next message received, skipping copies of messages
// already returned: a retained message published just before a subscription
// can legitimately arrive twice (retained copy and live copy).
func (c *client) next() message {
	c.t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case m := <-c.msgs:
			c.hist = append(c.hist, m)
			key := [2]string{m.Topic, m.Payload}
			if c.seen[key] {
				continue
			}
			c.seen[key] = true
			return m
		case <-timeout:
			c.t.Fatalf("%s: no message within %v", c.name, waitTimeout)
			return message{}
		}
	}
}

// expect checks that the next message received is on topic with payload:
// anything that arrived before it is an access violation or a test bug.
func (c *client) expect(topic, payload string) message {
	c.t.Helper()
	m := c.next()
	if m.Topic != topic || m.Payload != payload {
		c.t.Fatalf("%s: received %q %q, want %q %q", c.name, m.Topic, m.Payload, topic, payload)
	}
	return m
}

// published marks messages published before this client subscribed as
// seen: mochi acknowledges a publish before it hands it to the
// subscribers, so on a loaded machine a subscription made after the
// acknowledgement can still receive it live, without the retain flag.
func (c *client) published(msgs ...message) {
	for _, m := range msgs {
		c.seen[[2]string{m.Topic, m.Payload}] = true
	}
}

// expectLive is expect, skipping messages replayed from the retained store
// on subscribe (forged messages in these tests are never retained).
func (c *client) expectLive(topic, payload string) message {
	c.t.Helper()
	for {
		m := c.next()
		if m.Retained {
			continue
		}
		if m.Topic != topic || m.Payload != payload {
			c.t.Fatalf("%s: received %q %q, want %q %q; history %+v", c.name, m.Topic, m.Payload, topic, payload, c.hist)
		}
		return m
	}
}

// awaitLost waits until the broker closes the connection.
func (c *client) awaitLost() {
	c.t.Helper()
	select {
	case <-c.lost:
	case <-time.After(waitTimeout):
		c.t.Fatalf("%s: still connected after %v", c.name, waitTimeout)
	}
}

// target is a broker the access suite runs against.
type target struct {
	url string
	// refusesSubscriptions: the broker answers a forbidden SUBSCRIBE with
	// SUBACK 0x80. Mosquitto 2's acl_file does not check subscriptions at
	// all and only filters what it delivers, so the suite then proves the
	// absence of deliveries alone.
	refusesSubscriptions bool
}

// subscribeForbidden subscribes c to a filter it may not read.
func (tg target) subscribeForbidden(c *client, filter string) {
	c.t.Helper()
	if tg.refusesSubscriptions {
		c.mustBeRefused(filter)
		return
	}
	if code := c.subscribe(filter); code != 0x80 && code > 2 {
		c.t.Fatalf("%s: subscribe %q: SUBACK %#x", c.name, filter, code)
	}
}

// testAccess is the access-control suite shared by the embedded broker and
// Mosquitto configured by WriteMosquittoFiles. Forbidden publishes use QoS 0
// (a denied QoS 1 publish disconnects a 3.1.1 client on mochi), and absence
// is proven with a later allowed message from the same publisher: each broker
// handles one client's packets in order, so a leaked message would arrive
// first.
func testAccess(t *testing.T, tg target) {
	desired1, desired2 := topics.Device(dev1.Name, schema.TopicDesired), topics.Device(dev2.Name, schema.TopicDesired)
	status1, status2 := topics.Device(dev1.Name, schema.TopicStatus), topics.Device(dev2.Name, schema.TopicStatus)

	t.Run("DeviceReceivesRetainedDesired", func(t *testing.T) {
		hub := mustDial(t, tg.url, hubID)
		hub.publish(desired1, 1, true, `{"generation":1}`)
		c, err := dial(t, tg.url, dev1.Name, passwordOf(dev1.Name), clientOpts{clientID: dev1.Name})
		if err != nil {
			t.Fatal(err)
		}
		c.mustSubscribe(desired1)
		if m := c.expect(desired1, `{"generation":1}`); !m.Retained {
			t.Error("desired state not flagged retained")
		}
		hub.publish(desired1, 1, true, `{"generation":2}`)
		c.expect(desired1, `{"generation":2}`)
	})

	t.Run("DeviceCannotReadOtherDevices", func(t *testing.T) {
		hub := mustDial(t, tg.url, hubID)
		hub.publish(desired2, 1, true, `secret-2`)
		hub.publish(desired1, 1, true, `mine-1`)
		c := mustDial(t, tg.url, dev1)
		for _, f := range []string{
			desired2,
			topics.DeviceFilter(schema.TopicDesired),
			topics.Device(dev1.Name, "+"),
			topics.Device(dev1.Name, "#"),
			topics.Device(dev2.Name, "#"),
			status2,
			topics.DeviceFilter(schema.TopicStatus),
			"fleet/v1/#",
			"#",
		} {
			tg.subscribeForbidden(c, f)
		}
		c.mustSubscribe(desired1)
		c.expect(desired1, `mine-1`)
		hub.publish(desired2, 1, true, `secret-2b`)
		hub.publish(status2, 1, false, `status-2`)
		hub.publish(desired1, 1, true, `mine-2`)
		c.expect(desired1, `mine-2`)
	})

	t.Run("DeviceCannotSpeakForOthers", func(t *testing.T) {
		hub := mustDial(t, tg.url, hubID)
		hub.mustSubscribe("fleet/v1/#")
		c := mustDial(t, tg.url, dev1)
		for _, topic := range []string{
			status2,
			topics.Device(dev2.Name, schema.TopicOnline),
			topics.Device(dev2.Name, schema.TopicEvents),
			desired1,
			desired2,
			topics.DeploymentStatus("web"),
			"fleet/v1/devices/pi-1/status/extra",
			"elsewhere",
		} {
			c.publish(topic, 0, false, "forged")
		}
		c.publish(status1, 1, false, `own-status`)
		hub.expectLive(status1, `own-status`)
		c.publish(topics.Device(dev1.Name, schema.TopicOnline), 1, true, schema.Online)
		hub.expectLive(topics.Device(dev1.Name, schema.TopicOnline), schema.Online)
		c.publish(topics.Device(dev1.Name, schema.TopicEvents), 1, false, `event`)
		hub.expectLive(topics.Device(dev1.Name, schema.TopicEvents), `event`)
	})

	t.Run("RefusedConnections", func(t *testing.T) {
		for _, tc := range []struct{ name, user, pass string }{
			{"anonymous", "", ""},
			{"no password", dev1.Name, ""},
			{"wrong password", dev1.Name, "token-2"},
			{"unknown user", "pi-9", "token-1"},
			{"other device's token", dev2.Name, "token-1"},
		} {
			if _, err := dial(t, tg.url, tc.user, tc.pass, clientOpts{}); err == nil {
				t.Errorf("%s: connected, want refused", tc.name)
			}
		}
	})

	t.Run("MonitorReadsStatusNotDesired", func(t *testing.T) {
		hub := mustDial(t, tg.url, hubID)
		hub.publish(desired1, 1, true, `secret-1`)
		d1, d2 := mustDial(t, tg.url, dev1), mustDial(t, tg.url, dev2)
		d1.publish(status1, 1, true, `status-1`)
		d2.publish(status2, 1, true, `status-2`)

		m := mustDial(t, tg.url, monitorID)
		tg.subscribeForbidden(m, desired1)
		tg.subscribeForbidden(m, topics.DeviceFilter(schema.TopicDesired))
		tg.subscribeForbidden(m, "fleet/v1/devices/#")
		tg.subscribeForbidden(m, "#")
		m.mustSubscribe(topics.DeviceFilter(schema.TopicStatus))
		got := map[string]string{}
		for got[status1] == "" || got[status2] == "" {
			msg := m.next()
			if _, kind, err := topics.ParseDevice(msg.Topic); err != nil || kind == schema.TopicDesired {
				t.Fatalf("monitor received %q %q", msg.Topic, msg.Payload)
			}
			got[msg.Topic] = msg.Payload
		}
		if got[status1] != "status-1" || got[status2] != "status-2" {
			t.Fatalf("monitor got %v, want both statuses", got)
		}
		m.mustSubscribe(topics.Device(dev1.Name, schema.TopicOnline))
		m.mustSubscribe(topics.DeploymentStatus("+"))

		// The monitor writes nothing, not even on its own name.
		hub.published(message{Topic: desired1, Payload: "secret-1"}, message{Topic: status1, Payload: "status-1"}, message{Topic: status2, Payload: "status-2"})
		hub.mustSubscribe("fleet/v1/#")
		for _, topic := range []string{status1, desired1, topics.Device(monitorID.Name, schema.TopicStatus), topics.DeploymentStatus("web")} {
			m.publish(topic, 0, false, "forged")
		}
		d1.publish(status1, 1, false, `status-1b`)
		hub.expectLive(status1, "status-1b")
		m.expectLive(status1, "status-1b")
	})

	t.Run("OversizedPayloadRefused", func(t *testing.T) {
		hub := mustDial(t, tg.url, hubID)
		hub.mustSubscribe(status1)
		c := mustDial(t, tg.url, dev1)
		c.c.Publish(status1, 0, false, strings.Repeat("x", broker.DefaultMaxPacketSize+1))
		c.awaitLost()
		c2 := mustDial(t, tg.url, dev1)
		c2.publish(status1, 1, false, "small")
		hub.expectLive(status1, "small")
	})
}

func ctxTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}
