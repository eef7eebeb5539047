package broker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/schema"
)

// rawClient is an MQTT 3.1.1 client over a bare TCP connection that
// acknowledges nothing unless told to: what paho would hide.
type rawClient struct {
	t       *testing.T
	conn    net.Conn
	r       *bufio.Reader
	version byte
}

func dialRaw(t *testing.T, addr, user, password string) *rawClient {
	t.Helper()
	return dialRawVersion(t, addr, user, password, 4, packets.Properties{})
}

// dialRawVersion connects with MQTT 3.1.1 (4) or 5, with the CONNECT
// properties given (MQTT 5).
func dialRawVersion(t *testing.T, addr, user, password string, version byte, props packets.Properties) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn), version: version}
	c.write(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Properties:  props,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60,
			ClientIdentifier: fmt.Sprintf("raw-%d", time.Now().UnixNano()),
			UsernameFlag:     true, Username: []byte(user),
			PasswordFlag: true, Password: []byte(password),
		},
	})
	if pk := c.read(); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
		t.Fatalf("CONNECT: got packet type %d, code %#x; want a CONNACK accepting it", pk.FixedHeader.Type, pk.ReasonCode)
	}
	return c
}

func (c *rawClient) write(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = c.version
	if pk.FixedHeader.Type == packets.Connect {
		pk.Connect.ProtocolName = []byte("MQTT")
	}
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Puback:
		err = pk.PubackEncode(&buf)
	default:
		err = fmt.Errorf("rawClient cannot write packet type %d", pk.FixedHeader.Type)
	}
	if err == nil {
		_, err = c.conn.Write(buf.Bytes())
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next packet, failing the test after 10 s.
func (c *rawClient) read() packets.Packet {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.r.ReadByte()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var pk packets.Packet
	pk.ProtocolVersion = c.version
	if err := pk.FixedHeader.Decode(b); err != nil {
		c.t.Fatal(err)
	}
	n, mult := 0, 1
	for {
		d, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		n += int(d&0x7f) * mult
		if d&0x80 == 0 {
			break
		}
		mult *= 128
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.t.Fatalf("read: %v", err)
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return pk
}

// startWithStatuses runs a broker (maxInflight 0: the default) holding a
// retained status for each of n devices, until the test ends, and returns
// it with a monitor identity whose password is "monitor-token".
func startWithStatuses(t *testing.T, maxInflight, n int) (*Broker, Identity) {
	t.Helper()
	auth := NewStaticAuth()
	mon := Identity{Name: "grafana", Role: RoleMonitor}
	auth.Set(mon, "monitor-token")
	b, err := New(Options{Addr: "127.0.0.1:0", Auth: auth, Logger: discard, MaxInflight: maxInflight})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var topics schema.Topics
	for i := range n {
		if err := b.Publish(topics.Device(fmt.Sprintf("pi-%03d", i), schema.TopicStatus), []byte(`{"n":1}`), true); err != nil {
			t.Fatal(err)
		}
	}
	return b, mon
}

// TestRetainedPacedByAcks: the retained messages of a wildcard
// subscription come after the SUBACK, at most half the in-flight window
// unacknowledged at a time, and the rest follow the acknowledgements;
// live messages still get through meanwhile; a subscriber that goes away
// ends the delivery.
func TestRetainedPacedByAcks(t *testing.T) {
	const inflight, devices = 64, 300
	b, mon := startWithStatuses(t, inflight, devices)
	var topics schema.Topics

	c := dialRaw(t, b.Addr().String(), mon.Name, "monitor-token")
	filter := topics.DeviceFilter(schema.TopicStatus)
	c.write(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    7,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: 1}},
	})
	if pk := c.read(); pk.FixedHeader.Type != packets.Suback || pk.PacketID != 7 || len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] != 1 {
		t.Fatalf("first packet after SUBSCRIBE: type %d id %d codes %v; want the SUBACK granting QoS 1", pk.FixedHeader.Type, pk.PacketID, pk.ReasonCodes)
	}
	seen := map[string]bool{}
	var unacked []uint16
	readRetained := func(n int) {
		t.Helper()
		for range n {
			pk := c.read()
			if pk.FixedHeader.Type != packets.Publish || !pk.FixedHeader.Retain || pk.FixedHeader.Qos != 1 {
				t.Fatalf("got packet type %d retain %v qos %d (%s); want a retained QoS 1 PUBLISH", pk.FixedHeader.Type, pk.FixedHeader.Retain, pk.FixedHeader.Qos, pk.TopicName)
			}
			if seen[pk.TopicName] {
				t.Fatalf("%s delivered twice", pk.TopicName)
			}
			seen[pk.TopicName] = true
			unacked = append(unacked, pk.PacketID)
		}
	}
	readRetained(inflight / 2)

	// The window is half full of retained messages: the pacer waits. A
	// live status still goes out, and it is the next packet.
	live := topics.Device("pi-live", schema.TopicStatus)
	if err := b.Publish(live, []byte(`{"live":true}`), false); err != nil {
		t.Fatal(err)
	}
	if pk := c.read(); pk.FixedHeader.Type != packets.Publish || pk.TopicName != live {
		t.Fatalf("after %d unacknowledged retained messages, got %q (type %d); want the live message on %s", inflight/2, pk.TopicName, pk.FixedHeader.Type, live)
	} else {
		unacked = append(unacked, pk.PacketID)
	}

	// Each acknowledgement lets one more through, until every device's
	// status has been delivered once.
	for len(seen) < devices {
		id := unacked[0]
		unacked = unacked[1:]
		c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
		if n := inflight/2 - len(unacked); n > 0 {
			readRetained(min(n, devices-len(seen)))
		}
	}
	if got := b.pacer.active.Load(); got != 0 {
		// The last message is out; the goroutine may still be returning.
		deadline := time.Now().Add(10 * time.Second)
		for b.pacer.active.Load() != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling, bounded by the deadline
		}
	}
	if got := b.pacer.active.Load(); got != 0 {
		t.Fatalf("%d deliveries still running after the last message", got)
	}

	// A subscriber that stops acknowledging and leaves ends its delivery.
	c2 := dialRaw(t, b.Addr().String(), mon.Name, "monitor-token")
	c2.write(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: 1}},
	})
	if pk := c2.read(); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("got packet type %d, want SUBACK", pk.FixedHeader.Type)
	}
	for range inflight / 2 {
		if pk := c2.read(); pk.FixedHeader.Type != packets.Publish {
			t.Fatalf("got packet type %d, want PUBLISH", pk.FixedHeader.Type)
		}
	}
	if got := b.pacer.active.Load(); got != 1 {
		t.Fatalf("%d deliveries running for a subscriber holding a full window, want 1", got)
	}
	_ = c2.conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for b.pacer.active.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling, bounded by the deadline
	}
	if got := b.pacer.active.Load(); got != 0 {
		t.Fatalf("%d deliveries still running after the subscriber left", got)
	}
	b.pacer.mu.Lock()
	left := len(b.pacer.acks) + len(b.pacer.pending) + len(b.pacer.taken)
	b.pacer.mu.Unlock()
	if left != 0 {
		t.Errorf("the pacer still holds %d entries after every subscriber left", left)
	}
}

