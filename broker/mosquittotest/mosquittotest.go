// Package mosquittotest starts a real Mosquitto 2 broker, configured by
// broker.WriteMosquittoFiles, for tests.
package mosquittotest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// Config is what the broker is started with.
type Config struct {
	Topics   schema.Topics
	Accounts []broker.MosquittoAccount
	// MaxPacketSize, default broker.DefaultMaxPacketSize.
	MaxPacketSize int
}

// Mosquitto is a running mosquitto process listening on a loopback port.
type Mosquitto struct {
	// Addr is host:port; URL is tcp://host:port.
	Addr string
	URL  string
	Dir  string

	cfg  Config
	port int
	cmd  *exec.Cmd
	out  *syncBuffer
	exit chan struct{}
	err  error // set before exit is closed
}

// Binary returns the path of the mosquitto binary, or an error telling how
// to install it.
func Binary() (string, error) { return sysdeps.Path("mosquitto") }

// Start writes the configuration into a temporary directory, starts
// `mosquitto -c mosquitto.conf` on a free loopback port and waits until it
// accepts connections. The process is killed when the test ends. A missing
// binary fails the test (skips it under -short).
func Start(t testing.TB, cfg Config) *Mosquitto {
	t.Helper()
	bin := sysdeps.Require(t, "mosquitto")
	var err error
	dir := t.TempDir()
	var lastErr error
	// The free port is found by binding port 0 and closing it; another
	// process may grab it before mosquitto does, so try a few times.
	for range 5 {
		m := &Mosquitto{Dir: dir, cfg: cfg, out: &syncBuffer{}, exit: make(chan struct{})}
		m.port, err = freePort()
		if err != nil {
			t.Fatalf("mosquittotest: %v", err)
		}
		m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
		m.URL = "tcp://" + m.Addr
		conf, err := m.writeFiles(cfg.Accounts)
		if err != nil {
			t.Fatalf("mosquittotest: %v", err)
		}
		m.cmd = exec.Command(bin, "-c", conf)
		m.cmd.Stdout = m.out
		m.cmd.Stderr = m.out
		if err := m.cmd.Start(); err != nil {
			t.Fatalf("mosquittotest: start %s: %v", bin, err)
		}
		go func() {
			m.err = m.cmd.Wait()
			close(m.exit)
		}()
		t.Cleanup(func() {
			m.kill()
			if t.Failed() {
				t.Logf("mosquitto output:\n%s", m.out.String())
			}
		})
		if lastErr = m.awaitListening(10 * time.Second); lastErr == nil {
			return m
		}
		m.kill()
	}
	t.Fatalf("mosquittotest: %v", lastErr)
	return nil
}

func (m *Mosquitto) writeFiles(accounts []broker.MosquittoAccount) (string, error) {
	conf := broker.MosquittoConf{
		Port:          m.port,
		Bind:          "127.0.0.1",
		MaxPacketSize: m.cfg.MaxPacketSize,
	}
	if os.Geteuid() == 0 {
		// Mosquitto drops root for the "mosquitto" user, which cannot
		// read the 0600 password file in our temporary directory.
		if u, err := user.Current(); err == nil {
			conf.User = u.Username
		}
	}
	return broker.WriteMosquittoFiles(m.Dir, m.cfg.Topics, accounts, conf)
}

func (m *Mosquitto) awaitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", m.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-m.exit:
			return fmt.Errorf("mosquitto exited (%v) before listening on %s:\n%s", m.err, m.Addr, m.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mosquitto not listening on %s after %v:\n%s", m.Addr, timeout, m.out.String())
		}
	}
}

// SetAccounts rewrites the password and ACL files and makes mosquitto reload
// them (SIGHUP). Mosquitto disconnects the clients whose account was
// removed or whose password changed.
func (m *Mosquitto) SetAccounts(t testing.TB, accounts []broker.MosquittoAccount) {
	t.Helper()
	if _, err := m.writeFiles(accounts); err != nil {
		t.Fatalf("mosquittotest: %v", err)
	}
	m.cfg.Accounts = accounts
	before := m.out.Len()
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("mosquittotest: reload: %v", err)
	}
	// Mosquitto logs "Reloading config." once it has handled the signal.
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(m.out.Bytes()[before:], []byte("Reloading config")) {
		if time.Now().After(deadline) {
			t.Fatalf("mosquittotest: no reload within 10s:\n%s", m.out.String())
		}
		select {
		case <-m.exit:
			t.Fatalf("mosquittotest: mosquitto exited on reload (%v):\n%s", m.err, m.out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Restart kills mosquitto and starts it again on the same port with the
// same files; without persistence, retained messages and sessions are gone.
func (m *Mosquitto) Restart(t testing.TB) {
	t.Helper()
	m.kill()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	m.exit = make(chan struct{})
	m.cmd = exec.Command(bin, "-c", filepath.Join(m.Dir, "mosquitto.conf"))
	m.cmd.Stdout = m.out
	m.cmd.Stderr = m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("mosquittotest: restart: %v", err)
	}
	exit, cmd := m.exit, m.cmd
	go func() {
		m.err = cmd.Wait()
		close(exit)
	}()
	if err := m.awaitListening(10 * time.Second); err != nil {
		t.Fatalf("mosquittotest: restart: %v", err)
	}
}

// Output returns what mosquitto has logged so far.
func (m *Mosquitto) Output() string { return m.out.String() }

func (m *Mosquitto) kill() {
	select {
	case <-m.exit:
		return
	default:
	}
	_ = m.cmd.Process.Kill()
	<-m.exit
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
