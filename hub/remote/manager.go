package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	// DefaultFirstResponseTimeout bounds the wait for a device's first
	// answer to a logs or exec request.
	DefaultFirstResponseTimeout = 10 * time.Second
	// DefaultTopTimeout bounds a top request.
	DefaultTopTimeout = 5 * time.Second
	// DefaultWriteTimeout bounds each write to an HTTP client.
	DefaultWriteTimeout = 30 * time.Second
	// maxResponsePayload bounds a response payload: a chunk of
	// MaxChunkBytes in base64 and JSON, or a top report.
	maxResponsePayload = 256 << 10
	// cancelTimeout bounds the publish of a cancel after the client left.
	cancelTimeout = 5 * time.Second
	// logEvery limits the logs of dropped responses to one per reason
	// per interval.
	logEvery = 5 * time.Second
)

// Conn is the part of the hub's MQTT connection the manager uses;
// broker.Conn is one.
type Conn interface {
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
	Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error
}

// RequestSigner signs a request's canonical bytes (schema/requestsig.go);
// pki.Signer is one.
type RequestSigner interface {
	SignRequest(canonical []byte) ([]byte, error)
}

// Options configure a Manager. Conn, Model and Signer are required.
type Options struct {
	Conn Conn
	// Signer signs every request sent to a device, with the key devices
	// pin: a device acts on no request it cannot verify.
	Signer RequestSigner
	// Model is the fleet model: which devices exist and are online, their
	// crash reports; the manager adds hub events (audit) and top reports.
	Model  *fleetmodel.Model
	Topics schema.Topics
	Logger *slog.Logger
	// Metrics, if set, gets the fleet_remote_* figures.
	Metrics *metrics.Metrics
	// FirstResponseTimeout: a device that has not answered a logs or exec
	// request within it gets a cancel, the client a 504; default
	// DefaultFirstResponseTimeout.
	FirstResponseTimeout time.Duration
	// TopTimeout bounds top requests; default DefaultTopTimeout.
	TopTimeout time.Duration
	// Keepalive is how often an open stream's ack is repeated; default
	// schema.RequestKeepalive.
	Keepalive time.Duration
	// Window is the flow-control window of streams; default
	// schema.DefaultRequestWindow, at most schema.MaxRequestWindow.
	Window int
	// WriteTimeout bounds each write to an HTTP client; default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FirstResponseTimeout <= 0 {
		o.FirstResponseTimeout = DefaultFirstResponseTimeout
	}
	if o.TopTimeout <= 0 {
		o.TopTimeout = DefaultTopTimeout
	}
	if o.Keepalive <= 0 {
		o.Keepalive = schema.RequestKeepalive
	}
	if o.Window <= 0 {
		o.Window = schema.DefaultRequestWindow
	}
	o.Window = min(o.Window, schema.MaxRequestWindow)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
}

// Manager sends requests to devices and routes their responses to the
// operation that waits for them. Create it with New, Subscribe it, and
// Register its routes.
type Manager struct {
	opts  Options
	log   *slog.Logger
	model *fleetmodel.Model
	m     *metrics.Metrics

	mu  sync.Mutex
	ops map[string]*op

	stopOnce sync.Once
	stop     chan struct{}

	logMu      sync.Mutex
	lastLog    map[string]time.Time
	suppressed map[string]int

	// beforeTake, if set (tests), runs before a stream takes a response:
	// a slow client, made deterministic.
	beforeTake func()
}

// New returns a Manager.
func New(opts Options) (*Manager, error) {
	opts.setDefaults()
	if opts.Conn == nil || opts.Model == nil || opts.Signer == nil {
		return nil, errors.New("new remote manager: Conn, Model and Signer are required")
	}
	return &Manager{
		opts: opts, log: opts.Logger, model: opts.Model, m: opts.Metrics,
		ops:        map[string]*op{},
		stop:       make(chan struct{}),
		lastLog:    map[string]time.Time{},
		suppressed: map[string]int{},
	}, nil
}

// Subscribe subscribes to every device's responses topic.
func (m *Manager) Subscribe(ctx context.Context) error {
	if err := m.opts.Conn.Subscribe(ctx, m.opts.Topics.DeviceFilter(schema.TopicResponses), m.Handle); err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	return nil
}

