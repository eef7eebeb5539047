// Package mqttio holds what the hub's paho clients (its connection to an
// external broker, the scale suite's monitor) share below paho. The edge
// agent, which must not link the broker packages, has its own copy of
// BufferedConn in edgeagent/session.
package mqttio

import (
	"bufio"
	"net"
)

// DefaultReadBufferSize fits most packets of Fleet's topics: acknowledgements,
// statuses, a desired state of a few pods.
const DefaultReadBufferSize = 2048

// BufferedConn returns conn with its reads going through a buffer of size
// bytes (DefaultReadBufferSize when size ≤ 0).
//
// paho reads every packet in three or more pieces (the first byte, the
// remaining length a byte at a time, then the rest). Unbuffered, each
// piece is a system call, and a client receiving thousands of packets a
// second (the hub on an external broker) spends most of its reading on
// them. Buffered, a packet
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
