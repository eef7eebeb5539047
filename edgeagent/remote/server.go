// Package remote answers the hub's requests to the device (schema
// remote.go): container logs, exec and live metrics (top), over the
// agent's MQTT session. Requests arrive on the device's requests topic
// (Server.Handle, from the session); responses go to its responses
// topic through the agent's publisher.
//
// Each operation (logs, exec, top) runs on its own goroutine, at most
// schema.MaxConcurrentRequests at once, keyed by its request ID; ack,
// stdin, resize and cancel requests go to the live operation with their
// ID. Streams are flow-controlled: at most Window responses the hub has
// not acknowledged, each with at most schema.MaxChunkBytes of data; a
// stream that hears nothing from the hub for the lease
// (schema.RequestLease) is cancelled. A publish that fails (the session
// is down) is retried with backoff until the lease expires, so a brief
// reconnect loses nothing. Every operation ends with exactly one Done
// response.
//
// Nothing of a request is acted on before the Verifier authenticated it
// (schema/requestsig.go): signed with the hub key the agent pinned, for
// this device, not expired, not replayed. An opening request refused so
// is answered with a Done of code schema.CodeUnauthenticated (at most
// refusalsPerSecond a second); a refused follow-up is dropped.
package remote

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/edgeagent/remote/logfile"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// Publisher sends one MQTT message (session.Session in the agent).
type Publisher interface {
	Publish(ctx context.Context, topic string, retained bool, payload []byte) error
}

// Options configure a Server. Device, Publisher, Runtime and Key (or
// Verifier) are required; every other zero value means the documented
// default.
type Options struct {
	Device    string
	Topics    schema.Topics
	Publisher Publisher
	Runtime   runtime.Runtime
	// Key returns the hub signing key the agent pinned (trust.Pin's Key),
	// nil while none is: requests are verified with it.
	Key func() ed25519.PublicKey
	// Verifier, if set, authenticates requests instead of one made of
	// Key: the agent shares one among every part that takes requests.
	Verifier *Verifier
	// LogPath returns a container's log file (state.Dir.LogPath).
	// Required for logs.
	LogPath func(pod, container string) string
	// Pods returns the containers of each pod of the desired state the
	// agent holds (nil: only what the runtime lists is known).
	Pods   func() map[string][]string
	Logger *slog.Logger
	// Node measures the device for top (default: ReadNode with
	// StateDir and the runtime's DiskSpace).
	Node     func(ctx context.Context) schema.NodeMetrics
	StateDir string

	// Lease cancels a stream that heard nothing from the hub for this
	// long (default schema.RequestLease).
	Lease time.Duration
	// FollowInterval is how often a followed log is polled (default
	// 200 ms).
	FollowInterval time.Duration
	// IndexInterval is how often the log files are sampled to date
	// their lines (default 5 s; negative disables: lines are dated by
	// their file's modification time).
	IndexInterval time.Duration
	// PublishTimeout bounds one publish attempt (default 10 s).
	PublishTimeout time.Duration
	// RetryInitial and RetryMax are the backoff of a failed publish
	// (defaults 100 ms and 2 s).
	RetryInitial, RetryMax time.Duration
	// Now is the time (default time.Now).
	Now func() time.Time
}

// Stats count the requests a Server saw.
type Stats struct {
	// Started counts operations run; Refused those refused for
	// MaxConcurrentRequests.
	Started, Refused int64
	// Invalid, OtherDevice, Late, Duplicate and Unknown count requests
	// ignored: undecodable, for another device, past their deadline, a
	// new operation with a live ID, a control request for no live
	// operation.
	Invalid, OtherDevice, Late, Duplicate, Unknown int64
	// Unauthenticated counts requests refused by the Verifier (for another
	// device among them: OtherDevice counts those too).
	Unauthenticated int64
}

// Server answers requests. Handle may be called from any goroutine.
type Server struct {
	o     Options
	log   *slog.Logger
	topic string
	index *logfile.Index

	counts   struct{ started, refused, invalid, other, late, dup, unknown, unauth atomic.Int64 }
	refusing atomic.Int32 // refusals being published
	verifier *Verifier
	limit    refusalLimit

	mu      sync.Mutex
	ctx     context.Context // Run's; nil while not running
	ops     map[string]*op
	wg      sync.WaitGroup
	cpuPrev map[string]cpuSample // by container ID, for top
}

