package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultAddr                   = ":1883"
	DefaultTLSAddr                = ":8883"
	DefaultMaxClientWritesPending = 128
	DefaultMaxPacketSize          = 256 << 10
	DefaultMaxInflight            = 1024
	DefaultReceiveMaximum         = 64
	DefaultSessionExpiry          = 7 * 24 * time.Hour
	DefaultAuthTimeout            = 10 * time.Second
	DefaultConnectTimeout         = 10 * time.Second
)

// clientReadBufferSize is each connection's read buffer. It lives as long
// as the connection, and devices send a packet every 30 s or so: mochi's
// 2 KiB default was 2.2 KiB of every device's 64 KiB budget (B6 in
// BENCHMARKS.md). A larger packet costs one more read, not a failure.
const clientReadBufferSize = 512

// Errors returned by the broker and by Conn implementations.
var (
	// ErrClosed is returned when using a closed Broker or Conn.
	ErrClosed = errors.New("mqtt: closed")
	// ErrNotConnected is returned by Conn.Publish while the connection to
	// an external broker is down. Conn.OnConnect callbacks run after the
	// reconnect, so the publisher need not retry.
	ErrNotConnected = errors.New("mqtt: not connected")
	// ErrNotAuthorized is returned when the broker refuses credentials or
	// a subscription.
	ErrNotAuthorized = errors.New("mqtt: not authorized")
	// ErrTooLarge is returned for a payload the broker would refuse.
	ErrTooLarge = errors.New("mqtt: payload too large")
	// ErrInvalidTopic is returned for a malformed topic name or filter.
	ErrInvalidTopic = errors.New("mqtt: invalid topic")
)

// Options configures the embedded broker. The zero value, plus Auth, works.
type Options struct {
	// Addr is the plain MQTT listen address; default ":1883". Use
	// "127.0.0.1:0" in tests and read the port from Broker.Addr.
	Addr string
	// TLSAddr is the MQTT-over-TLS listen address, used only when TLSConfig
	// is set; default ":8883".
	TLSAddr   string
	TLSConfig *tls.Config
	// ClientCerts says what the TLS listener asks of client certificates
	// (clientcert.go); default ClientCertsOff.
	ClientCerts ClientCertMode
	// ClientCAs verifies client certificates; required unless
	// ClientCerts is off.
	ClientCAs *x509.CertPool
	// ClientCAsFunc, if set, is asked for the pool at each TLS
	// handshake instead of ClientCAs (a hub whose CA rotates: the old CA
	// is refused once retired). Default none.
	ClientCAsFunc func() *x509.CertPool
	// NoPlain turns the plain listener off (then Addr is nil); the TLS
	// listener, or the hub's InlineConn alone, remain.
	NoPlain bool
	// Auth checks every network client's username and password. Required.
	Auth Authenticator
	// Topics is the topic layout access is checked against.
	Topics schema.Topics
	// Logger receives the broker's logs (mochi's included); default
	// slog.Default().
	Logger *slog.Logger

	// MaxClientWritesPending bounds each client's outbound queue; it costs
	// memory per connected client (mochi's default, 8192, costs ~70 KiB).
	// Default 128.
	MaxClientWritesPending int
	// MaxPacketSize is the largest MQTT packet accepted from a client;
	// a client sending a larger one is disconnected. Default 256 KiB.
	MaxPacketSize int
	// MaxInflight bounds the QoS 1/2 messages held per client session,
	// connected or not. Default 1024.
	MaxInflight int
	// ReceiveMaximum bounds the unacknowledged QoS 1/2 messages a client
	// may send at once. Default 64.
	ReceiveMaximum int
	// SessionExpiry is how long a disconnected persistent session is kept.
	// Losing one costs nothing but a resubscribe: desired state is retained.
	// Default 7 days.
	SessionExpiry time.Duration
	// AuthTimeout bounds one Authenticate call. Default 10 s.
	AuthTimeout time.Duration
	// ConnectTimeout bounds the time between accepting a connection and
	// reading its CONNECT packet. Default 10 s.
	ConnectTimeout time.Duration
	// HoldConnections, when positive, makes Run accept network
	// connections but read nothing from them until Admit is called, or
	// for at most this long: a restarting hub admits its devices once
	// their retained states are back, rather than serving thousands of
	// logins while it loads (BENCHMARKS.md, "The hub's restart"). A held
	// connection waits in the kernel's buffers; its ConnectTimeout
	// starts when it is admitted. Default 0: admitted at once.
	HoldConnections time.Duration

	// AuthLimiter throttles failed logins per source address (see
	// ratelimit.AuthLimiter); default one with ratelimit's defaults. The
	// hub passes its own, to count them in its metrics.
	AuthLimiter *ratelimit.AuthLimiter
	// PublishRate bounds how fast one client (one device or monitor
	// across its connections, one bootstrap client) may publish; a
	// client over it is disconnected (cut off). Default
	// DefaultPublishRate; a negative PerSecond turns the limit off.
	// Clients with the hub's role are exempt.
	PublishRate ratelimit.Rate
	// ResponseRate replaces PublishRate for a device's publishes on its
	// responses topic (answers to logs, exec and top requests, which
	// the hub flow-controls). Default DefaultResponseRate; a negative
	// PerSecond turns the limit off.
	ResponseRate ratelimit.Rate
	// OnClientCutOff, if set, is called with the reason (CutOff…) each
	// time a client is disconnected for abuse.
	OnClientCutOff func(reason string)
	// OnLoginRefused, if set, is called for each network client whose
	// CONNECT is refused for its credentials (LoginRefused) or unchecked
	// because its address failed too often (LoginThrottled): the hub
	// records them in its audit trail. It runs on the connection's
	// goroutine and gets no password.
	OnLoginRefused func(LoginRefusal)
}

