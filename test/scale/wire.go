package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// wireProxy is the bytes phase's byte counter: a TCP proxy between a
// sample of the hollow agents and the broker, in this process. It counts
// what crosses the device's side of it in both directions: the payload
// (MQTT packets, by type), and, from the kernel's TCP_INFO of each
// device-side socket, the segments, so that TCP/IP headers, ACKs and any
// TCP keepalive probe count too. Its listener, like the hub's, sends no
// TCP keepalives of its own.
type wireProxy struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	conns map[*wireConn]struct{}
	// closed accumulates the figures of connections that ended.
	closed wireCount
	wg     sync.WaitGroup
}

// wireCount is what crossed the device side of the proxy.
type wireCount struct {
	// Up: device → broker; Down: broker → device. Bytes of TCP payload.
	UpBytes, DownBytes int64
	// Segments on the device-side socket, from TCP_INFO: SegsIn counts
	// what the device sent (data, ACKs, probes), SegsOut what it got.
	SegsIn, SegsOut int64
	// Packets counts MQTT packets by type and direction ("up PUBLISH").
	Packets map[string]int64
	// Conns is how many connections were opened.
	Conns int64
}

// tcpIPHeader is the bytes of IPv4 and TCP headers on a segment with the
// timestamp option Linux uses (20 + 32).
const tcpIPHeader = 52

// wire returns the payload plus the headers of every segment, both
// directions.
func (c wireCount) wire() int64 {
	return c.UpBytes + c.DownBytes + tcpIPHeader*(c.SegsIn+c.SegsOut)
}

func (c wireCount) sub(o wireCount) wireCount {
	d := wireCount{
		UpBytes: c.UpBytes - o.UpBytes, DownBytes: c.DownBytes - o.DownBytes,
		SegsIn: c.SegsIn - o.SegsIn, SegsOut: c.SegsOut - o.SegsOut, Conns: c.Conns - o.Conns,
		Packets: map[string]int64{},
	}
	for k, v := range c.Packets {
		if n := v - o.Packets[k]; n != 0 {
			d.Packets[k] = n
		}
	}
	return d
}

func (c *wireCount) add(o wireCount) {
	c.UpBytes += o.UpBytes
	c.DownBytes += o.DownBytes
	c.SegsIn += o.SegsIn
	c.SegsOut += o.SegsOut
	c.Conns += o.Conns
	if c.Packets == nil {
		c.Packets = map[string]int64{}
	}
	for k, v := range o.Packets {
		c.Packets[k] += v
	}
}

// startWireProxy listens on a free loopback port and forwards to target
// (host:port).
func startWireProxy(target string) (*wireProxy, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &wireProxy{ln: ln, target: target, ctx: ctx, cancel: cancel, conns: map[*wireConn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// URL is the proxy as an MQTT broker URL.
func (p *wireProxy) URL() string { return "tcp://" + p.ln.Addr().String() }

func (p *wireProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(c.(*net.TCPConn)) })
	}
}

// wireConn is one proxied connection.
type wireConn struct {
	dev            *net.TCPConn
	up, down       atomic.Int64
	upPkt, downPkt mqttPacketCounter
}

func (p *wireProxy) serve(dev *net.TCPConn) {
	d := net.Dialer{KeepAlive: -1}
	up, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		dev.Close()
		return
	}
	wc := &wireConn{dev: dev}
	p.mu.Lock()
	p.conns[wc] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() {
		copyCounted(up, dev, &wc.up, &wc.upPkt)
		up.(*net.TCPConn).CloseWrite()
	})
	wg.Go(func() {
		copyCounted(dev, up, &wc.down, &wc.downPkt)
		dev.CloseWrite()
	})
	stop := context.AfterFunc(p.ctx, func() { dev.Close(); up.Close() })
	wg.Wait()
	stop()
	// Read the kernel's figures before the socket goes.
	final := wc.count()
	dev.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, wc)
	p.closed.add(final)
	p.mu.Unlock()
}

// count reads one connection's figures.
func (wc *wireConn) count() wireCount {
	c := wireCount{UpBytes: wc.up.Load(), DownBytes: wc.down.Load(), Conns: 1, Packets: map[string]int64{}}
	wc.upPkt.addTo(c.Packets, "up ")
	wc.downPkt.addTo(c.Packets, "down ")
	if raw, err := wc.dev.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				c.SegsIn, c.SegsOut = int64(ti.Segs_in), int64(ti.Segs_out)
			}
		})
	}
	return c
}

// snapshot is the total so far, over open and closed connections.
func (p *wireProxy) snapshot() wireCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c wireCount
	c.add(p.closed)
	for wc := range p.conns {
		c.add(wc.count())
	}
	return c
}

func (p *wireProxy) close() {
	p.cancel()
	p.ln.Close()
	p.wg.Wait()
}

// copyCounted copies src to dst, counting bytes and MQTT packets.
func copyCounted(dst io.Writer, src io.Reader, n *atomic.Int64, pk *mqttPacketCounter) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			pk.feed(buf[:k])
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// mqttPacketCounter follows an MQTT byte stream's fixed headers (type
// and remaining length) and counts packets by type.
type mqttPacketCounter struct {
	mu     sync.Mutex
	counts [16]int64
	// parser state: in a header (typ, length so far, multiplier), or
	// skipping the rest of a packet's body
	inHeader bool
	typ      byte
	length   int
	mult     int
	skip     int
}

var mqttTypes = [16]string{"", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH"}

func (m *mqttPacketCounter) feed(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(b) > 0 {
		switch {
		case m.skip > 0:
			k := min(m.skip, len(b))
			m.skip -= k
			b = b[k:]
		case !m.inHeader:
			m.typ, m.length, m.mult, m.inHeader = b[0]>>4, 0, 1, true
			b = b[1:]
		default:
			c := b[0]
			b = b[1:]
			m.length += int(c&0x7f) * m.mult
			m.mult *= 128
			if c&0x80 == 0 || m.mult > 128*128*128*128 {
				m.counts[m.typ]++
				m.inHeader, m.skip = false, m.length
			}
		}
	}
}

func (m *mqttPacketCounter) addTo(out map[string]int64, prefix string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for t, n := range m.counts {
		if n > 0 {
			out[prefix+mqttTypes[t]] += n
		}
	}
}
