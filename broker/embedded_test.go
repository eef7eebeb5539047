package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/schema"
)

// startBroker runs an embedded broker on a loopback port with the test
// accounts, until the test ends.
func startBroker(t testing.TB) (*broker.Broker, *broker.StaticAuth) {
	t.Helper()
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	b := brokertest.Start(t, broker.Options{
		Addr:   "127.0.0.1:0",
		Auth:   auth,
		Topics: topics,
		Logger: testLogger(t),
	})
	return b, auth
}

func brokerURL(b *broker.Broker) string { return "tcp://" + b.Addr().String() }

func TestEmbeddedAccess(t *testing.T) {
	b, _ := startBroker(t)
	testAccess(t, target{url: brokerURL(b), refusesSubscriptions: true})
}

// TestEmbeddedSharedSubscriptions: consumers that split the status stream
// between them ($share/{group}/{filter}) get what the filter alone would
// give them, and nothing the filter alone would not.
func TestEmbeddedSharedSubscriptions(t *testing.T) {
	b, _ := startBroker(t)
	mon, err := dial(t, brokerURL(b), monitorID.Name, passwordOf(monitorID.Name), clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	mon.mustSubscribe("$share/telegraf/" + topics.DeviceFilter(schema.TopicStatus))
	for _, f := range []string{
		"$share/telegraf/" + topics.DeviceFilter(schema.TopicDesired),
		"$share/telegraf/#",
		"$share/+/" + topics.DeviceFilter(schema.TopicStatus),
		"$share//" + topics.DeviceFilter(schema.TopicStatus),
	} {
		mon.mustBeRefused(f)
	}
	dev, err := dial(t, brokerURL(b), dev1.Name, passwordOf(dev1.Name), clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	dev.mustBeRefused("$share/g/" + topics.Device(dev2.Name, schema.TopicDesired))
	status := topics.Device(dev1.Name, schema.TopicStatus)
	dev.publish(status, 1, false, `{"device":"pi-1"}`)
	mon.expectLive(status, `{"device":"pi-1"}`)
}

func TestEmbeddedKickRevokedDevice(t *testing.T) {
	b, auth := startBroker(t)
	url := brokerURL(b)
	c := mustDial(t, url, dev1)
	c2 := mustDial(t, url, dev1) // a second session of the same device
	other := mustDial(t, url, dev2)

	auth.Remove(dev1.Name)
	if n := b.Kick(dev1.Name); n != 2 {
		t.Errorf("Kick = %d, want 2 connections", n)
	}
	c.awaitLost()
	c2.awaitLost()
	if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{}); err == nil {
		t.Fatal("revoked device reconnected")
	}
	// Other devices are untouched.
	other.publish(topics.Device(dev2.Name, schema.TopicStatus), 1, false, "still here")

	// A rotated token works at once.
	auth.Set(dev1, "token-1-rotated")
	if _, err := dial(t, url, dev1.Name, "token-1-rotated", clientOpts{}); err != nil {
		t.Fatalf("connect with rotated token: %v", err)
	}
}

func TestEmbeddedRefusesInlineClientID(t *testing.T) {
	b, _ := startBroker(t)
	if _, err := dial(t, brokerURL(b), hubID.Name, passwordOf(hubID.Name), clientOpts{clientID: "inline"}); err == nil {
		t.Fatal(`client ID "inline" accepted from the network`)
	}
}

func TestEmbeddedRefusesForbiddenWill(t *testing.T) {
	b, _ := startBroker(t)
	url := brokerURL(b)
	forged := &message{Topic: topics.Device(dev2.Name, schema.TopicOnline), Payload: schema.Offline, Retained: true}
	if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{will: forged}); err == nil {
		t.Fatal("connected with a will on another device's topic")
	}
	// Its own online topic is fine, and the broker publishes it.
	hub := mustDial(t, url, hubID)
	online1 := topics.Device(dev1.Name, schema.TopicOnline)
	hub.mustSubscribe(online1)
	c, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{will: &message{Topic: online1, Payload: schema.Offline, Retained: true}})
	if err != nil {
		t.Fatal(err)
	}
	b.Kick(dev1.Name) // an abrupt end: the will goes out
	c.awaitLost()
	hub.expect(online1, schema.Offline)
}