// LoginRefusal is a refused MQTT login, as Options.OnLoginRefused gets
// it.
type LoginRefusal struct {
	// Username is the one the client sent ("" for none).
	Username string
	// Remote is the client's address (host:port).
	Remote string
	// Result is LoginRefused or LoginThrottled.
	Result string
	// Reason says why, in a few words.
	Reason string
}

// Results of a LoginRefusal.
const (
	LoginRefused   = "refused"
	LoginThrottled = "throttled"
)

// loginRefused reports a refused login to Options.OnLoginRefused.
func (b *Broker) loginRefused(username, remote, result, reason string) {
	if b.opts.OnLoginRefused != nil {
		b.opts.OnLoginRefused(LoginRefusal{Username: username, Remote: remote, Result: result, Reason: reason})
	}
}

// RemoteOf returns the network address (host:port) of the connected
// client of this client ID, or "" if there is none.
func (b *Broker) RemoteOf(clientID string) string {
	cl, ok := b.server.Clients.Get(clientID)
	if !ok || cl.Net.Inline {
		return ""
	}
	return cl.Net.Remote
}

func (o *Options) setDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.TLSAddr == "" {
		o.TLSAddr = DefaultTLSAddr
	}
	if o.ClientCerts == "" {
		o.ClientCerts = ClientCertsOff
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxClientWritesPending <= 0 {
		o.MaxClientWritesPending = DefaultMaxClientWritesPending
	}
	if o.MaxPacketSize <= 0 {
		o.MaxPacketSize = DefaultMaxPacketSize
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.ReceiveMaximum <= 0 {
		o.ReceiveMaximum = DefaultReceiveMaximum
	}
	if o.SessionExpiry <= 0 {
		o.SessionExpiry = DefaultSessionExpiry
	}
	if o.AuthTimeout <= 0 {
		o.AuthTimeout = DefaultAuthTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.AuthLimiter == nil {
		o.AuthLimiter = ratelimit.NewAuthLimiter(ratelimit.AuthOptions{})
	}
	if o.PublishRate.PerSecond == 0 && o.PublishRate.Burst == 0 {
		o.PublishRate = DefaultPublishRate
	}
	if o.ResponseRate.PerSecond == 0 && o.ResponseRate.Burst == 0 {
		o.ResponseRate = DefaultResponseRate
	}
}

// Broker is the embedded MQTT broker: mochi-mqtt with Fleet's authentication
// and ACL, retained messages that never expire, and an in-process client for
// the hub. Create it with New, then call Run (or Close).
type Broker struct {
	opts   Options
	log    *slog.Logger
	server *mqtt.Server
	pacer  *retainedPacer
	plain  *listener
	tls    *listener

	// idents maps a client ID to the identEntry of the client that holds it.
	idents sync.Map
	// attempts maps a connecting *mqtt.Client to the ratelimit.Attempt
	// OnConnect admitted, until OnConnectAuthenticate takes it.
	attempts sync.Map
	limits   publishLimits

	ctx    context.Context // parent of Authenticate calls; cancelled by Close
	cancel context.CancelFunc

	subID   atomic.Int64
	running atomic.Bool
	closed  atomic.Bool
	// standby, when set, is the reason network clients are refused
	// (standby.go); nil: the broker accepts them.
	standby   atomic.Pointer[string]
	closeOnce sync.Once
	closeErr  error
	done      chan struct{}

	admitted  chan struct{} // closed by Admit
	admitOnce sync.Once
}

// identEntry is the identity of one client object. ACL checks compare the
// pointer so that a stale session never borrows a newer client's identity.
type identEntry struct {
	cl *mqtt.Client
	id Identity
}

// New binds the listeners and prepares the broker; it does not accept
// connections until Run. Call Run or Close to release the listeners.
func New(opts Options) (*Broker, error) {
	opts.setDefaults()
	if opts.Auth == nil {
		return nil, errors.New("mqtt broker: Options.Auth is required")
	}
	if _, err := ParseClientCertMode(string(opts.ClientCerts)); err != nil {
		return nil, fmt.Errorf("mqtt broker: %w", err)
	}
	tlsConfig, err := clientTLSConfig(opts.TLSConfig, opts)
	if err != nil {
		return nil, err
	}
	if opts.MaxPacketSize > 1<<28 || opts.MaxInflight > 65535 || opts.ReceiveMaximum > 65535 || opts.MaxClientWritesPending > 1<<30 {
		return nil, errors.New("mqtt broker: MaxPacketSize, MaxInflight, ReceiveMaximum or MaxClientWritesPending out of range")
	}
	caps := mqtt.NewDefaultServerCapabilities()
	// Retained messages must never expire: desired state is retained and
	// would otherwise vanish from the broker after mochi's default 24 h.
	caps.MaximumMessageExpiryInterval = 0
	caps.MaximumClientWritesPending = int32(opts.MaxClientWritesPending)
	caps.MaximumPacketSize = uint32(opts.MaxPacketSize)
	caps.MaximumInflight = uint16(opts.MaxInflight)
	caps.ReceiveMaximum = uint16(opts.ReceiveMaximum)
	caps.MaximumSessionExpiryInterval = uint32(min(opts.SessionExpiry/time.Second, 1<<32-1))
	// Topic aliases (MQTT 5) are checked by mochi before they are resolved;
	// none of Fleet's clients need them, so turn them off.
	caps.TopicAliasMaximum = 0

	b := &Broker{opts: opts, log: opts.Logger, done: make(chan struct{}), admitted: make(chan struct{}), limits: newPublishLimits(opts)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.server = mqtt.New(&mqtt.Options{
		Capabilities:             caps,
		ClientNetWriteBufferSize: 2048,
		ClientNetReadBufferSize:  clientReadBufferSize,
		Logger:                   opts.Logger.With("component", "mqtt"),
		SysTopicResendInterval:   30,
		InlineClient:             true,
	})
	if !slowHousekeeping(b.server) {
		b.log.Warn("mqtt broker: could not slow mochi's retained-message sweep; it runs every second")
	}
	auth := &hook{b: b}
	if err := b.server.AddHook(auth, nil); err != nil {
		b.cancel()
		return nil, fmt.Errorf("mqtt broker: add auth hook: %w", err)
	}
	b.pacer = newRetainedPacer(b, auth)
	if err := b.server.AddHook(b.pacer, nil); err != nil {
		b.cancel()
		return nil, fmt.Errorf("mqtt broker: add retained pacer: %w", err)
	}

	if !opts.NoPlain {
		ln, err := listenTCP(opts.Addr)
		if err != nil {
			b.cancel()
			return nil, fmt.Errorf("mqtt broker: listen on %s: %w", opts.Addr, err)
		}
		b.plain = newListener("tcp", ln, nil, opts.ConnectTimeout)
	}
	if opts.TLSConfig != nil {
		tln, err := listenTCP(opts.TLSAddr)
		if err != nil {
			b.closeListeners()
			b.cancel()
			return nil, fmt.Errorf("mqtt broker: listen on %s: %w", opts.TLSAddr, err)
		}
		b.tls = newListener("tls", tln, tlsConfig, opts.ConnectTimeout)
	}
	for _, l := range []*listener{b.plain, b.tls} {
		if l == nil {
			continue
		}
		if opts.HoldConnections > 0 {
			l.admitted = b.admitted
		}
		if err := b.server.AddListener(l); err != nil {
			b.closeListeners()
			b.cancel()
			return nil, fmt.Errorf("mqtt broker: add listener %s: %w", l.ID(), err)
		}
	}
	return b, nil
}

func (b *Broker) closeListeners() {
	for _, l := range []*listener{b.plain, b.tls} {
		if l != nil {
			_ = l.ln.Close()
		}
	}
}

// Addr returns the address the plain MQTT listener is bound to, or nil
// with Options.NoPlain.
func (b *Broker) Addr() net.Addr {
	if b.plain == nil {
		return nil
	}
	return b.plain.ln.Addr()
}

// TLSAddr returns the address of the TLS listener, or nil without TLS.
func (b *Broker) TLSAddr() net.Addr {
	if b.tls == nil {
		return nil
	}
	return b.tls.ln.Addr()
}

// Run serves MQTT until ctx is done or Close is called, then closes the
// broker. It returns nil after a clean shutdown.
func (b *Broker) Run(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("mqtt broker: Run called twice")
	}
	if err := b.server.Serve(); err != nil {
		_ = b.Close()
		return fmt.Errorf("mqtt broker: serve: %w", err)
	}
	var attrs []any
	if b.plain != nil {
		attrs = append(attrs, "addr", b.Addr().String())
	}
	if b.tls != nil {
		attrs = append(attrs, "tls_addr", b.TLSAddr().String())
	}
	b.log.Info("mqtt broker serving", attrs...)
	if b.opts.HoldConnections > 0 {
		held := time.AfterFunc(b.opts.HoldConnections, func() { b.admit("the hold ran out") })
		defer held.Stop()
	}
	select {
	case <-ctx.Done():
	case <-b.done:
	}
	return b.Close()
}

// Admit lets the network connections that Options.HoldConnections holds
// be served, and every later one at once. It is safe to call more than
// once, and before Run.
func (b *Broker) Admit() { b.admit("") }

func (b *Broker) admit(why string) {
	b.admitOnce.Do(func() {
		close(b.admitted)
		if b.opts.HoldConnections > 0 {
			attrs := []any{"held", b.heldCount()}
			if why != "" {
				attrs = append(attrs, "why", why)
			}
			b.log.Info("mqtt broker admitting devices", attrs...)
		}
	})
}

// heldCount is the number of connections the listeners hold or serve.
func (b *Broker) heldCount() int {
	n := 0
	for _, l := range []*listener{b.plain, b.tls} {
		if l != nil {
			l.mu.Lock()
			n += len(l.conns)
			l.mu.Unlock()
		}
	}
	return n
}

// Close disconnects every client and stops the broker. It is safe to call
// more than once and concurrently with Run.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.cancel()
		start := time.Now()
		if err := b.server.Close(); err != nil {
			b.closeErr = fmt.Errorf("mqtt broker: close: %w", err)
		}
		b.log.Info("mqtt broker stopped", "took", time.Since(start).Round(time.Millisecond))
		close(b.done)
	})
	return b.closeErr
}

