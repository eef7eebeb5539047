package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/schema"
)

func hubOptions(t testing.TB, url string) broker.ExternalOptions {
	return broker.ExternalOptions{
		URL:               url,
		Username:          hubID.Name,
		Password:          passwordOf(hubID.Name),
		ClientID:          "fleet-hub",
		Logger:            testLogger(t),
		MinReconnectDelay: 20 * time.Millisecond,
		MaxReconnectDelay: 200 * time.Millisecond,
	}
}

func dialHub(t testing.TB, opts broker.ExternalOptions) broker.Conn {
	t.Helper()
	conn, err := broker.DialExternal(ctxTimeout(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func await[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %v", what, waitTimeout)
		var zero T
		return zero
	}
}

type delivery struct{ topic, payload string }

// testHubConn drives a hub Conn through what the hub does with it, including
// a reconnect (made by reconnect) after which subscriptions and OnConnect
// republishing must resume.
func testHubConn(t *testing.T, url string, conn broker.Conn, reconnect func()) {
	ctx := ctxTimeout(t)
	desired1 := topics.Device(dev1.Name, schema.TopicDesired)
	status1 := topics.Device(dev1.Name, schema.TopicStatus)
	var generation atomic.Value
	generation.Store("1")
	connects := make(chan struct{}, 10)
	conn.OnConnect(func() {
		// What the hub does: republish all desired state.
		if err := conn.Publish(ctx, desired1, []byte(generation.Load().(string)), true); err != nil {
			t.Errorf("republish: %v", err)
		}
		connects <- struct{}{}
	})
	await(t, "OnConnect on an open connection", connects)

	got := make(chan delivery, 100)
	if err := conn.Subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		got <- delivery{topic, string(payload)}
	}); err != nil {
		t.Fatal(err)
	}
	d := mustDial(t, url, dev1)
	d.mustSubscribe(desired1)
	d.expect(desired1, "1")
	d.publish(status1, 1, false, "status-a")
	if g := await(t, "status", got); g != (delivery{status1, "status-a"}) {
		t.Fatalf("got %v", g)
	}

	generation.Store("2") // read by the OnConnect callback after the reconnect
	reconnect()
	await(t, "OnConnect after reconnect", connects)
	d = mustDial(t, url, dev1)
	d.mustSubscribe(desired1)
	d.expect(desired1, "2")
	d.publish(status1, 1, false, "status-b")
	for {
		// A retained or queued copy of status-a may come first.
		g := await(t, "status after reconnect", got)
		if g == (delivery{status1, "status-b"}) {
			break
		}
		if g != (delivery{status1, "status-a"}) {
			t.Fatalf("got %v", g)
		}
	}

	if err := conn.Subscribe(ctx, "bad/#/filter", func(string, []byte) {}); !errors.Is(err, broker.ErrInvalidTopic) {
		t.Errorf("Subscribe(bad filter) = %v", err)
	}
	if err := conn.Publish(ctx, "a/+", nil, false); !errors.Is(err, broker.ErrInvalidTopic) {
		t.Errorf("Publish(wildcard) = %v", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(ctx, desired1, nil, true); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestExternalConnEmbedded(t *testing.T) {
	b, _ := startBroker(t)
	url := brokerURL(b)
	conn := dialHub(t, hubOptions(t, url))
	testHubConn(t, url, conn, func() {
		if n := b.Kick(hubID.Name); n != 1 {
			t.Fatalf("Kick(hub) = %d", n)
		}
	})
}

func TestExternalConnMosquitto(t *testing.T) {
	m := mosquittotest.Start(t, mosquittotest.Config{Topics: topics, Accounts: testAccounts()})
	conn := dialHub(t, hubOptions(t, m.URL))
	testHubConn(t, m.URL, conn, func() { m.Restart(t) })
}

func TestExternalConnTLS(t *testing.T) {
	cert := mqttiotest.SelfSigned(t)
	auth := broker.NewStaticAuth()
	auth.Set(hubID, passwordOf(hubID.Name))
	b := brokertest.Start(t, broker.Options{
		Addr:      "127.0.0.1:0",
		TLSAddr:   "127.0.0.1:0",
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12},
		Auth:      auth,
		Logger:    testLogger(t),
	})

	caFile, _ := cert.WriteFiles(t, t.TempDir(), "ca")
	opts := hubOptions(t, "ssl://"+b.TLSAddr().String())
	opts.CAFile = caFile
	conn := dialHub(t, opts)
	got := make(chan delivery, 1)
	if err := conn.Subscribe(t.Context(), "x/y", func(topic string, p []byte) { got <- delivery{topic, string(p)} }); err != nil {
		t.Fatal(err)
	}
	if err := conn.Publish(t.Context(), "x/y", []byte("over tls"), false); err != nil {
		t.Fatal(err)
	}
	if g := await(t, "own message over TLS", got); g != (delivery{"x/y", "over tls"}) {
		t.Fatalf("got %v", g)
	}

	// Without the CA the certificate is refused.
	opts.CAFile = ""
	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	if c, err := broker.DialExternal(dctx, opts); err == nil {
		c.Close()
		t.Fatal("connected to an untrusted certificate")
	}
}

func TestDialExternalRefusedCredentials(t *testing.T) {
	b, _ := startBroker(t)
	opts := hubOptions(t, brokerURL(b))
	opts.Password = "wrong"
	start := time.Now()
	_, err := broker.DialExternal(ctxTimeout(t), opts)
	if !errors.Is(err, broker.ErrNotAuthorized) {
		t.Fatalf("DialExternal = %v, want ErrNotAuthorized", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused credentials retried for %v", d)
	}
}

func TestDialExternalBadOptions(t *testing.T) {
	for _, o := range []broker.ExternalOptions{
		{URL: "http://127.0.0.1:1883", Username: "u"},
		{URL: "tcp://", Username: "u"},
		{URL: "tcp://127.0.0.1:1883", Username: "u", CAFile: "/nonexistent"},
		{URL: "ssl://127.0.0.1:8883", Username: "u", CAFile: "/nonexistent"},
		{URL: "tcp://127.0.0.1:1883"}, // no client ID
	} {
		if c, err := broker.DialExternal(t.Context(), o); err == nil {
			c.Close()
			t.Errorf("DialExternal(%+v) succeeded", o)
		}
	}
}

// TestDialExternalRetriesUntilCtx: an unreachable broker is retried until
// the context ends.
func TestDialExternalRetriesUntilCtx(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = broker.DialExternal(ctx, hubOptions(t, "tcp://"+addr))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DialExternal = %v, want DeadlineExceeded", err)
	}
}

// TestExternalPublishWhileDown: Publish fails fast with ErrNotConnected while
// the broker is away, and Close does not hang in the reconnect loop.
func TestExternalPublishWhileDown(t *testing.T) {
	b, _ := startBroker(t)
	conn := dialHub(t, hubOptions(t, brokerURL(b)))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		// A publish caught in flight by the loss waits for the session to
		// resume, bounded by its ctx; later ones fail fast.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := conn.Publish(ctx, "a/b", []byte("x"), false)
		cancel()
		if errors.Is(err, broker.ErrNotConnected) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish with the broker down = %v, want ErrNotConnected", err)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	if err := await(t, "Close", closed); err != nil {
		t.Fatal(err)
	}
}

// TestExternalPublishBoundedInflight uses a fake broker that accepts the
// connection but never acknowledges a PUBLISH: Publish returns when its ctx
// ends, and once MaxInflight publishes are outstanding the next one waits
// for a slot rather than piling up.
func TestExternalPublishBoundedInflight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	publishes := make(chan struct{}, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					p, err := packets.ReadPacket(c)
					if err != nil {
						return
					}
					switch p.(type) {
					case *packets.ConnectPacket:
						ack := packets.NewControlPacket(packets.Connack).(*packets.ConnackPacket)
						if ack.Write(c) != nil {
							return
						}
					case *packets.PingreqPacket:
						if packets.NewControlPacket(packets.Pingresp).Write(c) != nil {
							return
						}
					case *packets.PublishPacket:
						publishes <- struct{}{}
					}
				}
			}()
		}
	}()
	opts := hubOptions(t, "tcp://"+l.Addr().String())
	opts.MaxInflight = 2
	conn := dialHub(t, opts)
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := conn.Publish(ctx, "a/b", []byte("x"), false)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish %d = %v, want DeadlineExceeded", i, err)
		}
		await(t, "PUBLISH at the fake broker", publishes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = conn.Publish(ctx, "a/b", []byte("x"), false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third publish = %v, want DeadlineExceeded", err)
	}
	select {
	case <-publishes:
		t.Fatal("a third PUBLISH was sent past MaxInflight")
	default:
	}
}
