package mqttio

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// DefaultReadBufferSize fits most packets of Fleet's topics: acknowledgements,
// statuses, a desired state of a few pods.
const DefaultReadBufferSize = 2048

// BufferedConn returns conn with its reads going through a buffer of size
// bytes (DefaultReadBufferSize when size ≤ 0).
//
// paho reads every packet in three or more pieces (the first byte, the
// remaining length a byte at a time, then the rest). Unbuffered, each
// piece is a system call: most of what receiving an acknowledgement costs
// a small device, and most of the reading of a client receiving thousands
// of packets a second (the hub on an external broker). Buffered, a packet
// that fits costs one read, and packets that arrive together share it.
func BufferedConn(conn net.Conn, size int) net.Conn {
	if size <= 0 {
		size = DefaultReadBufferSize
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, size)}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Buffered returns how many bytes a connection from BufferedConn holds
// already read from the network, and false for any other connection.
func Buffered(conn net.Conn) (int, bool) {
	bc, ok := conn.(*bufferedConn)
	if !ok {
		return 0, false
	}
	return bc.r.Buffered(), true
}

// Dial opens the network connection to a broker URL that schema.ParseBrokerURL
// accepted: TCP, or for ssl://, tls:// and mqtts:// TLS with tlsCfg (nil:
// the system roots), verifying the broker's host name. The dial is
// abandoned when ctx is done and bounded by timeout.
func Dial(ctx context.Context, u *url.URL, tlsCfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	// No TCP keepalive: the MQTT keepalive finds a dead broker, and the
	// kernel's probes would be most of an idle device's bytes a day.
	d := &net.Dialer{Timeout: timeout, KeepAlive: -1}
	if !schema.IsTLSBroker(u) {
		return d.DialContext(ctx, "tcp", u.Host)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", u.Host)
}