// Stop ends every open stream (the client gets an error and the device a
// cancel) and refuses new ones: the hub is shutting down.
func (m *Manager) Stop() { m.stopOnce.Do(func() { close(m.stop) }) }

// StopOnClose returns ln, which calls Stop when it is closed: an
// http.Server's Shutdown closes its listeners first, then waits for the
// requests in flight (which Stop ends). Hijacked exec connections are not
// waited for by Shutdown; Stop ends them too.
func (m *Manager) StopOnClose(ln net.Listener) net.Listener {
	return &stopListener{Listener: ln, stop: m.Stop}
}

type stopListener struct {
	net.Listener
	stop func()
}

func (l *stopListener) Close() error {
	l.stop()
	return l.Listener.Close()
}

// DeviceOnline is called when a device comes back online: its open
// streams repeat their ack at once, so that a device that lost messages
// while it was away resumes without waiting for the keepalive.
func (m *Manager) DeviceOnline(device string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.ops {
		if o.device == device && o.stream {
			signal(o.kick)
		}
	}
}

// Handle processes one message of a responses topic; it is the
// subscription's handler. It never blocks.
func (m *Manager) Handle(topic string, payload []byte) {
	device, kind, err := m.opts.Topics.ParseDevice(topic)
	if err != nil || kind != schema.TopicResponses {
		m.drop(dropMalformed, "", fmt.Errorf("topic %q: not a responses topic", schema.Truncate(topic, 64, "...")))
		return
	}
	if len(payload) > maxResponsePayload {
		m.drop(dropTooLarge, device, fmt.Errorf("payload of %d bytes, more than %d", len(payload), maxResponsePayload))
		return
	}
	r, err := schema.DecodeResponse(payload)
	if err != nil {
		m.drop(dropMalformed, device, err)
		return
	}
	if r.Device != device {
		m.drop(dropMismatch, device, fmt.Errorf("response %s names device %q", r.ID, schema.Truncate(r.Device, 64, "...")))
		return
	}
	m.mu.Lock()
	o := m.ops[r.ID]
	m.mu.Unlock()
	if (o == nil || o.device != device) && r.Done && r.Code == schema.CodeUnauthenticated {
		// The device refused a request the hub did not send it (maybe
		// one the hub sent another device): someone else publishes on
		// its requests topic.
		m.drop(dropForgedRefused, device, fmt.Errorf("device refused request %s, which the hub did not send: %s", r.ID, schema.Truncate(r.Error, 200, "...")))
		m.forgedRefused(device, r)
		return
	}
	if o == nil {
		m.drop(dropUnknownID, device, fmt.Errorf("response %s: no such request open", r.ID))
		return
	}
	if o.device != device {
		m.drop(dropMismatch, device, fmt.Errorf("response %s: the request went to device %s", r.ID, o.device))
		return
	}
	if reason := o.receive(r); reason != "" {
		m.drop(reason, device, fmt.Errorf("response %s seq %d", r.ID, r.Seq))
	}
}

// drop counts and (rate-limited) logs a refused response. The payload is
// never logged.
func (m *Manager) drop(reason, device string, err error) {
	if m.m != nil {
		m.m.RemoteResponsesDropped.WithLabelValues(reason).Inc()
	}
	now := time.Now()
	m.logMu.Lock()
	if now.Sub(m.lastLog[reason]) < logEvery {
		m.suppressed[reason]++
		m.logMu.Unlock()
		return
	}
	n := m.suppressed[reason]
	m.lastLog[reason], m.suppressed[reason] = now, 0
	m.logMu.Unlock()
	m.log.Warn("device response dropped", "device", device, "reason", reason, "err", err, "suppressed_since_last_log", n)
}

// errUnreachable: the hub could not publish the request (no broker).
var errUnreachable = errors.New("the hub cannot reach the MQTT broker")

