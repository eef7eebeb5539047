package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// uplink is a site's link to the core broker in a bridged run: a TCP
// relay in this process between the site's bridge and the core. It does
// two things a WAN link would otherwise decide:
//
//   - it can go down (cut) and come back (restore), which the uplink
//     phase uses: the bridge loses the core and keeps retrying, the
//     site's devices keep their broker;
//   - it acknowledges every segment from the bridge at once
//     (TCP_QUICKACK). Mosquitto 2.0.11 leaves Nagle's algorithm on for
//     its bridge connections (set_tcp_nodelay applies to accepted
//     sockets only), so a bridge's small publish waits for the ACK of
//     the one before, and the core delays that ACK by up to 40 ms: every
//     status would be held that long (measured: single change p50 44 ms
//     straight, 1.1 ms on one broker). With -uplink-quickack=false the
//     bridges connect straight to the core and show it.
type uplink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startUplink(target string) (*uplink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("uplink relay: %w", err)
	}
	u := &uplink{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	u.wg.Go(u.accept)
	return u, nil
}

// Addr is where the site's bridge connects.
func (u *uplink) Addr() string { return u.ln.Addr().String() }

func (u *uplink) accept() {
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		if u.down {
			u.mu.Unlock()
			c.Close() // the link is down: the bridge retries
			continue
		}
		u.conns[c] = struct{}{}
		u.mu.Unlock()
		u.wg.Go(func() { u.serve(c) })
	}
}

func (u *uplink) serve(site net.Conn) {
	defer u.forget(site)
	core, err := net.Dial("tcp", u.target)
	if err != nil {
		return
	}
	u.mu.Lock()
	if u.down {
		u.mu.Unlock()
		core.Close()
		return
	}
	u.conns[core] = struct{}{}
	u.mu.Unlock()
	defer u.forget(core)
	done := make(chan struct{}, 2)
	go func() {
		_ = copyQuickAck(core, site)
		core.Close()
		done <- struct{}{}
	}()
	_, _ = io.Copy(site, core)
	site.Close()
	<-done
}

func (u *uplink) forget(c net.Conn) {
	c.Close()
	u.mu.Lock()
	delete(u.conns, c)
	u.mu.Unlock()
}

// copyQuickAck copies src to dst, setting TCP_QUICKACK on src before each
// read (Linux clears it as it pleases): every segment from src is
// acknowledged at once.
func copyQuickAck(dst io.Writer, src net.Conn) error {
	tc, ok := src.(*net.TCPConn)
	if !ok {
		_, err := io.Copy(dst, src)
		return err
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	quick := func() {
		_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })
	}
	buf := make([]byte, 32<<10)
	for {
		quick()
		n, err := src.Read(buf)
		quick()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return err
		}
	}
}

// cut takes the link down: every connection through it is closed and new
// ones are refused until restore.
func (u *uplink) cut() {
	u.mu.Lock()
	u.down = true
	conns := make([]net.Conn, 0, len(u.conns))
	for c := range u.conns {
		conns = append(conns, c)
	}
	u.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// restore brings the link back: the bridge's next retry gets through.
func (u *uplink) restore() {
	u.mu.Lock()
	u.down = false
	u.mu.Unlock()
}

func (u *uplink) close() {
	u.cut()
	u.ln.Close()
	u.wg.Wait()
}