// New returns a Server; Run starts it.
func New(o Options) (*Server, error) {
	if err := schema.ValidateName(o.Device); err != nil {
		return nil, fmt.Errorf("remote: device: %w", err)
	}
	if o.Publisher == nil || o.Runtime == nil {
		return nil, errors.New("remote: a Publisher and a Runtime are required")
	}
	if o.Key == nil && o.Verifier == nil {
		return nil, errors.New("remote: a Key (the pinned hub key) or a Verifier is required: requests are authenticated")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Lease <= 0 {
		o.Lease = schema.RequestLease
	}
	if o.FollowInterval <= 0 {
		o.FollowInterval = 200 * time.Millisecond
	}
	if o.IndexInterval == 0 {
		o.IndexInterval = 5 * time.Second
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 10 * time.Second
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{
		o:       o,
		log:     o.Logger,
		topic:   o.Topics.Device(o.Device, schema.TopicResponses),
		index:   logfile.NewIndex(),
		ops:     map[string]*op{},
		cpuPrev: map[string]cpuSample{},
	}
	s.verifier = o.Verifier
	if s.verifier == nil {
		s.verifier = NewVerifier(o.Device, o.Key, o.Now)
	}
	if s.o.Node == nil {
		s.o.Node = func(ctx context.Context) schema.NodeMetrics { return ReadNode(ctx, o.StateDir, o.Runtime) }
	}
	return s, nil
}

// Stats returns the request counters.
func (s *Server) Stats() Stats {
	return Stats{
		Started: s.counts.started.Load(), Refused: s.counts.refused.Load(),
		Invalid: s.counts.invalid.Load(), OtherDevice: s.counts.other.Load(), Late: s.counts.late.Load(),
		Duplicate: s.counts.dup.Load(), Unknown: s.counts.unknown.Load(), Unauthenticated: s.counts.unauth.Load(),
	}
}

// Live returns the number of operations running.
func (s *Server) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ops)
}

// Run serves requests until ctx is done, sampling the log files for
// dates meanwhile; it returns once every operation has ended.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.ctx = nil
		s.mu.Unlock()
		s.wg.Wait()
	}()
	if s.o.IndexInterval < 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(s.o.IndexInterval)
	defer t.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweep samples the log file of every container of the desired state.
func (s *Server) sweep(ctx context.Context) {
	if s.o.LogPath == nil || s.o.Pods == nil {
		return
	}
	var live []string
	for pod, ctrs := range s.o.Pods() {
		for _, c := range ctrs {
			live = append(live, s.o.LogPath(pod, c))
		}
	}
	if ctx.Err() == nil {
		s.index.Sweep(live, s.o.Now())
	}
}

// Handle takes one payload of the requests topic. It never blocks for
// long: operations run on their own goroutines. Nothing of the payload is
// acted on before the Verifier authenticated it.
func (s *Server) Handle(payload []byte) {
	if len(payload) > maxRequestPayload {
		s.reject(payload, fmt.Errorf("%w: a request of %d bytes, at most %d", schema.ErrRequestMalformed, len(payload), maxRequestPayload))
		return
	}
	r, err := Verify(s.verifier, schema.KindRequest, payload, schema.DecodeRequest)
	if err != nil {
		s.reject(payload, err)
		return
	}
	if r.Device != s.o.Device { // checked by the Verifier: never true
		s.counts.other.Add(1)
		return
	}
	switch r.Op {
	case schema.OpLogs, schema.OpExec, schema.OpTop:
		s.start(r)
	default:
		s.mu.Lock()
		o := s.ops[r.ID]
		s.mu.Unlock()
		if o == nil {
			s.counts.unknown.Add(1)
			s.log.Debug("ignoring request for no live operation", "op", r.Op, "id", r.ID)
			return
		}
		o.control(r)
	}
}

// maxRequestPayload bounds a request payload: a 64 KiB command escaped,
// or a chunk of input in base64, with room to spare.
const maxRequestPayload = 512 << 10