// Kick disconnects every client authenticated as name and forgets their
// sessions, so a rotated or revoked token stops working at once (the
// Authenticator refuses it from then on). It returns the number of
// connections closed. A client that reconnects with a new token during the
// call may be disconnected once more; it simply reconnects.
func (b *Broker) Kick(name string) int {
	n := 0
	b.idents.Range(func(key, value any) bool {
		e := value.(identEntry)
		if e.id.Name != name {
			return true
		}
		b.idents.CompareAndDelete(key, value)
		if !e.cl.Closed() {
			n++
			// Closing the network connection ends the client's read
			// loop with an error, and mochi then publishes its will:
			// the device shows offline. (DisconnectClient stops the
			// client first, and a read loop that sees it stopped
			// between two packets returns cleanly and drops the will.)
			// A v3.1.1 client may not receive DISCONNECT anyway; the
			// reconnect's CONNACK says "not authorized".
			_ = e.cl.Net.Conn.Close()
		}
		b.forgetSession(e.cl)
		return true
	})
	if n > 0 {
		b.log.Info("mqtt clients kicked", "identity", name, "connections", n)
	}
	return n
}

// forgetSession drops the subscriptions and queued messages of a stopped
// client, so a later connection under its client ID inherits nothing. It
// leaves the entry in mochi's client list: mochi removes it when the
// connection ends (a clean session) or hands it over to the next client
// with that ID. Deleting it here would race that ending connection, whose
// own delete by client ID could then remove a reconnected client's entry
// and leave it deaf to every publish.
func (b *Broker) forgetSession(cl *mqtt.Client) {
	if cur, ok := b.server.Clients.Get(cl.ID); !ok || cur != cl {
		return
	}
	b.server.UnsubscribeClient(cl)
	cl.ClearInflights()
}

