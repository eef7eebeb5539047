// Package session keeps the agent's MQTT session to the broker: it
// connects with the device's credentials, announces itself on the online
// topic (with a retained "offline" last will), subscribes to the device's
// desired topic on every connect, and reconnects with jittered exponential
// backoff.
//
// Several brokers: the session takes a list of broker URLs (Brokers, the
// preferred first). It connects to the first; whenever a connection ends
// or an attempt fails, whether the broker is down, refuses the device
// (a standby hub's broker answers CONNACK "server unavailable") or the TLS
// check fails, the next attempt goes to the next broker of the list,
// round-robin, after the same jittered backoff, and it never gives up.
// So with one leader's broker accepting devices, a device finds it
// within a round of the list. Every broker is verified by the same trust
// (TLSConfig, for each broker's own name: enroll.ForBroker).
//
// The session uses a clean session (CleanSession=true) on purpose. The
// only subscription is a retained topic that always carries the FULL
// desired state, so on every (re)connect the broker hands over the latest
// one; a persistent session would instead queue every intermediate
// desired state while the device is offline, costing broker memory per
// offline device and replaying states the agent must then skip, and it
// would replay QoS 1 publishes the broker's ACL may refuse (a known
// reconnect loop). What the agent publishes is either retained and
// re-published after each connect (status, online) or best effort
// (events). A clean session therefore loses nothing the agent needs.
//
// Reconnecting is done here, not by paho: paho's backoff has no jitter,
// and a fleet that lost its broker would come back in lockstep. Each
// attempt uses a fresh paho client (paho warns against reusing one after
// Disconnect) with auto-reconnect off, dialled through a context-aware
// dialer so that shutdown never waits for a TCP timeout.
package session

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

// ErrNotConnected is returned by Publish while there is no connection.
var ErrNotConnected = errors.New("mqtt: not connected")

// Options configures a Session.
type Options struct {
	// Brokers are the broker URLs, the preferred first: tcp:// or mqtt://
	// (plain), ssl://, tls:// or mqtts:// (TLS); the port defaults to
	// 1883 or 8883 (schema.CheckBrokerList). The session moves to the
	// next one after each lost connection or failed attempt.
	Brokers []string
	// Broker is a list of one: used when Brokers is empty.
	Broker string
	// Device is the device name: the MQTT username and the default client
	// ID.
	Device   string
	ClientID string
	// Token is the MQTT password.
	Token string
	// TLSConfig is used for TLS brokers (nil: system roots), for every
	// broker of the list, each verified for its own host name
	// (enroll.ForBroker).
	TLSConfig *tls.Config
	Topics    schema.Topics
	Logger    *slog.Logger
	Clock     clock.Clock
	// Backoff between connection attempts (default DefaultBackoff).
	Backoff backoff.Policy
	// StableAfter: a connection that lasted this long resets the backoff
	// (default 10 s), so a broker that accepts and immediately drops the
	// agent is not hammered every second.
	StableAfter time.Duration
	// KeepAlive is the MQTT keepalive (default DefaultKeepAlive): an idle
	// session sends a ping this often, and the broker publishes the
	// device's last will after 1.5 times this without a word from it.
	KeepAlive      time.Duration
	ConnectTimeout time.Duration // default 20 s
	// OpTimeout bounds the subscribe and online publish on connect, and
	// paho's write of one packet (default 10 s).
	OpTimeout time.Duration
	// Seed feeds the jitter (0: random).
	Seed uint64

	// OnDesired receives every payload on the desired topic. It runs on
	// a goroutine paho starts for the message, off paho's router, so
	// payloads may be handled concurrently and out of order.
	OnDesired func(payload []byte)
	// OnRequest receives every payload on the device's requests topic
	// (schema.TopicRequests: the hub's logs, exec and top requests),
	// like OnDesired: on a goroutine paho starts for the message. It must
	// not block for long. Nil: the topic is not subscribed.
	OnRequest func(payload []byte)
	// OnCertificate receives every payload on the device's certificate
	// topic (schema.TopicCertificate: the hub's answer to a client
	// certificate request), like OnRequest. Nil: the topic is not
	// subscribed. A broker that refuses that one subscription (a hub
	// that predates it) does not fail the connection.
	OnCertificate func(payload []byte)
	// OnConnect runs after each successful connect, once subscribed and
	// with "online" sent (its acknowledgement may still be on its way):
	// what it publishes reaches the broker after "online". It must not
	// block.
	OnConnect func()
	// RenewalOnly, if set, is asked before each connection whether the
	// client certificate the TLS handshake presents expired: the broker
	// then admits the device only to renew it (its csr and certificate
	// topics). Such a connection subscribes to the certificate topic
	// alone, sets no will, announces nothing and is not Connected; only
	// PublishQoS0 to the csr topic goes through it, and
	// OnRenewalConnect runs instead of OnConnect. Call Reconnect once
	// the certificate is renewed. Default none.
	RenewalOnly func() bool
	// OnRenewalConnect runs after each renewal-only connection (RenewalOnly).
	OnRenewalConnect func()
}

