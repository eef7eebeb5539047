package session

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/schema"
)

// standbyHook plays a standby hub's broker while refusing is set: every
// CONNECT is answered with CONNACK "server unavailable" (MQTT 3.1.1 code
// 3); otherwise it lets everyone in. It counts the CONNECTs it saw.
type standbyHook struct {
	mqtt.HookBase
	srv      *mqtt.Server
	refusing atomic.Bool
	connects atomic.Int32
	refused  atomic.Int32
}

func (h *standbyHook) ID() string { return "standby" }
func (h *standbyHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnect, mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}
func (h *standbyHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	h.connects.Add(1)
	if !h.refusing.Load() {
		return nil
	}
	h.refused.Add(1)
	code := packets.ErrServerUnavailable
	if err := h.srv.SendConnack(cl, code, false, nil); err != nil {
		return err
	}
	return code
}
func (h *standbyHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (h *standbyHook) OnACLCheck(*mqtt.Client, string, bool) bool              { return true }

// startStandby runs a mochi broker with a standbyHook on loopback.
func startStandby(t *testing.T, refusing bool) (*standbyHook, string) {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler)})
	h := &standbyHook{srv: srv}
	h.refusing.Store(refusing)
	if err := srv.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := broker.NewListener("standby", ln, nil, 10*time.Second)
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return h, "tcp://" + l.Address()
}

// startFleetBroker runs Fleet's embedded broker with device pi-1 (token
// "tok"); stop closes it.
func startFleetBroker(t *testing.T) (addr string, stop func()) {
	t.Helper()
	auth := broker.NewStaticAuth()
	auth.Set(broker.Identity{Name: "pi-1", Role: broker.RoleDevice}, "tok")
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("broker: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("broker did not stop")
		}
	}
	t.Cleanup(stop)
	return "tcp://" + b.Addr().String(), stop
}

// awaitWait returns the next backoff wait the session arms, failing the
// test after a deadline; connected, if it fires first, is reported.
func awaitWait(t *testing.T, clk recordingClock) time.Duration {
	t.Helper()
	select {
	case d := <-clk.d:
		return d
	case <-time.After(15 * time.Second):
		t.Fatal("the session armed no backoff timer")
		return 0
	}
}

