package broker_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/schema"
)

// rawSession is an MQTT connection spoken byte by byte, to see exactly
// what the broker sends.
type rawSession struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// rawConnect connects as id with the given protocol version (4: 3.1.1,
// 5) and reads the CONNACK, which must accept.
func rawConnect(t *testing.T, addr string, id broker.Identity, version byte, clientID string) *rawSession {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	s := &rawSession{t: t, conn: conn, r: bufio.NewReader(conn)}
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: version,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30,
			ClientIdentifier: clientID,
			UsernameFlag:     true, Username: []byte(id.Name),
			PasswordFlag: true, Password: []byte(passwordOf(id.Name)),
		},
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	s.write(buf.Bytes())
	typ, body, err := s.read()
	if err != nil || typ != packets.Connack || len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNACK: type %d body %x err %v, want an accepting CONNACK", typ, body, err)
	}
	return s
}

func (s *rawSession) write(b []byte) {
	s.t.Helper()
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

// read returns the next packet's type and body.
func (s *rawSession) read() (byte, []byte, error) {
	b, err := s.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	var fh packets.FixedHeader
	if err := fh.Decode(b); err != nil {
		return 0, nil, err
	}
	n, _, err := packets.DecodeLength(s.r)
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(s.r, body); err != nil {
		return 0, nil, err
	}
	return fh.Type, body, nil
}

// publishQoS1 publishes payload at QoS 1 with packet ID 1.
func (s *rawSession) publishQoS1(version byte, topic, payload string) {
	s.t.Helper()
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: 1},
		ProtocolVersion: version,
		TopicName:       topic,
		PacketID:        1,
		Payload:         []byte(payload),
	}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		s.t.Fatal(err)
	}
	s.write(buf.Bytes())
}

// untilClosed reads until the broker closes the connection and returns the
// types of the packets it sent before.
func (s *rawSession) untilClosed() []byte {
	s.t.Helper()
	var got []byte
	for {
		typ, _, err := s.read()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return got
		}
		if err != nil {
			s.t.Fatalf("waiting for the broker to close: %v (packets so far %v)", err, got)
		}
		got = append(got, typ)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// TestNoServerDisconnectToMQTT311: MQTT 3.1.1 defines no DISCONNECT from
// the server (§3.14), so a 3.1.1 client the broker disconnects (a refused
// QoS 1 publish, a session taken over, a cut-off) sees its connection
// closed and no packet; an MQTT 5 client whose session is taken over is
// told so with a DISCONNECT.
func TestNoServerDisconnectToMQTT311(t *testing.T) {
	auth := broker.NewStaticAuth()
	for _, a := range testAccounts() {
		auth.Set(a.Identity, a.Password)
	}
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Topics: topics, Logger: testLogger(t)})
	addr := b.Addr().String()
	foreign := topics.Device(dev2.Name, schema.TopicStatus)

	t.Run("refused publish, 3.1.1", func(t *testing.T) {
		s := rawConnect(t, addr, dev1, 4, dev1.Name)
		s.publishQoS1(4, foreign, "{}")
		if got := s.untilClosed(); len(got) != 0 {
			t.Errorf("3.1.1 client got packets %v before the close, want none (no DISCONNECT in 3.1.1)", got)
		}
	})
	t.Run("session taken over, 3.1.1", func(t *testing.T) {
		old := rawConnect(t, addr, dev1, 4, "pi-1-00000000000000aa")
		rawConnect(t, addr, dev1, 4, "pi-1-00000000000000aa")
		if got := old.untilClosed(); len(got) != 0 {
			t.Errorf("3.1.1 client got packets %v before the close, want none", got)
		}
	})
	t.Run("session taken over, 5", func(t *testing.T) {
		old := rawConnect(t, addr, dev1, 5, dev1.Name)
		rawConnect(t, addr, dev1, 5, dev1.Name)
		got := old.untilClosed()
		if len(got) == 0 || got[len(got)-1] != packets.Disconnect {
			t.Errorf("MQTT 5 client got packets %v, want a DISCONNECT last", got)
		}
	})
}
