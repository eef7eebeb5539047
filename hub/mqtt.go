package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// MQTTPasswordName is the file, in the data directory, holding the hub's
// own MQTT password for an external broker (the account
// `fleet-hub mosquitto-config` writes into Mosquitto's password file). It
// is created on first start, mode 0600.
const MQTTPasswordName = "mqtt-password"

// DefaultBrokerUsername is the hub's MQTT username on an external broker.
const DefaultBrokerUsername = "fleet-hub"

// MQTTPasswordPath returns where the hub keeps its MQTT password.
func MQTTPasswordPath(dataDir string) string {
	return filepath.Join(dataDir, MQTTPasswordName)
}

// EnsureMQTTPassword reads the hub's MQTT password from the data
// directory, creating a random one if there is none.
func EnsureMQTTPassword(dataDir string) (string, error) {
	path := MQTTPasswordPath(dataDir)
	b, err := os.ReadFile(path)
	if err == nil {
		pw := strings.TrimSpace(string(b))
		if pw == "" {
			return "", fmt.Errorf("hub mqtt password: %s is empty", path)
		}
		return pw, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("hub mqtt password: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("hub mqtt password: %w", err)
	}
	pw, err := store.NewToken()
	if err != nil {
		return "", err
	}
	if err := writeSecretFile(path, pw+"\n"); err != nil {
		return "", fmt.Errorf("hub mqtt password: %w", err)
	}
	return pw, nil
}

// writeSecretFile writes a 0600 file atomically.
func writeSecretFile(path, body string) error {
	return store.WriteFileAtomic(path, []byte(body), 0o600)
}

// storeAuth authenticates MQTT clients against the store: a device with
// its name and token, a monitor credential with its name and token, a
// bootstrap client with "bootstrap.<id>" and the bootstrap token. Tokens
// are compared by hash, in constant time.
type storeAuth struct {
	st *store.Store
}

var _ broker.Authenticator = storeAuth{}

func (a storeAuth) Authenticate(ctx context.Context, username string, password []byte) (broker.Identity, bool) {
	pw := string(password)
	if strings.HasPrefix(username, schema.BootstrapUsernamePrefix) {
		// Device and credential names never contain '.'.
		id, ok := a.st.VerifyBootstrapToken(ctx, pw)
		if !ok || username != schema.BootstrapUsername(id) {
			return broker.Identity{}, false
		}
		return broker.Identity{Name: username, Role: broker.RoleBootstrap}, true
	}
	if a.st.VerifyToken(username, pw) {
		return broker.Identity{Name: username, Role: broker.RoleDevice}, true
	}
	if role, ok := a.st.VerifyCredential(username, pw); ok && role == store.RoleMonitor {
		return broker.Identity{Name: username, Role: broker.RoleMonitor}, true
	}
	return broker.Identity{}, false
}

// mqttURLFor turns a bound listener address into the URL devices are told.
// An unspecified host (":1883", "0.0.0.0") is kept as 0.0.0.0: the hub
// cannot know which of its names devices reach it by, and clients (the
// fleet CLI) replace a wildcard host with the host they reach the hub's
// API at. Set --advertise-mqtt-url in production.
func mqttURLFor(addr net.Addr, secure bool) string {
	scheme := "tcp"
	if secure {
		scheme = "ssl"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "0.0.0.0"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// checkMQTTURL checks an advertised or external broker URL as devices
// will read it.
func checkMQTTURL(s string) error {
	_, err := schema.ParseBrokerURL(s)
	return err
}

// deferredConn is the hub's MQTT connection, set once it exists: with an
// external broker the hub serves its API while it dials. Its
// subscriptions hold every message until release: the hub subscribes, and
// devices may connect, while the store is still being loaded.
type deferredConn struct {
	mu   sync.RWMutex
	conn broker.Conn

	released    chan struct{}
	releaseOnce sync.Once
}

func newDeferredConn() *deferredConn { return &deferredConn{released: make(chan struct{})} }

// release lets the handlers run: the parts they feed are loaded.
func (d *deferredConn) release() { d.releaseOnce.Do(func() { close(d.released) }) }

func (d *deferredConn) set(c broker.Conn) {
	d.mu.Lock()
	d.conn = c
	d.mu.Unlock()
}

func (d *deferredConn) get() broker.Conn {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.conn
}

func (d *deferredConn) Publish(ctx context.Context, topic string, payload []byte, retained bool) error {
	c := d.get()
	if c == nil {
		return broker.ErrNotConnected
	}
	return c.Publish(ctx, topic, payload, retained)
}

func (d *deferredConn) Subscribe(ctx context.Context, filter string, handler func(string, []byte)) error {
	c := d.get()
	if c == nil {
		return broker.ErrNotConnected
	}
	return c.Subscribe(ctx, filter, func(topic string, payload []byte) {
		select {
		case <-d.released:
		case <-ctx.Done():
			return // shutting down before the hub was loaded
		}
		handler(topic, payload)
	})
}