// Session is one device's MQTT session. Run keeps it connected; Publish
// may be called from any goroutine.
type Session struct {
	o Options
	// brokers are o.Brokers parsed, with the TLS configuration of each;
	// current is the index of the broker of the connection up (-1: none).
	brokers       []brokerTarget
	current       atomic.Int32
	log           *slog.Logger
	desiredTopic  string
	requestsTopic string
	certTopic     string
	onlineTopic   string

	mu     sync.Mutex
	client mqtt.Client // nil while not connected and subscribed
	epoch  uint64
	// renewal is the renewal-only connection (Options.RenewalOnly), nil
	// otherwise; drop ends the current connection (Reconnect).
	renewal mqtt.Client
	drop    func(error)
}

// DefaultBackoff is the default reconnect backoff: jittered exponential,
// retry n waiting uniformly in [0, 250 ms·1.5ⁿ] (full jitter), capped at
// 60 s; so the first retry comes within 250 ms, the first three within
// 1.2 s, and a minute's window is reached after about 14 failures. Full
// jitter from a short start spreads a fleet that lost the same broker over
// each window instead of bunching it at the top half of it. The factor is
// 1.5, not 2: after a hub restart of about a second, doubling windows left
// 1 % of a 10,000-device fleet waiting 4.5 s or more and the last one up
// to 16 s (simulated; the scale suite's storm showed the same tail), where
// 1.5 brings them back within 2.6 s and 4 s, for a few more refused
// connection attempts while the hub is down.
var DefaultBackoff = backoff.Policy{Initial: 250 * time.Millisecond, Max: time.Minute, Jitter: backoff.FullJitter, Factor: 1.5}

// brokerTarget is one broker of the list.
type brokerTarget struct {
	url string // as given (logs, paho's server)
	u   *url.URL
	tls *tls.Config
}

