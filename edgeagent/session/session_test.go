package session

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	pahopackets "github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/schema"
)

// recordingClock is a fake clock that reports every timer's duration.
type recordingClock struct {
	*clock.Fake
	d chan time.Duration
}

func (c recordingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Fake.NewTimer(d) // armed before the test hears of it and advances
	c.d <- d
	return t
}

// TestReconnectBackoffIsJitteredAndCapped drives the reconnect loop
// against a closed port with a fake clock and checks each wait.
func TestReconnectBackoffIsJitteredAndCapped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	clk := recordingClock{clock.NewFake(time.Unix(0, 0)), make(chan time.Duration)}
	s, err := New(Options{Broker: "tcp://" + addr, Device: "pi-1", Clock: clk, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var waits []time.Duration
	for i := 0; i < 16; i++ { // the window reaches the 60 s cap at the 14th
		d := <-clk.d
		waits = append(waits, d)
		clk.Advance(d)
	}
	cancel()
	for stopped := false; !stopped; {
		select {
		case <-clk.d: // a timer armed before the session saw the cancel
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			stopped = true
		}
	}
	// DefaultBackoff: full jitter, retry i within [0, 250 ms·1.5ⁱ],
	// capped at 60 s.
	base := 250 * time.Millisecond
	window := func(i int) time.Duration {
		return min(time.Duration(float64(base)*math.Pow(1.5, float64(i))), time.Minute)
	}
	for i, d := range waits {
		want := window(i)
		if d < 0 || d > want {
			t.Errorf("wait %d = %s, want in [0, %s]", i, d, want)
		}
	}
	if waits[0] > 250*time.Millisecond || waits[2] > 570*time.Millisecond {
		t.Errorf("first retries too late: %v", waits[:3])
	}
	// Full jitter reaches below the old half-jitter floor at least once.
	low := false
	for i, d := range waits {
		if d < window(i)/2 {
			low = true
		}
	}
	if !low {
		t.Errorf("waits %v never below half the window: not full jitter", waits)
	}
	distinct := map[time.Duration]bool{}
	for _, d := range waits {
		distinct[d] = true
	}
	if len(distinct) < 8 {
		t.Errorf("waits %v look unjittered", waits)
	}
}

func TestShutdownDuringHungConnectIsPrompt(t *testing.T) {
	// A "broker" that accepts TCP and never answers CONNECT.
	addr, accepted := acceptOne(t)
	s, err := New(Options{Broker: "tcp://" + addr, Device: "pi-1", ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c := <-accepted
	defer c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return while the broker hung the handshake")
	}
}

// denyHook lets everyone connect and refuses subscriptions.
type denyHook struct {
	mqtt.HookBase
	mu   sync.Mutex
	subs int
}

func (h *denyHook) ID() string { return "deny-subscribe" }
func (h *denyHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}
func (h *denyHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (h *denyHook) OnACLCheck(_ *mqtt.Client, topic string, write bool) bool {
	if !write {
		h.mu.Lock()
		h.subs++
		h.mu.Unlock()
		return false
	}
	return true
}

func TestRefusedSubscriptionIsNotAConnection(t *testing.T) {
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler)})
	hook := &denyHook{}
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := broker.NewListener("t", ln, nil, 10*time.Second)
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var connects int
	var mu sync.Mutex
	s, err := New(Options{
		Broker: "tcp://" + l.Address(), Device: "pi-1",
		Backoff:   backoff.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		OnConnect: func() { mu.Lock(); connects++; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		hook.mu.Lock()
		n := hook.subs
		hook.mu.Unlock()
		if n >= 3 {
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatal("no resubscribe attempts after a refused subscription")
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if connects != 0 || s.Connected() {
		t.Fatalf("a session whose subscription was refused counted as connected (%d)", connects)
	}
	err = s.Publish(context.Background(), "fleet/v1/devices/pi-1/status", true, []byte("{}"))
	if !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Publish offline = %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []Options{{Broker: "tcp://h", Device: ""}, {Broker: "ftp://h", Device: "pi"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	s, _ := New(Options{Broker: "tcp://h", Device: "pi-1"})
	if s.desiredTopic != (schema.Topics{}).Device("pi-1", schema.TopicDesired) {
		t.Errorf("desired topic %s", s.desiredTopic)
	}
}

// TestOpenBuffersReads: open wraps the connection in a read buffer, so
// that paho's byte-at-a-time reads of a burst of packets are served from
// memory: once the first of ten acknowledgements is read, the other nine
// are already buffered.
func TestOpenBuffersReads(t *testing.T) {
	addr, accepted := acceptOne(t)
	s, err := New(Options{Broker: "tcp://" + addr, Device: "d1", ClientID: "d1-x", Token: "t", OnDesired: func([]byte) {}, OnConnect: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.open(t.Context(), t.Context(), s.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	server := <-accepted
	defer server.Close()
	if _, ok := mqttio.Buffered(conn); !ok {
		t.Fatalf("open returned %T, not a buffered connection", conn)
	}

	var burst bytes.Buffer
	for i := range 10 {
		ack := pahopackets.NewControlPacket(pahopackets.Puback).(*pahopackets.PubackPacket)
		ack.MessageID = uint16(100 + i)
		if err := ack.Write(&burst); err != nil {
			t.Fatal(err)
		}
	}
	ackSize := burst.Len() / 10
	if _, err := server.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		cp, err := pahopackets.ReadPacket(conn)
		if err != nil {
			t.Fatal(err)
		}
		if ack, ok := cp.(*pahopackets.PubackPacket); !ok || ack.MessageID != uint16(100+i) {
			t.Fatalf("ack %d: got %v", i, cp)
		}
		if n, _ := mqttio.Buffered(conn); i == 0 && n != 9*ackSize {
			t.Errorf("after the first acknowledgement %d bytes are buffered, want the other nine (%d)", n, 9*ackSize)
		}
	}
}

// acceptOne listens on a free local port until the test ends and sends
// the first connection it accepts.
func acceptOne(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	return ln.Addr().String(), accepted
}

// TestStatusDoesNotWaitForOnlineAck: after subscribing, the session
// announces "online" and runs OnConnect without waiting for the
// announcement's acknowledgement, so the status OnConnect publishes
// reaches the broker one round trip sooner, and after "online". A scripted
// broker withholds that acknowledgement until the status has arrived.
func TestStatusDoesNotWaitForOnlineAck(t *testing.T) {
	addr, accepted := acceptOne(t)
	var topics schema.Topics
	statusTopic := topics.Device("pi-1", schema.TopicStatus)
	var s *Session
	s, err := New(Options{
		Broker: "tcp://" + addr, Device: "pi-1", Token: "t", Topics: topics,
		OnDesired: func([]byte) {},
		OnConnect: func() {
			go func() { _ = s.Publish(t.Context(), statusTopic, true, []byte(`{"device":"pi-1"}`)) }()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not connect")
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	write := func(p pahopackets.ControlPacket) {
		t.Helper()
		if err := p.Write(conn); err != nil {
			t.Fatal(err)
		}
	}
	read := func() pahopackets.ControlPacket {
		t.Helper()
		p, err := pahopackets.ReadPacket(conn)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return p
	}
	if _, ok := read().(*pahopackets.ConnectPacket); !ok {
		t.Fatal("first packet is not CONNECT")
	}
	write(pahopackets.NewControlPacket(pahopackets.Connack))
	sub, ok := read().(*pahopackets.SubscribePacket)
	if !ok {
		t.Fatal("second packet is not SUBSCRIBE")
	}
	suback := pahopackets.NewControlPacket(pahopackets.Suback).(*pahopackets.SubackPacket)
	suback.MessageID, suback.ReturnCodes = sub.MessageID, []byte{1}
	write(suback)

	// The publishes, in order, with no acknowledgement sent yet.
	var got []string
	var ids []uint16
	for len(got) < 2 {
		p, ok := read().(*pahopackets.PublishPacket)
		if !ok {
			continue // a ping, if the machine is very slow
		}
		got = append(got, p.TopicName)
		ids = append(ids, p.MessageID)
	}
	want := []string{topics.Device("pi-1", schema.TopicOnline), statusTopic}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("publishes before any acknowledgement: %q, want %q", got, want)
	}
	for _, id := range ids {
		ack := pahopackets.NewControlPacket(pahopackets.Puback).(*pahopackets.PubackPacket)
		ack.MessageID = id
		write(ack)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("the session is not connected once its announcement was acknowledged")
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
}

// TestRequestsTopicDelivered: with OnRequest set, the session subscribes
// to the device's requests topic on connect, and only that topic's
// payloads reach OnRequest.
func TestRequestsTopicDelivered(t *testing.T) {
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler), InlineClient: true})
	if err := srv.AddHook(&allowHook{}, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := broker.NewListener("t", ln, nil, 10*time.Second)
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	got := make(chan string, 4)
	s, err := New(Options{
		Broker: "tcp://" + l.Address(), Device: "pi-1",
		OnDesired: func(p []byte) { got <- "desired " + string(p) },
		OnRequest: func(p []byte) { got <- "request " + string(p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("session did not connect")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	for _, m := range []struct{ topic, payload string }{
		{"fleet/v1/devices/pi-2/requests", "other"},
		{"fleet/v1/devices/pi-1/requests", "mine"},
	} {
		if err := srv.Publish(m.topic, []byte(m.payload), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case g := <-got:
		if g != "request mine" {
			t.Fatalf("delivered %q, want the device's own request", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("request not delivered")
	}
}

// allowHook lets everyone connect, publish and subscribe.
type allowHook struct{ mqtt.HookBase }

func (h *allowHook) ID() string { return "allow" }
func (h *allowHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}
func (h *allowHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (h *allowHook) OnACLCheck(*mqtt.Client, string, bool) bool              { return true }
