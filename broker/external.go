package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of ExternalOptions.
const (
	DefaultKeepAlive           = 30 * time.Second
	DefaultMinReconnectDelay   = time.Second
	DefaultMaxReconnectDelay   = time.Minute
	DefaultExternalMaxInflight = 64
)

// ExternalOptions configures DialExternal.
type ExternalOptions struct {
	// URL of the broker: tcp://host:port or mqtt:// (plain; port 1883 by
	// default), ssl://, tls:// or mqtts:// (TLS; port 8883 by default).
	URL      string
	Username string
	Password string
	// ClientID must be stable across restarts: the session (subscriptions
	// and queued QoS 1 messages) is kept by the broker under it. Default:
	// Username.
	ClientID string
	// CAFile is a PEM bundle of CAs to trust for the broker's certificate
	// (TLS URLs only), added to TLSConfig if both are set.
	CAFile    string
	TLSConfig *tls.Config
	Logger    *slog.Logger

	// KeepAlive is the MQTT keepalive; default 30 s.
	KeepAlive time.Duration
	// ConnectTimeout bounds one connection attempt; default 10 s.
	ConnectTimeout time.Duration
	// MinReconnectDelay and MaxReconnectDelay bound the jittered,
	// exponential delay between connection attempts; defaults 1 s and 1 min.
	MinReconnectDelay time.Duration
	MaxReconnectDelay time.Duration
	// MaxInflight bounds the QoS 1 publishes awaiting their PUBACK;
	// Publish waits (until its ctx is done) for a free slot. Default 64.
	MaxInflight int
}

func (o *ExternalOptions) setDefaults() {
	if o.ClientID == "" {
		o.ClientID = o.Username
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MinReconnectDelay <= 0 {
		o.MinReconnectDelay = DefaultMinReconnectDelay
	}
	if o.MaxReconnectDelay < o.MinReconnectDelay {
		o.MaxReconnectDelay = max(DefaultMaxReconnectDelay, o.MinReconnectDelay)
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = DefaultExternalMaxInflight
	}
}

// DialExternal connects to an external MQTT broker (Mosquitto, EMQX, …) with
// paho, MQTT 3.1.1, a persistent session under a stable client ID, and
// reconnects with jittered exponential backoff after any loss. It returns
// once the first connection is up; it keeps retrying until ctx is done,
// except when the broker refuses the credentials.
func DialExternal(ctx context.Context, opts ExternalOptions) (Conn, error) {
	opts.setDefaults()
	server, tlsConfig, err := externalServer(opts)
	if err != nil {
		return nil, err
	}
	if opts.ClientID == "" {
		return nil, errors.New("mqtt dial: ClientID or Username is required")
	}
	c := &externalConn{
		opts:  opts,
		log:   opts.Logger.With("mqtt_server", redact(server), "client_id", opts.ClientID),
		d:     newDispatcher(opts.Logger),
		sem:   make(chan struct{}, opts.MaxInflight),
		subs:  map[string]func(string, []byte){},
		lost:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		ready: make(chan struct{}),
	}
	po := paho.NewClientOptions().
		AddBroker(server).
		SetClientID(opts.ClientID).
		SetUsername(opts.Username).
		SetPassword(opts.Password).
		SetProtocolVersion(4).
		SetCleanSession(false).
		// In order: route only queues, so it never stalls paho's router,
		// and a device's newer status is never handled before its older one.
		SetOrderMatters(true).
		SetAutoReconnect(false). // reconnects are ours: paho's backoff has no jitter
		SetConnectRetry(false).
		SetResumeSubs(false). // subscriptions are remade in the OnConnect handler
		SetKeepAlive(opts.KeepAlive).
		SetPingTimeout(opts.ConnectTimeout).
		SetConnectTimeout(opts.ConnectTimeout).
		SetWriteTimeout(opts.ConnectTimeout).
		SetDefaultPublishHandler(c.route).
		SetOnConnectHandler(c.connected).
		SetConnectionLostHandler(c.connectionLost)
	if tlsConfig != nil {
		po.SetTLSConfig(tlsConfig)
	}
	po.SetCustomOpenConnectionFn(func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
		return dialBuffered(u, tlsConfig, opts.ConnectTimeout)
	})
	c.client = paho.NewClient(po)

	b := c.newBackoff()
	for {
		err := c.connect(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, ErrNotAuthorized) || ctx.Err() != nil {
			c.d.close()
			return nil, fmt.Errorf("mqtt dial %s: %w", redact(server), err)
		}
		delay := b.next()
		c.log.Warn("mqtt connect failed; retrying", "error", err, "retry_in", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			c.d.close()
			return nil, fmt.Errorf("mqtt dial %s: %w (last error: %w)", redact(server), ctx.Err(), err)
		}
	}
	c.wg.Add(1)
	go c.supervise()
	// paho runs the OnConnect handler on its own goroutine; wait for it, so
	// that a Subscribe right after DialExternal is made at once.
	select {
	case <-c.ready:
	case <-ctx.Done():
		_ = c.Close()
		return nil, fmt.Errorf("mqtt dial %s: %w", redact(server), ctx.Err())
	}
	return c, nil
}