// New checks the options and returns a Session.
func New(o Options) (*Session, error) {
	if err := schema.ValidateName(o.Device); err != nil {
		return nil, fmt.Errorf("session: device: %w", err)
	}
	if len(o.Brokers) == 0 && o.Broker != "" {
		o.Brokers = []string{o.Broker}
	}
	us, err := schema.CheckBrokerList(o.Brokers)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	targets := make([]brokerTarget, len(us))
	for i, u := range us {
		targets[i] = brokerTarget{url: o.Brokers[i], u: u, tls: enroll.ForBroker(o.TLSConfig, u)}
	}
	if o.ClientID == "" {
		o.ClientID = o.Device
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Backoff == (backoff.Policy{}) {
		o.Backoff = DefaultBackoff
	}
	if o.StableAfter <= 0 {
		o.StableAfter = 10 * time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 20 * time.Second
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.OnDesired == nil {
		o.OnDesired = func([]byte) {}
	}
	if o.OnConnect == nil {
		o.OnConnect = func() {}
	}
	s := &Session{
		o:             o,
		brokers:       targets,
		log:           o.Logger,
		desiredTopic:  o.Topics.Device(o.Device, schema.TopicDesired),
		requestsTopic: o.Topics.Device(o.Device, schema.TopicRequests),
		certTopic:     o.Topics.Device(o.Device, schema.TopicCertificate),
		onlineTopic:   o.Topics.Device(o.Device, schema.TopicOnline),
	}
	s.current.Store(-1)
	return s, nil
}

// Broker returns the URL of the broker the session is connected to, ""
// while it is not.
func (s *Session) Broker() string {
	if i := s.current.Load(); i >= 0 && s.Connected() {
		return s.brokers[i].url
	}
	return ""
}

// Brokers returns the broker URLs, in the order they are tried.
func (s *Session) Brokers() []string { return append([]string(nil), s.o.Brokers...) }

// Connected reports whether the session is connected and subscribed.
func (s *Session) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client != nil
}

// Publish sends payload at QoS 1 and waits for the broker's PUBACK, at
// most until ctx is done. It fails at once with ErrNotConnected while
// offline: status and events are re-sent after reconnecting, never queued
// in paho.
func (s *Session) Publish(ctx context.Context, topic string, retained bool, payload []byte) error {
	s.mu.Lock()
	c := s.client
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("publish %s: %w", topic, ErrNotConnected)
	}
	tok := c.Publish(topic, 1, retained, payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("publish %s: %w", topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("publish %s: %w", topic, ctx.Err())
	}
}

// PublishQoS0 sends payload at QoS 0, not retained, and waits until paho
// wrote it: for a request the caller repeats anyway, which a broker
// whose ACL predates its topic may drop without ending the session. It
// fails at once with ErrNotConnected while offline.
func (s *Session) PublishQoS0(ctx context.Context, topic string, payload []byte) error {
	s.mu.Lock()
	c := s.client
	if c == nil && s.renewal != nil && topic == s.o.Topics.Device(s.o.Device, schema.TopicCSR) {
		c = s.renewal // the one topic a renewal-only session may publish
	}
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("publish %s: %w", topic, ErrNotConnected)
	}
	tok := c.Publish(topic, 0, false, payload)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("publish %s: %w", topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("publish %s: %w", topic, ctx.Err())
	}
}

// RenewalOnly reports whether the session is connected for renewing its
// expired client certificate alone (Options.RenewalOnly).
func (s *Session) RenewalOnly() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewal != nil
}

// Reconnect ends the current connection, if any; Run connects again
// (after its backoff), with the client certificate of the moment.
func (s *Session) Reconnect() {
	s.mu.Lock()
	drop := s.drop
	s.mu.Unlock()
	if drop != nil {
		drop(errors.New("reconnecting with the renewed client certificate"))
	}
}

// DefaultKeepAlive is Options.KeepAlive's default. An idle device's
// traffic is its keepalive (a ping and its answer, about 160 bytes with
// TCP/IP headers, 200 over TLS): 120 s makes that about 115-150 KB a day,
// and a device that vanished is declared offline within 3 minutes.
// Azure IoT's SDKs default to 240 s, AWS IoT's to 1,200 s.
const DefaultKeepAlive = 120 * time.Second

