package broker_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
)

// connackV5 sends an MQTT 5 CONNECT and returns the CONNACK's reason code
// and its reason string.
func connackV5(t *testing.T, addr, username, password string) (byte, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30,
			ClientIdentifier: username, UsernameFlag: true, Username: []byte(username),
			PasswordFlag: true, Password: []byte(password)},
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	b, err := r.ReadByte()
	if err != nil {
		t.Fatalf("read CONNACK: %v", err)
	}
	ack := packets.Packet{ProtocolVersion: 5}
	if err := ack.FixedHeader.Decode(b); err != nil || ack.FixedHeader.Type != packets.Connack {
		t.Fatalf("first packet %+v (%v), want CONNACK", ack.FixedHeader, err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		t.Fatal(err)
	}
	ack.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	if err := ack.ConnackDecode(body); err != nil {
		t.Fatalf("decode CONNACK: %v", err)
	}
	return ack.ReasonCode, ack.Properties.ReasonString
}

// TestStandbyRefusesNetworkClients: a broker on standby disconnects the
// clients it has (devices and monitors) and answers new ones CONNACK
// "server unavailable" (MQTT 5: 0x88 and the reason; 3.1.1: 0x03); the
// in-process client still publishes; back to active, devices connect.
func TestStandbyRefusesNetworkClients(t *testing.T) {
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t)})
	url := brokerURL(b)
	dev := mustDial(t, url, dev1)
	mon := mustDial(t, url, monitorID)
	mon.mustSubscribe(topics.DeviceFilter("online"))

	const reason = "standby hub hub-b: devices connect to the leader hub-a"
	b.SetStandby(reason)
	if got := b.Standby(); got != reason {
		t.Fatalf("Standby() = %q, want %q", got, reason)
	}
	for _, c := range []*client{dev, mon} {
		select {
		case <-c.lost:
		case <-time.After(waitTimeout):
			t.Fatalf("%s still connected to a standby broker", c.name)
		}
	}
	code, why := connackV5(t, b.Addr().String(), dev2.Name, passwordOf(dev2.Name))
	if code != packets.ErrServerUnavailable.Code || why != reason {
		t.Fatalf("MQTT 5 CONNACK on standby: %#x %q, want %#x %q", code, why, packets.ErrServerUnavailable.Code, reason)
	}
	_, err := dial(t, url, dev1.Name, passwordOf(dev1.Name), clientOpts{})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unavailable") {
		t.Fatalf("MQTT 3.1.1 connect on standby: %v, want server unavailable", err)
	}
	if err := b.Publish("fleet/test/inline", []byte("x"), false); err != nil {
		t.Fatalf("in-process publish on standby: %v", err)
	}

	b.SetStandby("")
	if got := b.Standby(); got != "" {
		t.Fatalf("Standby() after SetStandby(\"\") = %q", got)
	}
	back := mustDial(t, url, dev1)
	back.c.Disconnect(0)
}
