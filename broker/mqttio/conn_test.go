package mqttio

import (
	"bytes"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/schema"
)

// countingConn counts the reads that reach the connection.
type countingConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// TestBufferedConnReadsPacketsWhole: paho's reader asks for every packet
// in three or more pieces; through BufferedConn a packet that fits the
// buffer costs one read of the connection, and packets larger than the
// buffer still arrive whole and in order.
func TestBufferedConnReadsPacketsWhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer server.Close()

	counted := &countingConn{Conn: client}
	conn := BufferedConn(counted, 0)

	payloads := [][]byte{
		[]byte("small"),
		bytes.Repeat([]byte("x"), DefaultReadBufferSize-100),
		bytes.Repeat([]byte("y"), 3*DefaultReadBufferSize+17),
		{},
	}
	for i, pl := range payloads {
		pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		pub.TopicName = "fleet/v1/devices/d1/desired"
		pub.Qos = 1
		pub.MessageID = uint16(i + 1)
		pub.Payload = pl
		var buf bytes.Buffer
		if err := pub.Write(&buf); err != nil {
			t.Fatal(err)
		}
		// Write the packet, and wait until all of it is readable, so
		// that a single read can take it.
		if _, err := server.Write(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		before := counted.reads.Load()
		cp, err := packets.ReadPacket(conn)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		got, ok := cp.(*packets.PublishPacket)
		if !ok || got.MessageID != uint16(i+1) || !bytes.Equal(got.Payload, pl) || got.TopicName != pub.TopicName {
			t.Fatalf("packet %d: got %v, want message %d with a %d-byte payload", i, cp, i+1, len(pl))
		}
		reads := counted.reads.Load() - before
		if buf.Len() <= DefaultReadBufferSize && reads > 2 {
			// One read when the whole packet has arrived, two when the
			// first takes only part of it.
			t.Errorf("packet %d (%d bytes): %d reads of the connection, want at most 2", i, buf.Len(), reads)
		}
	}
	// Several small packets written at once cost one read between them.
	var burst []byte
	for i := range 10 {
		burst = append(burst, 0x40, 2, 0, byte(100+i)) // PUBACK, message ID 100+i
	}
	if _, err := server.Write(burst); err != nil {
		t.Fatal(err)
	}
	before := counted.reads.Load()
	for i := range 10 {
		cp, err := packets.ReadPacket(conn)
		if err != nil {
			t.Fatal(err)
		}
		if ack, ok := cp.(*packets.PubackPacket); !ok || ack.MessageID != uint16(100+i) {
			t.Fatalf("ack %d: got %v", i, cp)
		}
	}
	if reads := counted.reads.Load() - before; reads > 10 {
		t.Errorf("10 acknowledgements took %d reads of the connection, want fewer than one each", reads)
	}
}

// TestDial dials plain and TLS listeners by URL: TLS for the TLS schemes,
// trusting the given roots and checking the broker's name.
func TestDial(t *testing.T) {
	dir := t.TempDir()
	cert := mqttiotest.SelfSigned(t)
	caFile, _ := cert.WriteFiles(t, dir, "ca")
	trusted, err := TLSConfig(nil, caFile)
	if err != nil {
		t.Fatal(err)
	}
	plain := listen(t, nil)
	secure := listen(t, &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12})
	tests := []struct {
		url    string
		cfg    *tls.Config
		wantOK bool
	}{
		{"tcp://" + plain, nil, true},
		{"ssl://" + secure, trusted, true},
		{"mqtts://" + secure, trusted, true},
		{"ssl://" + secure, nil, false}, // system roots do not know the test CA
	}
	for _, tt := range tests {
		u, err := schema.ParseBrokerURL(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := Dial(t.Context(), u, tt.cfg, 5*time.Second)
		if err == nil {
			if tc, ok := conn.(*tls.Conn); ok {
				err = tc.HandshakeContext(t.Context())
			}
			conn.Close()
		}
		if (err == nil) != tt.wantOK {
			t.Errorf("Dial(%s) err = %v, want ok=%v", tt.url, err, tt.wantOK)
		}
	}
}

// listen accepts connections (over TLS with cfg, if set) until the test
// ends, completing TLS handshakes, and returns its address.
func listen(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	var ln net.Listener
	var err error
	if cfg != nil {
		ln, err = tls.Listen("tcp", "127.0.0.1:0", cfg)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if tc, ok := c.(*tls.Conn); ok {
					_ = tc.Handshake() // a failed handshake is the client's test
				}
				_, _ = c.Read(make([]byte, 1)) // until the client closes
			}()
		}
	}()
	return ln.Addr().String()
}