// Run keeps the session connected until ctx is done, then announces
// "offline" and disconnects. It returns nil after ctx is done.
//
// With several brokers, each attempt after a lost connection or a failed
// attempt goes to the next broker of the list (round-robin). The backoff
// counts a lost connection and each round of failed attempts (every broker
// of the list tried once); within a round, the wait before the next broker
// is drawn from [0, the backoff's first delay]. A connection that lasted
// StableAfter resets it.
func (s *Session) Run(ctx context.Context) error {
	b := backoff.New(s.o.Backoff, s.o.Seed)
	hopSeed := s.o.Seed
	if hopSeed != 0 {
		hopSeed++ // 0 stays random
	}
	hop := backoff.New(backoff.Policy{Initial: s.o.Backoff.Initial, Max: s.o.Backoff.Initial, Jitter: backoff.FullJitter}, hopSeed)
	failed := 0 // attempts failed in a row since the last connection
	for i := 0; ; i = (i + 1) % len(s.brokers) {
		up, err := s.connectOnce(ctx, i)
		if ctx.Err() != nil {
			return nil
		}
		if up >= s.o.StableAfter {
			b.Reset()
		}
		var d time.Duration
		if up == 0 {
			failed++
		} else {
			failed = 0
		}
		if up == 0 && failed%len(s.brokers) != 0 {
			d = hop.Next() // the next broker of this round
		} else {
			d = b.Next()
		}
		attrs := []any{"broker", s.brokers[i].url, "err", err}
		if len(s.brokers) > 1 {
			attrs = append(attrs, "next_broker", s.brokers[(i+1)%len(s.brokers)].url)
		}
		if up > 0 {
			s.log.Warn("mqtt connection lost", append(attrs, "was_up", up.Round(time.Millisecond), "retry_in", d.Round(time.Millisecond))...)
		} else {
			s.log.Warn("mqtt connect failed", append(attrs, "failures", b.Failures(), "retry_in", d.Round(time.Millisecond))...)
		}
		t := s.o.Clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// connectOnce runs one connection to broker i: it returns how long the
// connection was up (0 if it never came up) and why it ended.
func (s *Session) connectOnce(ctx context.Context, i int) (time.Duration, error) {
	target := s.brokers[i]
	// cctx scopes this connection: it is not cancelled by ctx directly, so
	// that on shutdown the connection survives long enough to announce
	// "offline"; connectOnce cancels it on every way out.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	lost := make(chan error, 1)
	fail := func(err error) {
		select {
		case lost <- err:
		default:
		}
	}
	// The network connection first, and paho only once it is up: while
	// the broker is away every attempt is refused, and a bare dial costs
	// a device (or a simulator running thousands of them) a third of
	// what building and tearing down a paho client does.
	conn, err := s.open(ctx, cctx, target)
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", target.url, err)
	}
	var handed atomic.Bool
	openConn := func() (net.Conn, error) {
		if handed.Swap(true) {
			return nil, errors.New("connection already used")
		}
		return conn, nil
	}
	renewal := s.o.RenewalOnly != nil && s.o.RenewalOnly()
	s.mu.Lock()
	s.epoch++
	epoch := s.epoch
	s.drop = fail
	s.mu.Unlock()
	s.current.Store(int32(i))

	opts := mqttio.ClientOptions(target.url, s.o.ClientID, s.o.Device, s.o.Token, s.o.ConnectTimeout, openConn).
		SetKeepAlive(s.o.KeepAlive).
		SetPingTimeout(min(s.o.KeepAlive, 10*time.Second)).
		SetWriteTimeout(s.o.OpTimeout).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { fail(err) }).
		SetOnConnectHandler(func(c mqtt.Client) {
			on := s.onConnect
			if renewal {
				on = s.onRenewalConnect
			}
			if err := on(cctx, c, epoch); err != nil {
				fail(err)
			}
		})
	if !renewal {
		// A renewal-only session may publish no will (only its csr).
		opts.SetWill(s.onlineTopic, schema.Offline, 1, true)
	}
	client := mqtt.NewClient(opts)
	tok := client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		cancel() // aborts the dial; the handshake is bounded by ConnectTimeout
		<-tok.Done()
		client.Disconnect(0)
		return 0, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		return 0, fmt.Errorf("connect to %s: %w", target.url, err)
	}
	start := s.o.Clock.Now()
	select {
	case err := <-lost:
		s.offline(epoch)
		client.Disconnect(0)
		return max(s.o.Clock.Now().Sub(start), time.Nanosecond), err
	case <-ctx.Done():
		s.offline(epoch)
		if renewal {
			client.Disconnect(250)
			return max(s.o.Clock.Now().Sub(start), time.Nanosecond), ctx.Err()
		}
		// A clean disconnect does not fire the will: say it ourselves.
		t := client.Publish(s.onlineTopic, 1, true, schema.Offline)
		if !t.WaitTimeout(2 * time.Second) {
			s.log.Warn("announce offline timed out")
		} else if err := t.Error(); err != nil {
			s.log.Warn("announce offline failed", "err", err)
		}
		client.Disconnect(250)
		return max(s.o.Clock.Now().Sub(start), time.Nanosecond), ctx.Err()
	}
}