// open registers an operation and sends its request. req gets the op's
// ID, device, window and deadline.
func (m *Manager) open(ctx context.Context, device string, req schema.Request, stream bool, deadline time.Duration) (*op, error) {
	select {
	case <-m.stop:
		return nil, errStopping
	default:
	}
	var b [schema.RequestIDBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("request id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	o := newOp(id, device, req.Op, m.opts.Window, stream)
	m.mu.Lock()
	m.ops[id] = o
	m.mu.Unlock()
	if stream && m.m != nil {
		m.m.RemoteOpenStreams.Inc()
	}
	req.ID, req.Device = id, device
	if stream {
		req.Window = o.window
	}
	req.Deadline = time.Now().Add(deadline).UTC()
	if err := m.send(ctx, req); err != nil {
		m.forget(o)
		return nil, fmt.Errorf("%w: send %s request to device %s: %w", errUnreachable, req.Op, device, err)
	}
	return o, nil
}

// forget removes the op: later responses to it are dropped.
func (m *Manager) forget(o *op) {
	m.mu.Lock()
	_, ok := m.ops[o.id]
	delete(m.ops, o.id)
	m.mu.Unlock()
	if ok && o.stream && m.m != nil {
		m.m.RemoteOpenStreams.Dec()
	}
}

// close ends the op: unless the device ended it, the device is told to
// cancel it. result is counted in fleet_remote_requests_total.
func (m *Manager) close(o *op, result string) {
	m.forget(o)
	if !o.finished() {
		ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
		defer cancel()
		if err := m.send(ctx, schema.Request{ID: o.id, Device: o.device, Op: schema.OpCancel}); err != nil {
			m.log.Debug("cancel request", "device", o.device, "op", o.kind, "err", err)
		}
	}
	if m.m != nil {
		m.m.RemoteRequests.WithLabelValues(o.kind, result).Inc()
	}
}

// send signs and publishes a request (QoS 1, not retained). Every
// request to a device goes through here: signed, with a fresh nonce and
// expiry (schema/requestsig.go).
func (m *Manager) send(ctx context.Context, req schema.Request) error {
	req.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest}
	b, err := schema.EncodeSignedRequest(&req, time.Now(), m.opts.Signer.SignRequest)
	if err != nil {
		return fmt.Errorf("sign %s request: %w", req.Op, err)
	}
	return m.opts.Conn.Publish(ctx, m.opts.Topics.Device(req.Device, schema.TopicRequests), b, false)
}

// ack sends the op's ack if one is due (or force).
func (m *Manager) ack(ctx context.Context, o *op, force bool) {
	n, ok := o.ackDue(force)
	if !ok {
		return
	}
	// Counted as sent before it is: the device may answer it before
	// Publish returns. One that is lost is repeated by the keepalive.
	o.ackSent(n)
	if err := m.send(ctx, schema.Request{ID: o.id, Device: o.device, Op: schema.OpAck, Ack: n}); err != nil {
		m.log.Debug("ack", "device", o.device, "op", o.kind, "err", err)
	}
}

// errStopping: the hub is shutting down.
var errStopping = errors.New("the hub is shutting down")

// errNoAnswer: the device did not answer in time.
var errNoAnswer = errors.New("no answer")

// waitFirst waits for the op's first response (left in its queue) until
// timeout, ctx or Stop.
func (m *Manager) waitFirst(ctx context.Context, o *op, timeout time.Duration) (*schema.Response, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		r, err := o.peek()
		if r != nil || err != nil {
			return r, err
		}
		select {
		case <-o.wake:
		case <-t.C:
			return nil, errNoAnswer
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-m.stop:
			return nil, errStopping
		}
	}
}

// begin opens a streaming op of req on device and waits for the
// device's first response. When either fails, the op is closed and the
// status says why (what names the operation in its message); otherwise
// the caller owns o and closes it.
func (m *Manager) begin(ctx context.Context, device string, req schema.Request, what string) (*op, *schema.Response, *schema.Status) {
	o, err := m.open(ctx, device, req, true, m.opts.FirstResponseTimeout)
	if err != nil {
		st, _ := statusForErr(device, what, err, m.opts.FirstResponseTimeout)
		return nil, nil, &st
	}
	first, err := m.waitFirst(ctx, o, m.opts.FirstResponseTimeout)
	if err != nil {
		st, result := statusForErr(device, what, err, m.opts.FirstResponseTimeout)
		m.close(o, result)
		return nil, nil, &st
	}
	return o, first, nil
}

// openOps returns how many operations are open (tests).
func (m *Manager) openOps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ops)
}

// lookupOp returns an open op by device (tests).
func (m *Manager) opsOf(device string) []*op {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*op
	for _, o := range m.ops {
		if o.device == device {
			out = append(out, o)
		}
	}
	return out
}