// awaitBroker polls until the session is connected to want.
func awaitBroker(t *testing.T, s *Session, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for s.Broker() != want {
		if time.Now().After(deadline) {
			t.Fatalf("session on %q, want %s", s.Broker(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBrokerListFailover: with brokers [standby, leader], the standby
// refuses (CONNACK server unavailable) and the session lands on the
// leader (Fleet's embedded broker) after one backoff wait within
// DefaultBackoff's first window; when that broker goes away, it moves on
// round-robin, to the first broker, which now accepts, after one more
// wait within the next window. The waits come from a fake clock: no
// sleeping through the backoff.
func TestBrokerListFailover(t *testing.T) {
	standby, first := startStandby(t, true)
	second, stopSecond := startFleetBroker(t)
	clk := recordingClock{clock.NewFake(time.Unix(0, 0)), make(chan time.Duration)}
	connects := make(chan string, 4)
	var s *Session
	s, err := New(Options{
		Brokers: []string{first, second}, Device: "pi-1", ClientID: "pi-1", Token: "tok",
		Clock: clk, Seed: 7, Topics: schema.Topics{},
		OnConnect: func() { connects <- s.brokerURL() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		for {
			select {
			case <-clk.d:
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
				return
			}
		}
	}()
	window := func(n int) time.Duration {
		return time.Duration(float64(DefaultBackoff.Initial) * math.Pow(DefaultBackoff.Factor, float64(n)))
	}

	// 1. The standby refuses; one wait, then the second broker.
	d := awaitWait(t, clk)
	if standby.refused.Load() != 1 {
		t.Fatalf("the standby saw %d refused CONNECTs before the first wait, want 1", standby.refused.Load())
	}
	if d < 0 || d > window(0) {
		t.Fatalf("first wait %s, want within [0, %s]", d, window(0))
	}
	clk.Advance(d)
	select {
	case got := <-connects:
		if got != second {
			t.Fatalf("connected to %s, want the second broker %s", got, second)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the session did not connect to the second broker")
	}
	awaitBroker(t, s, second)

	// 2. The second broker goes away; the first now accepts (it became
	// the leader): one wait, then back on the first.
	standby.refusing.Store(false)
	stopSecond()
	d = awaitWait(t, clk)
	if d < 0 || d > window(1) {
		t.Fatalf("wait after losing the second broker %s, want within [0, %s]", d, window(1))
	}
	clk.Advance(d)
	select {
	case got := <-connects:
		if got != first {
			t.Fatalf("connected to %s, want the first broker %s", got, first)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the session did not come back to the first broker")
	}
	awaitBroker(t, s, first)
	if n := standby.connects.Load(); n != 2 {
		t.Fatalf("the first broker saw %d CONNECTs, want 2 (refused, then accepted)", n)
	}
}

// TestBrokerListRoundRobinNeverGivesUp: with every broker refusing, the
// session keeps going round the list in order, one wait per attempt,
// the waits growing per DefaultBackoff whichever broker failed.
func TestBrokerListRoundRobinNeverGivesUp(t *testing.T) {
	var hooks [3]*standbyHook
	var urls []string
	for i := range hooks {
		h, u := startStandby(t, true)
		hooks[i] = h
		urls = append(urls, u)
	}
	clk := recordingClock{clock.NewFake(time.Unix(0, 0)), make(chan time.Duration)}
	s, err := New(Options{Brokers: urls, Device: "pi-1", Token: "tok", Clock: clk, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	const attempts = 9
	for n := range attempts {
		d := awaitWait(t, clk)
		max := min(time.Duration(float64(DefaultBackoff.Initial)*math.Pow(DefaultBackoff.Factor, float64(n))), DefaultBackoff.Max)
		if d < 0 || d > max {
			t.Errorf("wait %d = %s, want within [0, %s]", n, d, max)
		}
		// Attempt n went to broker n mod 3.
		for i, h := range hooks {
			want := int32(n/3 + 1)
			if i > n%3 {
				want = int32(n / 3)
			}
			if got := h.refused.Load(); got != want {
				t.Fatalf("after attempt %d broker %d refused %d times, want %d", n, i, got, want)
			}
		}
		clk.Advance(d)
	}
	cancel()
	for {
		select {
		case <-clk.d:
			continue
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		}
		break
	}
	if s.Broker() != "" {
		t.Fatalf("Broker() = %q with no connection", s.Broker())
	}
}

// TestNewBrokerListNamesTheBadEntry: a malformed URL in the list is
// refused by New, naming its position.
func TestNewBrokerListNamesTheBadEntry(t *testing.T) {
	_, err := New(Options{Brokers: []string{"tcp://a:1883", "tcp//b"}, Device: "pi-1"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("broker 2 of 2")) {
		t.Fatalf("New with a bad second broker: %v", err)
	}
	s, err := New(Options{Broker: "tcp://a", Device: "pi-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Brokers(); len(got) != 1 || got[0] != "tcp://a" {
		t.Fatalf("Brokers() = %q for Broker alone", got)
	}
}

// TestBrokerListBackoffGrowsPerRound: with brokers [dead, standby] (the
// leader just killed, the other hub not elected yet), the wait before the
// second broker of each round stays within the backoff's first delay and
// the wait after a whole round grows once per round, so the device is not
// left many seconds in backoff when the standby becomes the leader.
func TestBrokerListBackoffGrowsPerRound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + ln.Addr().String()
	ln.Close() // connection refused from now on
	standby, second := startStandby(t, true)
	clk := recordingClock{clock.NewFake(time.Unix(0, 0)), make(chan time.Duration)}
	s, err := New(Options{Brokers: []string{dead, second}, Device: "pi-1", Token: "tok", Clock: clk, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	const rounds = 10
	for k := range rounds {
		d := awaitWait(t, clk)
		if d < 0 || d > DefaultBackoff.Initial {
			t.Errorf("round %d: wait before the next broker %s, want within [0, %s]", k, d, DefaultBackoff.Initial)
		}
		clk.Advance(d)
		d = awaitWait(t, clk)
		max := min(time.Duration(float64(DefaultBackoff.Initial)*math.Pow(DefaultBackoff.Factor, float64(k))), DefaultBackoff.Max)
		if d < 0 || d > max {
			t.Errorf("round %d: wait after the round %s, want within [0, %s]", k, d, max)
		}
		clk.Advance(d)
	}
	if got := standby.refused.Load(); got != rounds {
		t.Errorf("the standby refused %d times in %d rounds", got, rounds)
	}
	// Elected: the standby accepts, and the next round reaches it.
	standby.refusing.Store(false)
	stopAdvancing := make(chan struct{})
	go func() {
		for {
			select {
			case d := <-clk.d:
				clk.Advance(d)
			case <-stopAdvancing:
				return
			}
		}
	}()
	awaitBroker(t, s, second)
	cancel()
	defer close(stopAdvancing)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
