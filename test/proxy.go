package test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy between one client (an agent) and its
// broker, so a test can cut that client off while everyone else stays
// connected. Partition drops every open connection and refuses new ones
// (they are accepted and closed at once, as a firewall sending RST would
// be); Heal lets connections through again. Nothing is buffered across a
// partition: a partitioned client sees its connection die and reconnects
// on its own schedule.
type Proxy struct {
	// Addr is the host:port clients dial; Target is where the proxy
	// forwards to.
	Addr   string
	Target string

	ln          net.Listener
	partitioned atomic.Bool
	rate        atomic.Int64 // bytes per second each way per connection; 0: unlimited
	accepted    atomic.Int64
	refused     atomic.Int64
	// up and down count the bytes forwarded client → target and back.
	up, down atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards every connection
// to target. It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// URL is the proxy's address as an MQTT broker URL.
func (p *Proxy) URL() string { return "tcp://" + p.Addr }

// Partition closes every connection through the proxy and refuses new
// ones until Heal.
func (p *Proxy) Partition() {
	p.partitioned.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Retarget forwards new connections to target from now on, as a DNS
// name moved to another machine would, and cuts the open ones.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Target = target
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets new connections through again.
func (p *Proxy) Heal() { p.partitioned.Store(false) }

// Partitioned reports whether the proxy refuses connections.
func (p *Proxy) Partitioned() bool { return p.partitioned.Load() }

// Bytes returns how many bytes the proxy forwarded from its clients
// (up) and to them (down), over every connection so far.
func (p *Proxy) Bytes() (up, down int64) { return p.up.Load(), p.down.Load() }

// Stats returns how many connections were forwarded and how many refused.
func (p *Proxy) Stats() (accepted, refused int64) { return p.accepted.Load(), p.refused.Load() }

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (EMFILE…): do not spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if p.partitioned.Load() {
			p.refused.Add(1)
			c.Close()
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track registers c so that Partition and Close can cut it; it reports
// false if the proxy closed meanwhile.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	p.mu.Lock()
	target := p.Target
	p.mu.Unlock()
	upstream, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return // the client sees its connection close, as it would
	}
	defer upstream.Close()
	if !p.track(upstream) {
		return
	}
	defer p.untrack(upstream)
	// A partition that started while dialling must not let this
	// connection through.
	if p.partitioned.Load() {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, count *atomic.Int64) {
		_, _ = p.copy(dst, src, count) // ends when either side closes
		// Close both: a half-open MQTT connection is of no use.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(upstream, client, &p.up)
	go pipe(client, upstream, &p.down)
	<-done
	<-done
}

// Throttle limits every connection through the proxy, from now on, to
// bytesPerSecond in each direction, as a slow cellular link would (0
// lifts the limit).
func (p *Proxy) Throttle(bytesPerSecond int64) { p.rate.Store(bytesPerSecond) }

// copy is io.Copy at the proxy's rate: it forwards at most a tenth of a
// second's worth of bytes at a time, then waits until the link would have
// carried them.
func (p *Proxy) copy(dst io.Writer, src io.Reader, count *atomic.Int64) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n := len(buf)
		rate := p.rate.Load()
		if rate > 0 {
			n = int(min(int64(n), max(rate/10, 1)))
		}
		start := time.Now()
		m, err := src.Read(buf[:n])
		if m > 0 {
			if _, werr := dst.Write(buf[:m]); werr != nil {
				return total, werr
			}
			total += int64(m)
			count.Add(int64(m))
			if rate > 0 {
				// Pacing, not synchronisation: the link's speed.
				if d := time.Duration(float64(m)/float64(rate)*float64(time.Second)) - time.Since(start); d > 0 {
					time.Sleep(d)
				}
			}
		}
		if err != nil {
			return total, err
		}
	}
}

// String describes the proxy for logs.
func (p *Proxy) String() string {
	a, r := p.Stats()
	p.mu.Lock()
	target := p.Target
	p.mu.Unlock()
	return fmt.Sprintf("proxy %s -> %s (partitioned %v, %d forwarded, %d refused)", p.Addr, target, p.Partitioned(), a, r)
}