// reject counts and answers a request Handle does not act on: refused
// (not authentic) or, authentic, invalid.
func (s *Server) reject(payload []byte, err error) {
	code := schema.CodeBadRequest
	switch {
	case errors.Is(err, schema.ErrRequestRefused):
		s.counts.unauth.Add(1)
		if errors.Is(err, schema.ErrRequestOtherDevice) {
			s.counts.other.Add(1)
		}
		code = schema.CodeUnauthenticated
	case errors.Is(err, errNoncesFull):
		s.counts.refused.Add(1)
		code = schema.CodeTooManyRequests
	default:
		s.counts.invalid.Add(1)
	}
	if !s.limit.allow(s.o.Now()) {
		return // a flood: counted, neither logged nor answered
	}
	id, op := peekRequest(payload)
	s.log.Warn("request refused: nothing done", "id", id, "op", op, "code", code, "err", err)
	if id == "" || (op != schema.OpLogs && op != schema.OpExec && op != schema.OpTop) {
		return // a follow-up: an answer would end the hub's live stream of that ID
	}
	s.mu.Lock()
	ctx, live := s.ctx, s.ops[id] != nil
	s.mu.Unlock()
	if ctx == nil || live {
		return
	}
	s.refuse(ctx, id, code, fmt.Sprintf("device %s refused request %s: %v", s.o.Device, id, err))
}

// peekRequest reads the ID and op of a payload not authenticated, to
// address a refusal; "" when they do not decode.
func peekRequest(payload []byte) (id, op string) {
	var r struct {
		ID string `json:"id"`
		Op string `json:"op"`
	}
	if json.Unmarshal(payload, &r) != nil || schema.ValidateRequestIDHex(r.ID) != nil {
		return "", ""
	}
	return r.ID, schema.Truncate(r.Op, 16, "...")
}

// refusalsPerSecond bounds the refusals a device logs and answers.
const refusalsPerSecond = 20

// refusalLimit allows refusalsPerSecond a second.
type refusalLimit struct {
	mu    sync.Mutex
	start time.Time
	n     int
}

func (l *refusalLimit) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= time.Second || now.Before(l.start) {
		l.start, l.n = now, 0
	}
	l.n++
	return l.n <= refusalsPerSecond
}

func (s *Server) start(r *schema.Request) {
	if !r.Deadline.IsZero() && s.o.Now().After(r.Deadline) {
		s.counts.late.Add(1)
		s.log.Info("ignoring request past its deadline", "op", r.Op, "id", r.ID, "deadline", r.Deadline)
		return
	}
	s.mu.Lock()
	ctx := s.ctx
	if ctx == nil || ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	if _, ok := s.ops[r.ID]; ok {
		s.mu.Unlock()
		s.counts.dup.Add(1)
		return
	}
	if len(s.ops) >= schema.MaxConcurrentRequests {
		s.mu.Unlock()
		s.counts.refused.Add(1)
		s.refuse(ctx, r.ID, schema.CodeTooManyRequests,
			fmt.Sprintf("device %s runs %d requests already; try again later", s.o.Device, schema.MaxConcurrentRequests))
		return
	}
	o := newOp(s, ctx, r)
	s.ops[r.ID] = o
	s.wg.Add(1)
	s.mu.Unlock()
	s.counts.started.Add(1)
	go func() {
		defer s.wg.Done()
		o.run()
		s.mu.Lock()
		delete(s.ops, r.ID)
		s.mu.Unlock()
	}()
}

// refuse answers Done with code and msg, best effort: a flood of
// requests gets at most MaxConcurrentRequests refusals in flight, the
// rest none.
func (s *Server) refuse(ctx context.Context, id, code, msg string) {
	if s.refusing.Add(1) > schema.MaxConcurrentRequests {
		s.refusing.Add(-1)
		return
	}
	s.mu.Lock()
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer s.refusing.Add(-1)
		payload := s.encode(&schema.Response{ID: id, Seq: 1, Done: true, Code: code, Error: msg})
		pctx, cancel := context.WithTimeout(ctx, s.o.PublishTimeout)
		defer cancel()
		if err := s.o.Publisher.Publish(pctx, s.topic, false, payload); err != nil {
			s.log.Debug("refusal not sent", "id", id, "err", err)
		}
	}()
}

func (s *Server) encode(resp *schema.Response) []byte {
	resp.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse}
	resp.Device = s.o.Device
	b, err := json.Marshal(resp)
	if err != nil { // only a Top with a figure JSON cannot hold (NaN)
		s.log.Error("encode response", "id", resp.ID, "err", err)
		b, _ = json.Marshal(&schema.Response{TypeMeta: resp.TypeMeta, ID: resp.ID, Device: resp.Device, Seq: resp.Seq,
			Done: true, Code: schema.CodeInternal, Error: "encode response: " + err.Error()})
	}
	return b
}