// dialBuffered dials the broker (TCP, or TLS with cfg for a TLS URL) and
// buffers the connection's reads: the hub receives every device's
// statuses and events over this one connection, and paho alone reads
// each packet in three or more system calls.
func dialBuffered(u *url.URL, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	conn, err := mqttio.Dial(context.Background(), u, cfg, timeout)
	if err != nil {
		return nil, err
	}
	return mqttio.BufferedConn(conn, 64<<10), nil
}

// externalServer checks the URL and returns it with a port, and the TLS
// configuration to use, if any.
func externalServer(opts ExternalOptions) (string, *tls.Config, error) {
	u, err := schema.ParseBrokerURL(opts.URL)
	if err != nil {
		return "", nil, fmt.Errorf("mqtt dial: %w", err)
	}
	if !schema.IsTLSBroker(u) {
		if opts.CAFile != "" || opts.TLSConfig != nil {
			return "", nil, fmt.Errorf("mqtt dial %s: CAFile or TLSConfig given for a plain-text URL; use ssl://", redact(opts.URL))
		}
		return u.String(), nil, nil
	}
	cfg, err := mqttio.TLSConfig(opts.TLSConfig, opts.CAFile)
	if err != nil {
		return "", nil, fmt.Errorf("mqtt dial: %w", err)
	}
	return u.String(), cfg, nil
}

// redact removes a password from a URL for logs and errors.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}

type externalConn struct {
	opts   ExternalOptions
	log    *slog.Logger
	client paho.Client
	d      *dispatcher
	sem    chan struct{} // one slot per QoS 1 publish awaiting PUBACK

	mu          sync.Mutex
	subs        map[string]func(topic string, payload []byte)
	onConnect   []func()
	up          bool
	connectedAt time.Time
	closed      bool

	lost      chan struct{} // signalled by paho when the connection drops
	stop      chan struct{}
	ready     chan struct{} // closed when the first connection is up
	readyOnce sync.Once
	wg        sync.WaitGroup
}

var _ Conn = (*externalConn)(nil)

// connect makes one connection attempt.
func (c *externalConn) connect(ctx context.Context) error {
	tok := c.client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		// The attempt is bounded by ConnectTimeout; make sure it does not
		// leave a connection behind.
		go func() {
			<-tok.Done()
			if tok.Error() == nil {
				c.client.Disconnect(0)
			}
		}()
		return ctx.Err()
	}
	if err := tok.Error(); err != nil {
		if ct, ok := tok.(*paho.ConnectToken); ok {
			switch ct.ReturnCode() {
			case packets.ErrRefusedBadUsernameOrPassword, packets.ErrRefusedNotAuthorised, packets.ErrRefusedIDRejected:
				return fmt.Errorf("%w: %w", ErrNotAuthorized, err)
			}
		}
		return err
	}
	return nil
}

// connected is paho's OnConnect handler; it runs on its own goroutine.
func (c *externalConn) connected(paho.Client) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.up = true
	c.connectedAt = time.Now()
	filters := make([]string, 0, len(c.subs))
	for f := range c.subs {
		filters = append(filters, f)
	}
	callbacks := append([]func(){}, c.onConnect...)
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
	c.log.Info("mqtt connected")

	for _, f := range filters {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.ConnectTimeout)
		err := c.subscribe(ctx, f)
		cancel()
		if errors.Is(err, ErrNotAuthorized) {
			c.mu.Lock()
			delete(c.subs, f)
			c.mu.Unlock()
		}
		if err != nil {
			// A lost connection is retried by supervise; the
			// subscription is made again on the next connect.
			c.log.Error("mqtt resubscribe failed", "filter", f, "error", err)
		}
	}
	for _, f := range callbacks {
		f()
	}
}

// connectionLost is paho's connection-lost handler.
func (c *externalConn) connectionLost(_ paho.Client, err error) {
	c.mu.Lock()
	c.up = false
	c.mu.Unlock()
	c.log.Warn("mqtt connection lost", "error", err)
	select {
	case c.lost <- struct{}{}:
	default:
	}
}