// onConnect subscribes to the desired topic and announces online. It runs
// on the goroutine paho starts for each connect.
func (s *Session) onConnect(ctx context.Context, c mqtt.Client, epoch uint64) error {
	// One SUBSCRIBE for both topics: one round trip per connect.
	topics := map[string]byte{s.desiredTopic: 1}
	if s.o.OnRequest != nil {
		topics[s.requestsTopic] = 1
	}
	if s.o.OnCertificate != nil {
		topics[s.certTopic] = 1
	}
	sub := c.SubscribeMultiple(topics, func(_ mqtt.Client, m mqtt.Message) {
		switch m.Topic() {
		case s.desiredTopic:
			s.o.OnDesired(m.Payload())
		case s.requestsTopic:
			if s.o.OnRequest != nil {
				s.o.OnRequest(m.Payload())
			}
		case s.certTopic:
			if s.o.OnCertificate != nil {
				s.o.OnCertificate(m.Payload())
			}
		}
	})
	if err := wait(ctx, sub, s.o.OpTimeout); err != nil {
		return fmt.Errorf("subscribe %s: %w", s.desiredTopic, err)
	}
	if st, ok := sub.(*mqtt.SubscribeToken); ok {
		for topic, code := range st.Result() {
			if code >= 0x80 && topic == s.certTopic {
				s.log.Warn("the broker refused the certificate topic: client certificates are not renewed over MQTT on this hub", "topic", topic)
				continue
			}
			if code >= 0x80 {
				return fmt.Errorf("subscribe %s: refused by broker (code %#x)", topic, code)
			}
		}
	}
	// "online" and what OnConnect publishes (the fresh status) go out
	// back to back: paho sends publishes in the order they are made, so
	// the broker still sees "online" first, and the status does not wait
	// a round trip for its acknowledgement. After a hub restart, when the
	// whole fleet reconnects to a busy broker, that round trip is the
	// longest (and on a slow link it is the link's).
	pub := c.Publish(s.onlineTopic, 1, true, schema.Online)
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock()
		return errors.New("connection superseded")
	}
	s.client = c
	s.mu.Unlock()
	s.log.Info("mqtt connected", "broker", s.brokerURL(), "subscribed", s.desiredTopic)
	s.o.OnConnect()
	if err := wait(ctx, pub, s.o.OpTimeout); err != nil {
		return fmt.Errorf("announce online: %w", err)
	}
	return nil
}

// brokerURL is the URL of the broker of the latest connection.
func (s *Session) brokerURL() string {
	if i := s.current.Load(); i >= 0 {
		return s.brokers[i].url
	}
	return ""
}

func (s *Session) offline(epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch == epoch {
		s.client, s.renewal = nil, nil
	}
}

// onRenewalConnect subscribes to the certificate topic alone, for a
// connection whose client certificate expired (Options.RenewalOnly).
func (s *Session) onRenewalConnect(ctx context.Context, c mqtt.Client, epoch uint64) error {
	sub := c.Subscribe(s.certTopic, 1, func(_ mqtt.Client, m mqtt.Message) {
		if s.o.OnCertificate != nil {
			s.o.OnCertificate(m.Payload())
		}
	})
	if err := wait(ctx, sub, s.o.OpTimeout); err != nil {
		return fmt.Errorf("subscribe %s: %w", s.certTopic, err)
	}
	if st, ok := sub.(*mqtt.SubscribeToken); ok && st.Result()[s.certTopic] >= 0x80 {
		return fmt.Errorf("subscribe %s: refused by broker: the expired client certificate cannot be renewed over MQTT on this hub", s.certTopic)
	}
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock()
		return errors.New("connection superseded")
	}
	s.renewal = c
	s.mu.Unlock()
	s.log.Warn("mqtt connected with an expired client certificate: renewing it before anything else", "broker", s.brokerURL())
	if s.o.OnRenewalConnect != nil {
		s.o.OnRenewalConnect()
	}
	return nil
}

func wait(ctx context.Context, t mqtt.Token, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return errors.New("timed out")
	}
}

// open dials the broker. The dial is abandoned when ctx is done; the
// connection lives no longer than life, so that closing it on cancel also
// cuts short an MQTT handshake the broker never answers.
func (s *Session) open(ctx, life context.Context, target brokerTarget) (net.Conn, error) {
	conn, err := mqttio.Dial(ctx, target.u, target.tls, s.o.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(life, func() { _ = conn.Close() })
	// Buffered: paho reads a packet in three or more system calls, most
	// of what receiving an acknowledgement costs a small device.
	return mqttio.BufferedConn(conn, 0), nil
}