// TestKickPublishesTheWill: a device kicked (its token rotated or
// revoked) shows offline every time, even kicked the moment it connected.
// mochi drops the will of a client stopped between two packets, which
// DisconnectClient could do; Kick closes the connection instead.
func TestKickPublishesTheWill(t *testing.T) {
	b, _ := startBroker(t)
	url := brokerURL(b)
	hub := mustDial(t, url, hubID)
	online1 := topics.Device(dev1.Name, schema.TopicOnline)
	hub.mustSubscribe(online1)
	for i := range 100 {
		c, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{will: &message{Topic: online1, Payload: schema.Offline, Retained: true}})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.Kick(dev1.Name); n != 1 {
			t.Fatalf("kick %d: %d connections closed, want 1", i, n)
		}
		c.awaitLost()
		hub.expect(online1, schema.Offline)
		delete(hub.seen, [2]string{online1, schema.Offline}) // expect the same message again
	}
}

// TestEmbeddedClientIDsBoundToIdentity: a device may connect only with a
// client ID of its own (its name, or its name, '-' and 16 hex digits), so
// it cannot hold another device's session; a monitor squatting a device's
// client ID while the device is away is disconnected when the device comes
// back, which connects; the refusals reach OnLoginRefused with the real
// reason.
func TestEmbeddedClientIDsBoundToIdentity(t *testing.T) {
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	refusals := make(chan broker.LoginRefusal, 10)
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t),
		OnLoginRefused: func(r broker.LoginRefusal) { refusals <- r }})
	url := brokerURL(b)
	own := dev1.Name + "-0123456789abcdef"
	for _, id := range []string{dev2.Name, dev2.Name + "-0123456789abcdef", "shared", dev1.Name + "-b", own + "0"} {
		if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{clientID: id}); err == nil {
			t.Errorf("device %s connected with client ID %q", dev1.Name, id)
			continue
		}
		select {
		case r := <-refusals:
			if r.Username != dev1.Name || !strings.Contains(r.Reason, "not the device's own") {
				t.Errorf("client ID %q: refusal %+v, want one naming the client ID", id, r)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("client ID %q: no refusal reported", id)
		}
	}
	for _, id := range []string{dev1.Name, own} {
		if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{clientID: id}); err != nil {
			t.Errorf("device with its own client ID %q: %v", id, err)
		}
	}

	// A monitor holds dev2's client ID while dev2 is away; dev2 takes it
	// back, and the monitor, refused it in turn, cannot take it again.
	squat := dev2.Name + "-fedcba9876543210"
	squatter, err := dial(t, url, monitorID.Name, passwordOf(monitorID.Name), clientOpts{clientID: squat})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, url, dev2.Name, passwordOf(dev2.Name), clientOpts{clientID: squat}); err != nil {
		t.Fatalf("device refused its own client ID held by a monitor: %v", err)
	}
	squatter.awaitLost()
	if _, err := dial(t, url, monitorID.Name, passwordOf(monitorID.Name), clientOpts{clientID: squat}); err == nil {
		t.Fatal("monitor took a connected device's client ID")
	}
	select {
	case r := <-refusals:
		if r.Username != monitorID.Name || !strings.Contains(r.Reason, "held by another identity") {
			t.Errorf("monitor refusal %+v, want the client ID held by another identity", r)
		}
	case <-time.After(waitTimeout):
		t.Fatal("monitor refusal not reported")
	}
}

