package broker

import (
	"context"
	"testing"
	"time"
	"unsafe"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/schema"
)

// TestRetainedPayloadShared: a device's retained status reaches the hub's
// inline handler as the broker's own retained copy (one buffer, not two),
// and a non-retained message as a copy.
func TestRetainedPayloadShared(t *testing.T) {
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
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var topics schema.Topics
	status := topics.Device(dev.Name, schema.TopicStatus)
	events := topics.Device(dev.Name, schema.TopicEvents)
	got := make(chan []byte, 2)
	conn := b.InlineConn()
	defer conn.Close()
	for _, f := range []string{status, events} {
		if err := conn.Subscribe(ctx, f, func(_ string, p []byte) { got <- p }); err != nil {
			t.Fatal(err)
		}
	}
	o := paho.NewClientOptions().AddBroker("tcp://" + b.Addr().String()).
		SetClientID(dev.Name).SetUsername(dev.Name).SetPassword("token-1").SetAutoReconnect(false)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	receive := func(topic string, retained bool) []byte {
		t.Helper()
		if tok := c.Publish(topic, 1, retained, `{"device":"pi-1"}`); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
		select {
		case p := <-got:
			if string(p) != `{"device":"pi-1"}` {
				t.Fatalf("%s: handler got %q", topic, p)
			}
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler got nothing", topic)
		}
		return nil
	}
	p := receive(status, true)
	r, ok := b.server.Topics.Retained.Get(status)
	if !ok {
		t.Fatal("no retained status")
	}
	if unsafe.SliceData(p) != unsafe.SliceData(r.Payload) {
		t.Error("the handler's retained payload is a copy of the broker's, want the same buffer")
	}
	if cap(p) != len(p) {
		t.Errorf("shared payload has cap %d > len %d: an append by the handler could write into the broker's copy", cap(p), len(p))
	}
	q := receive(events, false)
	if unsafe.SliceData(q) == unsafe.SliceData(p) {
		t.Error("a non-retained payload shares a buffer")
	}
}

// TestRetainedTopicOwnsItsBytes: the topic name of a network client's
// retained publish leaves OnPublish with bytes of its own, not the packet
// mochi read, which the retained copy would otherwise keep alive whole
// beside its copy of the payload.
func TestRetainedTopicOwnsItsBytes(t *testing.T) {
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: NewStaticAuth(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := &hook{b: b}
	read := []byte("fleet/v1/devices/pi-1/status{\"device\":\"pi-1\"}")
	topic := unsafe.String(&read[0], len("fleet/v1/devices/pi-1/status"))
	cl := b.server.NewClient(nil, "tcp", "pi-1", false)
	for _, retain := range []bool{true, false} {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: retain}, TopicName: topic, Payload: read[len(topic):]}
		out, err := h.OnPublish(cl, pk)
		if err != nil || out.TopicName != topic {
			t.Fatalf("OnPublish: %q, %v", out.TopicName, err)
		}
		inRead := unsafe.StringData(out.TopicName) == &read[0]
		if retain && inRead {
			t.Error("a retained publish keeps its topic name in the read buffer")
		}
		if !retain && !inRead {
			t.Error("a live publish's topic name was copied: an allocation for nothing")
		}
	}
}
