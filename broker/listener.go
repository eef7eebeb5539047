package broker

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// listener serves MQTT connections from a net.Listener that is already bound
// (so Addr works before Run, and port 0 can be used). Unlike mochi's TCP
// listener it bounds the time a connection may take to send CONNECT, and on
// Close it closes every connection it accepted and waits for their handlers,
// so the server never waits for a half-open connection.
type listener struct {
	id             string
	ln             net.Listener
	tlsConfig      *tls.Config
	connectTimeout time.Duration
	log            *slog.Logger

	// admitted, when not nil, holds every accepted connection until it
	// is closed (Broker.Admit): the connection waits, unread, in the
	// kernel's buffers, and its CONNECT timeout starts then.
	admitted <-chan struct{}
	quit     chan struct{} // closed by Close: held connections give up

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // accept loop and connection handlers
}

var _ listeners.Listener = (*listener)(nil)

// NewListener returns the embedded broker's listener for any mochi server:
// it serves ln (TLS when tlsConfig is set), gives a connection
// connectTimeout to send CONNECT, and on Close closes every connection and
// waits for its handler. The agent's tests use it to run a bare mochi
// server: mochi v2.7.9's own TCP listener does not wait for its handlers,
// so a connection accepted while the server closes races Server.Close,
// which -race reports.
func NewListener(id string, ln net.Listener, tlsConfig *tls.Config, connectTimeout time.Duration) listeners.Listener {
	return newListener(id, ln, tlsConfig, connectTimeout)
}

func newListener(id string, ln net.Listener, tlsConfig *tls.Config, connectTimeout time.Duration) *listener {
	return &listener{id: id, ln: ln, tlsConfig: tlsConfig, connectTimeout: connectTimeout,
		conns: map[net.Conn]struct{}{}, quit: make(chan struct{})}
}

func (l *listener) ID() string { return l.id }

func (l *listener) Address() string { return l.ln.Addr().String() }

func (l *listener) Protocol() string {
	if l.tlsConfig != nil {
		return "tls"
	}
	return "tcp"
}

func (l *listener) Init(log *slog.Logger) error {
	l.log = log
	return nil
}

func (l *listener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Error("mqtt accept failed; listener stopped", "error", err)
			}
			return
		}
		if l.tlsConfig != nil {
			conn = tls.Server(conn, l.tlsConfig)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = conn.Close()
			return
		}
		l.conns[conn] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			l.handle(conn, establish)
			_ = conn.Close()
			l.mu.Lock()
			delete(l.conns, conn)
			l.mu.Unlock()
		}()
	}
}

// handle serves one accepted connection once it is admitted.
func (l *listener) handle(conn net.Conn, establish listeners.EstablishFn) {
	if l.hold() {
		return
	}
	// mochi replaces this deadline with one derived from the keepalive
	// once CONNECT has been read.
	if err := conn.SetDeadline(time.Now().Add(l.connectTimeout)); err != nil {
		return
	}
	if err := establish(l.id, conn); err != nil {
		l.log.Debug("mqtt connection ended", "remote", conn.RemoteAddr().String(), "error", err)
	}
}

// hold waits until connections are admitted. It reports whether the
// listener closed first.
func (l *listener) hold() (closed bool) {
	if l.admitted == nil {
		return false
	}
	select {
	case <-l.admitted:
		return false
	case <-l.quit:
		return true
	}
}

// Close stops accepting, closes every connection, waits for their handlers to
// return and then lets the server clean up what is left.
func (l *listener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.quit)
	_ = l.ln.Close()
	conns := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	closeAll(conns)
	l.wg.Wait()
	closeClients(l.id)
}

// closeAll closes conns on a few goroutines at once: each Close is a
// syscall and wakes the connection's handler, and with 10,000 devices
// one after another they were most of a hub's stop (BENCHMARKS.md, B4).
// The listener's lock is not held, so the handlers that wake up can
// leave while the rest are closed.
func closeAll(conns []net.Conn) {
	workers := min(len(conns)/64+1, 2*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(conns); i += workers {
				_ = conns[i].Close()
			}
		})
	}
	wg.Wait()
}
