// Package mqttio holds what Fleet's MQTT clients (the edge agent's
// session, the hub's connection to an external broker) share below paho.
// It imports nothing but the standard library, so the agent can use it
// without taking in the embedded broker.
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
// piece is a system call: most of what receiving an acknowledgement costs
// a small device, and for a client receiving thousands of packets a second
// (the hub on an external broker) most of its reading. Buffered, a packet
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