// TestRetainedPacingHonoursReceiveMaximum: an MQTT 5 client that can take
// only 8 unacknowledged messages gets at most 4 retained ones at a time.
func TestRetainedPacingHonoursReceiveMaximum(t *testing.T) {
	const devices = 20
	b, mon := startWithStatuses(t, 0, devices)
	var topics schema.Topics
	c := dialRawVersion(t, b.Addr().String(), mon.Name, "monitor-token", 5, packets.Properties{ReceiveMaximum: 8})
	c.write(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: topics.DeviceFilter(schema.TopicStatus), Qos: 1}},
	})
	if pk := c.read(); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("got packet type %d, want SUBACK", pk.FixedHeader.Type)
	}
	var ids []uint16
	for range 4 {
		pk := c.read()
		if pk.FixedHeader.Type != packets.Publish || !pk.FixedHeader.Retain {
			t.Fatalf("got packet type %d retain %v, want a retained PUBLISH", pk.FixedHeader.Type, pk.FixedHeader.Retain)
		}
		ids = append(ids, pk.PacketID)
	}
	live := topics.Device("pi-live", schema.TopicStatus)
	if err := b.Publish(live, []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	if pk := c.read(); pk.TopicName != live {
		t.Fatalf("after 4 unacknowledged retained messages, got %q; want the live message", pk.TopicName)
	} else {
		ids = append(ids, pk.PacketID)
	}
	got := 4
	for got < devices {
		c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: ids[0]})
		ids = ids[1:]
		for 4-len(ids) > 0 && got < devices { // the live one counts too
			pk := c.read()
			if pk.FixedHeader.Type != packets.Publish || !pk.FixedHeader.Retain {
				t.Fatalf("got packet type %d, want a retained PUBLISH", pk.FixedHeader.Type)
			}
			ids = append(ids, pk.PacketID)
			got++
		}
	}
}
