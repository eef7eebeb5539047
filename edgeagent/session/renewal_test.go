package session

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
)

// recordHook admits everyone and records connects (with their will
// flag), subscriptions and publishes: a fake broker's view.
type recordHook struct {
	mqtt.HookBase
	mu       sync.Mutex
	connects []bool // will flag of each CONNECT
	subs     []string
	pubs     []string
}

func (h *recordHook) ID() string { return "record" }
func (h *recordHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnSubscribe, mqtt.OnPublish}, []byte{b})
}
func (h *recordHook) OnConnectAuthenticate(_ *mqtt.Client, pk packets.Packet) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connects = append(h.connects, pk.Connect.WillFlag)
	return true
}
func (h *recordHook) OnACLCheck(*mqtt.Client, string, bool) bool { return true }
func (h *recordHook) OnSubscribe(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range pk.Filters {
		h.subs = append(h.subs, f.Filter)
	}
	return pk
}
func (h *recordHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !cl.Net.Inline {
		h.mu.Lock()
		h.pubs = append(h.pubs, pk.TopicName)
		h.mu.Unlock()
	}
	return pk, nil
}

// TestRenewalOnlySession: with an expired client certificate the session
// sets no will, subscribes to the certificate topic alone, announces
// nothing, is not Connected, publishes only the csr topic, and
// Reconnect gives the normal session once the certificate is renewed.
func TestRenewalOnlySession(t *testing.T) {
	h := &recordHook{}
	srv := mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler), InlineClient: true})
	if err := srv.AddHook(h, nil); err != nil {
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

	var mu sync.Mutex
	expired := true
	renewalConnects := make(chan struct{}, 4)
	s, err := New(Options{
		Broker: "tcp://" + l.Address(), Device: "pi-1",
		OnCertificate:    func([]byte) {},
		RenewalOnly:      func() bool { mu.Lock(); defer mu.Unlock(); return expired },
		OnRenewalConnect: func() { renewalConnects <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-renewalConnects:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal-only connection")
	}
	if s.Connected() || !s.RenewalOnly() {
		t.Fatalf("renewal-only connection: Connected %v, RenewalOnly %v", s.Connected(), s.RenewalOnly())
	}
	if err := s.PublishQoS0(ctx, "fleet/v1/devices/pi-1/status", []byte("{}")); !errors.Is(err, ErrNotConnected) {
		t.Errorf("status over a renewal-only connection: %v, want ErrNotConnected", err)
	}
	if err := s.PublishQoS0(ctx, "fleet/v1/devices/pi-1/csr", []byte("{}")); err != nil {
		t.Errorf("csr over a renewal-only connection: %v", err)
	}
	mu.Lock()
	expired = false
	mu.Unlock()
	s.Reconnect()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("no normal session after Reconnect")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	if s.RenewalOnly() {
		t.Error("normal session still reported renewal-only")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.connects) < 2 || h.connects[0] || !h.connects[len(h.connects)-1] {
		t.Errorf("will flags of the connects %v: want none on the renewal-only one, one on the normal one", h.connects)
	}
	if len(h.subs) == 0 || h.subs[0] != "fleet/v1/devices/pi-1/certificate" {
		t.Errorf("subscriptions %v: the renewal-only connection must subscribe to the certificate topic first", h.subs)
	}
	if len(h.pubs) == 0 || h.pubs[0] != "fleet/v1/devices/pi-1/csr" {
		t.Errorf("publishes %v: the renewal-only connection must publish its csr alone, first", h.pubs)
	}
	for _, sub := range h.subs {
		if sub == "fleet/v1/devices/pi-1/desired" {
			return // the normal session subscribed to its desired state
		}
	}
	t.Errorf("subscriptions %v: the normal session did not subscribe to its desired state", h.subs)
}