// supervise reconnects after every loss, with jittered exponential backoff.
func (c *externalConn) supervise() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	b := c.newBackoff()
	for {
		select {
		case <-c.stop:
			return
		case <-c.lost:
		}
		c.mu.Lock()
		stable := time.Since(c.connectedAt) > c.opts.MaxReconnectDelay
		c.mu.Unlock()
		if stable {
			b.reset()
		}
		for {
			delay := b.next()
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-c.stop:
				t.Stop()
				return
			}
			err := c.connect(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("mqtt reconnect failed; retrying", "error", err, "retry_in_at_most", b.peek())
		}
	}
}

// route is paho's default publish handler: with OrderMatters(true) paho
// calls it on its router goroutine, in arrival order; it only queues the
// message for the matching handlers, so it never blocks the router.
func (c *externalConn) route(_ paho.Client, m paho.Message) {
	topic, payload := m.Topic(), m.Payload()
	c.mu.Lock()
	var hs []func(string, []byte)
	for f, h := range c.subs {
		if matchTopic(f, topic) {
			hs = append(hs, h)
		}
	}
	c.mu.Unlock()
	if len(hs) == 0 {
		c.log.Debug("mqtt message matches no subscription", "topic", topic)
		return
	}
	for _, h := range hs {
		c.d.enqueue(func() { h(topic, payload) })
	}
}

func (c *externalConn) Publish(ctx context.Context, topic string, payload []byte, retained bool) error {
	if c.isClosed() {
		return ErrClosed
	}
	if !validTopicName(topic) {
		return fmt.Errorf("mqtt publish %q: %w", topic, ErrInvalidTopic)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mqtt publish %q: waiting for an in-flight slot: %w", topic, ctx.Err())
	case <-c.stop:
		return ErrClosed
	}
	tok := c.client.Publish(topic, 1, retained, payload)
	select {
	case <-tok.Done():
		<-c.sem
	case <-ctx.Done():
		// Keep the slot until paho is done with the message (it resends
		// it after a reconnect), so in-flight publishes stay bounded.
		go func() {
			select {
			case <-tok.Done():
			case <-c.stop:
			}
			<-c.sem
		}()
		return fmt.Errorf("mqtt publish %q: %w", topic, ctx.Err())
	case <-c.stop:
		<-c.sem
		return ErrClosed
	}
	if err := tok.Error(); err != nil {
		if errors.Is(err, paho.ErrNotConnected) {
			return fmt.Errorf("mqtt publish %q: %w", topic, ErrNotConnected)
		}
		return fmt.Errorf("mqtt publish %q: %w", topic, err)
	}
	return nil
}

func (c *externalConn) Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error {
	if handler == nil {
		return errors.New("mqtt subscribe: nil handler")
	}
	if !validFilter(filter) {
		return fmt.Errorf("mqtt subscribe %q: %w", filter, ErrInvalidTopic)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.subs[filter] = handler
	up := c.up
	c.mu.Unlock()
	if !up {
		return nil // made by the OnConnect handler
	}
	err := c.subscribe(ctx, filter)
	if errors.Is(err, ErrNotAuthorized) {
		c.mu.Lock()
		delete(c.subs, filter)
		c.mu.Unlock()
	}
	if errors.Is(err, paho.ErrNotConnected) {
		return nil // lost meanwhile; made by the OnConnect handler
	}
	return err
}

// subscribe sends one SUBSCRIBE and checks the SUBACK.
func (c *externalConn) subscribe(ctx context.Context, filter string) error {
	tok := c.client.Subscribe(filter, 1, nil)
	select {
	case <-tok.Done():
	case <-ctx.Done():
		return fmt.Errorf("mqtt subscribe %q: %w", filter, ctx.Err())
	case <-c.stop:
		return ErrClosed
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("mqtt subscribe %q: %w", filter, err)
	}
	if st, ok := tok.(*paho.SubscribeToken); ok {
		if code, ok := st.Result()[filter]; ok && code > 2 {
			return fmt.Errorf("mqtt subscribe %q: refused by the broker (code %#x): %w", filter, code, ErrNotAuthorized)
		}
	}
	return nil
}

func (c *externalConn) OnConnect(f func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.onConnect = append(c.onConnect, f)
	up := c.up
	c.mu.Unlock()
	if up {
		go f()
	}
}

func (c *externalConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *externalConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.up = false
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	c.client.Disconnect(250)
	c.d.close()
	return nil
}

// backoff is a capped exponential delay with "equal jitter": each delay is
// drawn uniformly from [d/2, d], so a fleet of clients that lost the same
// broker does not come back in lockstep.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (c *externalConn) newBackoff() *backoff {
	return &backoff{min: c.opts.MinReconnectDelay, max: c.opts.MaxReconnectDelay}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) peek() time.Duration { return min(b.cur*2, b.max) }

func (b *backoff) reset() { b.cur = 0 }