func TestInlineConn(t *testing.T) {
	b, _ := startBroker(t)
	url := brokerURL(b)
	ctx := ctxTimeout(t)
	conn := b.InlineConn()
	t.Cleanup(func() { conn.Close() })

	connected := make(chan struct{}, 1)
	conn.OnConnect(func() { connected <- struct{}{} })
	select {
	case <-connected:
	case <-time.After(waitTimeout):
		t.Fatal("OnConnect callback not called")
	}

	desired1 := topics.Device(dev1.Name, schema.TopicDesired)
	if err := conn.Publish(ctx, desired1, []byte(`{"generation":7}`), true); err != nil {
		t.Fatal(err)
	}
	type msg struct{ topic, payload string }
	got := make(chan msg, 10)
	if err := conn.Subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		got <- msg{topic, string(payload)}
	}); err != nil {
		t.Fatal(err)
	}

	d := mustDial(t, url, dev1)
	d.mustSubscribe(desired1)
	if m := d.expect(desired1, `{"generation":7}`); !m.Retained {
		t.Error("not retained")
	}
	d.publish(topics.Device(dev1.Name, schema.TopicStatus), 1, true, `{"observedGeneration":7}`)
	select {
	case m := <-got:
		if m.topic != topics.Device(dev1.Name, schema.TopicStatus) || m.payload != `{"observedGeneration":7}` {
			t.Fatalf("got %v", m)
		}
	case <-time.After(waitTimeout):
		t.Fatal("status not delivered to the inline subscriber")
	}

	// An empty retained payload clears the desired state.
	if err := conn.Publish(ctx, desired1, nil, true); err != nil {
		t.Fatal(err)
	}
	d.expect(desired1, "")
	d2 := mustDial(t, url, dev1)
	d2.mustSubscribe(desired1)
	if err := conn.Publish(ctx, desired1, []byte("after"), false); err != nil {
		t.Fatal(err)
	}
	d2.expect(desired1, "after") // no retained message came first

	for _, bad := range []string{"", "fleet/v1/devices/+/desired", "a/#"} {
		if err := conn.Publish(ctx, bad, nil, false); !errors.Is(err, broker.ErrInvalidTopic) {
			t.Errorf("Publish(%q) = %v, want ErrInvalidTopic", bad, err)
		}
	}
	if err := conn.Publish(ctx, desired1, make([]byte, broker.DefaultMaxPacketSize), false); !errors.Is(err, broker.ErrTooLarge) {
		t.Errorf("oversized Publish = %v, want ErrTooLarge", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, desired1, nil, true); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestBrokerSubscribeHandlerMayPublish(t *testing.T) {
	b, _ := startBroker(t)
	// A handler that publishes to a topic its own subscription matches
	// must not deadlock the broker.
	got := make(chan string, 10)
	var unsubscribe func()
	unsubscribe, err := b.Subscribe("loop/#", func(topic string, payload []byte) {
		got <- topic
		if topic == "loop/a" {
			if err := b.Publish("loop/b", payload, false); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	if err := b.Publish("loop/a", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"loop/a", "loop/b"} {
		select {
		case topic := <-got:
			if topic != want {
				t.Fatalf("got %q, want %q", topic, want)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("no %q", want)
		}
	}
}

func TestNewRequiresAuth(t *testing.T) {
	if _, err := broker.New(broker.Options{Addr: "127.0.0.1:0"}); err == nil {
		t.Fatal("New without Auth succeeded")
	}
}

func TestCloseWithoutRun(t *testing.T) {
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Auth: broker.NewStaticAuth(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr().String()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Run(context.Background()); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	// The port is free again.
	b2, err := broker.New(broker.Options{Addr: addr, Auth: broker.NewStaticAuth(), Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("rebind %s: %v", addr, err)
	}
	b2.Close()
}

// Close ends every client's connection (several at a time), the devices'
// and the hub's inline client aside.
func TestCloseDisconnectsEveryClient(t *testing.T) {
	b, _ := startBroker(t)
	url := brokerURL(b)
	var clients []*client
	for range 10 {
		clients = append(clients, mustDial(t, url, dev1), mustDial(t, url, dev2))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		c.awaitLost()
	}
	if _, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{}); err == nil {
		t.Fatal("connected to a closed broker")
	}
}

// TestEmbeddedPacketsLargerThanReadBuffer: a connection's read buffer is
// small (clientReadBufferSize); packets of every size around it and far
// beyond it arrive whole and in order, back to back on one connection.
func TestEmbeddedPacketsLargerThanReadBuffer(t *testing.T) {
	b, _ := startBroker(t)
	ctx := ctxTimeout(t)
	conn := b.InlineConn()
	t.Cleanup(func() { conn.Close() })
	got := make(chan string, 100)
	if err := conn.Subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), func(_ string, payload []byte) {
		got <- string(payload)
	}); err != nil {
		t.Fatal(err)
	}
	d := mustDial(t, brokerURL(b), dev1)
	status := topics.Device(dev1.Name, schema.TopicStatus)
	sizes := []int{1, 300, 500, 511, 512, 513, 1000, 2048, 5000, 64 << 10, broker.DefaultMaxPacketSize - 1024}
	var want []string
	for i, n := range sizes {
		// Distinct bytes, so a shifted or spliced payload cannot pass.
		p := []byte(strings.Repeat("0123456789abcdef", n/16+1)[:n])
		p[0] = byte('A' + i)
		want = append(want, string(p))
		d.publish(status, 1, false, string(p))
	}
	for i, w := range want {
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("packet %d (%d bytes): got %d bytes starting %q", i, len(w), len(g), g[:min(len(g), 8)])
			}
		case <-time.After(waitTimeout):
			t.Fatalf("packet %d (%d bytes) not delivered", i, len(w))
		}
	}
}

// TestWildcardMonitorGetsEveryRetainedStatus: a monitoring tool that
// subscribes to every device's status receives the retained status of each
// device of a large fleet, not only the first in-flight window's worth
// (QoS 1) or outbound queue's worth (QoS 0, what mosquitto_sub, Telegraf
// and Home Assistant ask for by default), and a status that changes while
// the retained ones are being delivered is not overtaken by its old value.
func TestWildcardMonitorGetsEveryRetainedStatus(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			b, _ := startBroker(t)
			const devices = 5000 // about five times the default in-flight window
			for i := range devices {
				if err := b.Publish(topics.Device(fmt.Sprintf("pi-%04d", i), schema.TopicStatus), []byte(fmt.Sprintf(`{"device":"pi-%04d"}`, i)), true); err != nil {
					t.Fatal(err)
				}
			}
			mon, err := dial(t, brokerURL(b), monitorID.Name, passwordOf(monitorID.Name), clientOpts{buffer: 2 * devices})
			if err != nil {
				t.Fatal(err)
			}
			if code := mon.subscribeQoS(topics.DeviceFilter(schema.TopicStatus), qos); code != qos {
				t.Fatalf("SUBACK %#x, want %#x", code, qos)
			}
			got := map[string]string{} // topic → latest payload
			var changed, newer string  // a device's status replaced during the delivery
			deadline := time.After(waitTimeout)
			for len(got) < devices || (changed != "" && got[changed] != newer) {
				select {
				case m := <-mon.msgs:
					if _, dup := got[m.Topic]; dup && m.Retained {
						t.Fatalf("%s: retained status arrived twice", m.Topic)
					}
					if m.Topic == changed && got[m.Topic] == newer {
						t.Fatalf("%s: the old status %s arrived after the new one", m.Topic, m.Payload)
					}
					got[m.Topic] = m.Payload
				case <-deadline:
					t.Fatalf("the monitor received %d of %d retained statuses within %v", len(got), devices, waitTimeout)
				}
				if changed == "" && len(got) == 100 {
					// Replace the status of a device the monitor has not
					// heard of yet: its old retained value must not follow.
					for i := devices - 1; i >= 0; i-- {
						topic := topics.Device(fmt.Sprintf("pi-%04d", i), schema.TopicStatus)
						if _, ok := got[topic]; !ok {
							changed, newer = topic, fmt.Sprintf(`{"device":"pi-%04d","newer":true}`, i)
							break
						}
					}
					if err := b.Publish(changed, []byte(newer), true); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A live status after the burst still reaches it, and nothing
			// older came before it.
			live := topics.Device("pi-0000", schema.TopicStatus)
			if err := b.Publish(live, []byte(`{"device":"pi-0000","live":true}`), true); err != nil {
				t.Fatal(err)
			}
			for m := range mon.msgs {
				if m.Topic == changed {
					t.Fatalf("%s: %s arrived after the new status", m.Topic, m.Payload)
				}
				if m.Topic == live && !m.Retained {
					if m.Payload != `{"device":"pi-0000","live":true}` {
						t.Fatalf("live status: got %s", m.Payload)
					}
					break
				}
			}
		})
	}
}