// Publish publishes from the in-process client, bypassing ACLs: QoS 1 to
// subscribers, retained if asked (an empty retained payload clears the
// retained message).
func (b *Broker) Publish(topic string, payload []byte, retained bool) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if !validTopicName(topic) {
		return fmt.Errorf("mqtt publish %q: %w", topic, ErrInvalidTopic)
	}
	if len(payload)+len(topic)+16 > b.opts.MaxPacketSize {
		return fmt.Errorf("mqtt publish %q: %d bytes: %w", topic, len(payload), ErrTooLarge)
	}
	if err := b.server.Publish(topic, payload, retained, 1); err != nil {
		return fmt.Errorf("mqtt publish %q: %w", topic, err)
	}
	return nil
}

// Subscribe subscribes the in-process client to filter, bypassing ACLs;
// retained messages matching filter are delivered first. handler runs on a
// goroutine of this subscription, one message at a time and in the order the
// broker delivered them, so it never blocks the broker; it must not call the
// returned unsubscribe function.
func (b *Broker) Subscribe(filter string, handler func(topic string, payload []byte)) (unsubscribe func(), err error) {
	d := newDispatcher(b.log)
	id, err := b.subscribe(filter, d, handler)
	if err != nil {
		d.close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.unsubscribe(filter, id)
			d.close()
		})
	}, nil
}

