package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// EventsOptions configures Events.
type EventsOptions struct {
	Device    string
	Topic     string // the device's events topic
	Publisher Publisher
	Clock     clock.Clock
	Logger    *slog.Logger
	// PerKeyBurst events with the same reason, pod and container pass at
	// once; then one per PerKeyInterval (defaults 3 and 1 min).
	PerKeyBurst    int
	PerKeyInterval time.Duration
	// Burst and Interval limit all events together (defaults 20 and 1 s).
	Burst    int
	Interval time.Duration
	// QueueSize bounds events waiting for the connection (default 64;
	// the oldest are dropped).
	QueueSize int
	// PublishTimeout bounds one publish (default 10 s).
	PublishTimeout time.Duration
}

// Events queues and publishes events (non-retained, QoS 1). Record never
// blocks. A crash loop cannot flood the link: each (reason, pod,
// container) is limited by a token bucket and all pod events together by
// another; suppressed events are counted in the next one that passes.
// Events about the agent itself (no pod) pass the second bucket.
type Events struct {
	o    EventsOptions
	kick chan struct{}

	mu         sync.Mutex
	keys       map[eventKey]*bucket
	all        bucket
	queue      []schema.Event
	dropped    int
	suppressed int
}

type eventKey struct{ reason, pod, container string }

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// NewEvents returns an Events.
func NewEvents(o EventsOptions) *Events {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PerKeyBurst <= 0 {
		o.PerKeyBurst = 3
	}
	if o.PerKeyInterval <= 0 {
		o.PerKeyInterval = time.Minute
	}
	if o.Burst <= 0 {
		o.Burst = 20
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 64
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 10 * time.Second
	}
	return &Events{o: o, kick: wake.New(), keys: map[eventKey]*bucket{}, all: bucket{tokens: float64(o.Burst)}}
}

// take refills b and takes a token if there is one.
func (b *bucket) take(now time.Time, burst int, every time.Duration) bool {
	if b.last.IsZero() {
		b.tokens, b.last = float64(burst), now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(burst), b.tokens+float64(el)/float64(every))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// Record queues an event unless rate-limited. It implements
// reconcile.Recorder.
func (e *Events) Record(typ, reason, pod, container, message string) {
	now := e.o.Clock.Now()
	e.mu.Lock()
	k := eventKey{reason, pod, container}
	b := e.keys[k]
	if b == nil {
		if len(e.keys) > 1024 { // forget idle buckets rather than grow
			for kk, bb := range e.keys {
				if now.Sub(bb.last) > e.o.PerKeyInterval*time.Duration(e.o.PerKeyBurst) {
					delete(e.keys, kk)
				}
			}
		}
		b = &bucket{}
		e.keys[k] = b
	}
	if !b.take(now, e.o.PerKeyBurst, e.o.PerKeyInterval) {
		b.suppressed++
		e.mu.Unlock()
		return
	}
	// Events about the agent itself (no pod: a refused desired state, a
	// cleared topic) are few and are what an operator must see, so a busy
	// minute of container events never starves them: only their own
	// bucket limits them.
	if pod != "" && !e.all.take(now, e.o.Burst, e.o.Interval) {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	if b.suppressed > 0 {
		message = fmt.Sprintf("%s (%d similar events suppressed)", message, b.suppressed)
		b.suppressed = 0
	}
	if len(message) > 4000 {
		message = message[:4000] + "…"
	}
	ev := schema.Event{
		TypeMeta:  schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		Device:    e.o.Device,
		Time:      now.UTC(),
		Type:      typ,
		Reason:    reason,
		Pod:       pod,
		Container: container,
		Message:   message,
	}
	if len(e.queue) >= e.o.QueueSize {
		e.queue = e.queue[1:]
		e.dropped++
	}
	e.queue = append(e.queue, ev)
	e.mu.Unlock()
	wake.Signal(e.kick)
}

// Flush asks Run to try the queue again (after a reconnect).
func (e *Events) Flush() { wake.Signal(e.kick) }

// Pending returns the number of queued events.
func (e *Events) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue)
}

// Run publishes queued events until ctx is done. An event that cannot be
// published stays queued until the next Flush or Record.
func (e *Events) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.kick:
		}
		for {
			e.mu.Lock()
			if len(e.queue) == 0 {
				e.mu.Unlock()
				break
			}
			ev := e.queue[0]
			e.mu.Unlock()
			payload, err := json.Marshal(ev)
			if err != nil {
				e.o.Logger.Error("encode event failed", "err", err)
				e.pop(ev)
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, e.o.PublishTimeout)
			err = e.o.Publisher.Publish(pctx, e.o.Topic, false, payload)
			cancel()
			if err != nil {
				e.o.Logger.Debug("publish event failed; keeping it queued", "reason", ev.Reason, "err", err)
				break
			}
			e.pop(ev)
		}
	}
}

// pop removes ev from the head of the queue if it is still there (Record
// may have dropped it meanwhile).
func (e *Events) pop(ev schema.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) > 0 && e.queue[0] == ev {
		e.queue = e.queue[1:]
	}
}
