package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/schema"
)

var discard = slog.New(slog.DiscardHandler)

func TestNewCapabilities(t *testing.T) {
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: NewStaticAuth(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	caps := b.server.Options.Capabilities
	// Retained desired state must never expire (mochi's default is 24 h).
	if caps.MaximumMessageExpiryInterval != 0 {
		t.Errorf("MaximumMessageExpiryInterval = %d, want 0", caps.MaximumMessageExpiryInterval)
	}
	if caps.MaximumClientWritesPending != DefaultMaxClientWritesPending {
		t.Errorf("MaximumClientWritesPending = %d, want %d", caps.MaximumClientWritesPending, DefaultMaxClientWritesPending)
	}
	if caps.MaximumPacketSize != DefaultMaxPacketSize {
		t.Errorf("MaximumPacketSize = %d, want %d", caps.MaximumPacketSize, DefaultMaxPacketSize)
	}
	if caps.TopicAliasMaximum != 0 {
		t.Errorf("TopicAliasMaximum = %d, want 0", caps.TopicAliasMaximum)
	}
	if caps.MaximumSessionExpiryInterval != uint32(DefaultSessionExpiry/time.Second) {
		t.Errorf("MaximumSessionExpiryInterval = %d", caps.MaximumSessionExpiryInterval)
	}
	if !b.server.Options.InlineClient {
		t.Error("inline client disabled")
	}
}

// TestCloseDropsWills: a will is published when a client is kicked while
// the broker runs, and not when the broker's own Close disconnects it.
// mochi calls inline handlers synchronously and Close waits for every
// connection handler, so once Close returns no will can still come.
func TestCloseDropsWills(t *testing.T) {
	auth := NewStaticAuth()
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	auth.Set(dev, "token-1")
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: auth, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	var topics schema.Topics
	online := topics.Device(dev.Name, schema.TopicOnline)
	var wills, dropped atomic.Int32
	if err := b.server.Subscribe(online, 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if string(pk.Payload) == schema.Offline {
			wills.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.server.Subscribe(droppedWillTopic, 2, func(*mqtt.Client, packets.Subscription, packets.Packet) { dropped.Add(1) }); err != nil {
		t.Fatal(err)
	}
	connect := func() paho.Client {
		t.Helper()
		o := paho.NewClientOptions().AddBroker("tcp://"+b.Addr().String()).
			SetClientID(dev.Name).SetUsername(dev.Name).SetPassword("token-1").
			SetAutoReconnect(false).SetWill(online, schema.Offline, 1, true)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		return c
	}
	connect()
	if n := b.Kick(dev.Name); n != 1 {
		t.Fatalf("Kick = %d, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for wills.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling, bounded by the deadline
	}
	if wills.Load() != 1 {
		t.Fatalf("kicked client: %d wills published, want 1", wills.Load())
	}
	connect()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := wills.Load(); n != 1 {
		t.Errorf("after Close: %d wills published, want only the kicked client's", n)
	}
	if n := dropped.Load(); n != 1 {
		t.Errorf("after Close: %d dropped wills seen on %s, want 1", n, droppedWillTopic)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestCloseEndsManyClientsWithoutWills: a stop with many clients
// connected closes every connection (on several goroutines, closeAll) and
// publishes none of their wills: the devices did not go offline, their
// broker went away (hook.go, OnWill).
func TestCloseEndsManyClientsWithoutWills(t *testing.T) {
	const n = 200
	auth := NewStaticAuth()
	for i := range n {
		auth.Set(Identity{Name: fmt.Sprintf("pi-%03d", i), Role: RoleDevice}, "token")
	}
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: auth, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- b.Run(t.Context()) }()
	var topics schema.Topics
	var wills atomic.Int32
	if err := b.server.Subscribe(topics.DeviceFilter(schema.TopicOnline), 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if string(pk.Payload) == schema.Offline {
			wills.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	lost := make(chan string, n)
	for i := range n {
		name := fmt.Sprintf("pi-%03d", i)
		o := paho.NewClientOptions().AddBroker("tcp://"+b.Addr().String()).
			SetClientID(name).SetUsername(name).SetPassword("token").
			SetAutoReconnect(false).SetWill(topics.Device(name, schema.TopicOnline), schema.Offline, 1, true).
			SetConnectionLostHandler(func(paho.Client, error) { lost <- name })
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", name, tok.Error())
		}
	}
	if got := atomic.LoadInt64(&b.server.Info.ClientsConnected); got < n {
		t.Fatalf("%d clients connected, want %d", got, n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.server.Clients.Len(); got > 1 { // the inline client may remain
		t.Errorf("after Close: %d clients left", got)
	}
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-lost:
		case <-deadline:
			t.Fatalf("only %d of %d clients saw their connection end", i, n)
		}
	}
	if w := wills.Load(); w != 0 {
		t.Errorf("Close published %d wills, want 0", w)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}