// subscribe adds an inline subscription whose messages go through d.
func (b *Broker) subscribe(filter string, d *dispatcher, handler func(topic string, payload []byte)) (int, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	if handler == nil {
		return 0, errors.New("mqtt subscribe: nil handler")
	}
	if !validFilter(filter) {
		return 0, fmt.Errorf("mqtt subscribe %q: %w", filter, ErrInvalidTopic)
	}
	id := int(b.subID.Add(1))
	err := b.server.Subscribe(filter, id, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		topic, payload := pk.TopicName, b.handlerPayload(pk)
		d.enqueue(func() { handler(topic, payload) })
	})
	if err != nil {
		return 0, fmt.Errorf("mqtt subscribe %q: %w", filter, err)
	}
	return id, nil
}

// handlerPayload is the payload of pk for an inline handler, which may
// keep it (Conn.Subscribe): the payload of the topic's retained message
// when pk is that message, else a copy. mochi retains a message before it
// delivers it, from its own copy it never changes, so a retained status
// the hub keeps is one buffer shared with the broker, not two.
func (b *Broker) handlerPayload(pk packets.Packet) []byte {
	if pk.FixedHeader.Retain && len(pk.Payload) > 0 {
		if r, ok := b.server.Topics.Retained.Get(pk.TopicName); ok && bytes.Equal(r.Payload, pk.Payload) {
			return r.Payload[:len(r.Payload):len(r.Payload)]
		}
	}
	return append([]byte(nil), pk.Payload...)
}

func (b *Broker) unsubscribe(filter string, id int) {
	if err := b.server.Unsubscribe(filter, id); err != nil {
		b.log.Warn("mqtt inline unsubscribe failed", "filter", filter, "error", err)
	}
}

// listenTCP listens without TCP keepalives on the accepted connections:
// MQTT's own keepalive finds a dead client (mochi drops one silent for
// 1.5 keepalives and publishes its will), and the kernel's probes, every
// 15 s by Go's default, would be most of what an idle device sends and
// receives a day (BENCHMARKS.md, "Bytes on the wire").
func listenTCP(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}
