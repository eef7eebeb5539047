package status

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// EventsOptions configures Events.
type EventsOptions struct {
	Device string
	Topic  string // the device's events topic
	// CrashTopic is the device's crashreports topic (default: Topic's
	// sibling, {prefix}/devices/{device}/crashreports).
	CrashTopic string
	Publisher  Publisher
	Clock      clock.Clock
	Logger     *slog.Logger
	// PerKeyBurst events with the same reason, pod and container pass at
	// once; then one per PerKeyInterval (defaults 3 and 1 min).
	PerKeyBurst    int
	PerKeyInterval time.Duration
	// Burst and Interval limit all events together (defaults 20 and 1 s).
	Burst    int
	Interval time.Duration
	// QueueSize and QueueBytes bound the events waiting for the
	// connection, by count and by encoded size (defaults
	// DefaultEventQueueSize and DefaultEventQueueBytes); past either the
	// oldest are dropped, and the next event published says how many
	// (schema.Event.Dropped).
	QueueSize  int
	QueueBytes int
	// PublishTimeout bounds one publish (default 10 s).
	PublishTimeout time.Duration
	// Batch sends the events queued together as one message: the first
	// with the others in its More (at most schema.MaxEventBatch of them,
	// BatchBytes in all, default 16 KiB). Linger is how long Run waits,
	// once an event is queued, for the next ones to join it (0: not at
	// all; the agent waits DefaultEventLinger, so a container's Pulled and
	// Started go out in one message).
	Batch      bool
	BatchBytes int
	Linger     time.Duration
}

// DefaultEventLinger is the agent's EventsOptions.Linger: a container
// start (containerd's create and start, 63 ms median on the project's
// machine) fits in it.
const DefaultEventLinger = 250 * time.Millisecond

// Defaults of EventsOptions.QueueSize and QueueBytes: with crash reports
// (up to 8 KiB of log each) a few hundred events fit a device's memory
// easily and cover a long outage at the rate limits.
const (
	DefaultEventQueueSize  = 256
	DefaultEventQueueBytes = 512 << 10
)

// Events queues and publishes events (non-retained, QoS 1) and crash
// reports (likewise, on CrashTopic, which only the hub may read). Record never
// blocks. A crash loop cannot flood the link: each (reason, pod,
// container) is limited by a token bucket and all pod events together by
// another; suppressed events are counted in the next one that passes.
// Events about the agent itself (no pod) pass the second bucket.
//
// Every event gets a random ID when it is recorded. While the device is
// offline events wait in a queue bounded by count and bytes (the oldest
// are dropped and counted in the next event's Dropped); they are
// published in order, one at a time, and an event leaves the queue only
// once the broker acknowledged it (PUBACK). An event whose publish failed
// is published again with the same ID, so the hub can keep it once.
//
// An event with a log tail (a crash) is split: its crash report (the log
// tail, schema.CrashReport) is published on CrashTopic first, and then
// the event, with CrashReport set and no log, on Topic. Both wait in the
// same queue under the same bounds and go out in order; the crash report
// is published again until acknowledged, and then never again. A log
// tail never goes on the events topic, which monitors read.
type Events struct {
	o    EventsOptions
	kick chan struct{}

	mu         sync.Mutex
	keys       map[eventKey]*bucket
	all        bucket
	queue      []queued
	bytes      int // encoded size of the queue
	suppressed int
}

// queued is an event waiting for its PUBACK, encoded once, with its
// crash report (nil: none, or acknowledged already).
type queued struct {
	ev      schema.Event
	payload []byte
	report  []byte
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
		o.QueueSize = DefaultEventQueueSize
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultEventQueueBytes
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 10 * time.Second
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 16 << 10
	}
	if o.CrashTopic == "" {
		o.CrashTopic = strings.TrimSuffix(o.Topic, "/"+schema.TopicEvents) + "/" + schema.TopicCrashReports
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
	e.RecordEvent(schema.Event{Type: typ, Reason: reason, Pod: pod, Container: container, Message: message})
}

// RecordEvent queues ev unless rate-limited, as Record does; it carries
// what Record cannot (ExitCode, LogTail). Type, Reason, Pod, Container,
// Message, ExitCode and LogTail are taken from ev; the rest is set here.
// A LogTail (about a container) becomes the event's crash report, on
// CrashTopic: the event published has CrashReport set and no LogTail.
func (e *Events) RecordEvent(ev schema.Event) {
	id := newEventID()
	e.mu.Lock()
	// The time is read under the lock, so the queue (the order the hub
	// gets the events in) is also the order of their times: two
	// goroutines recording at once cannot enqueue the later time first.
	now := e.o.Clock.Now()
	k := eventKey{ev.Reason, ev.Pod, ev.Container}
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
	if ev.Pod != "" && !e.all.take(now, e.o.Burst, e.o.Interval) {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	message := ev.Message
	if b.suppressed > 0 {
		message = fmt.Sprintf("%s (%d similar events suppressed)", message, b.suppressed)
		b.suppressed = 0
	}
	if len(message) > 4000 {
		message = message[:4000] + "…"
	}
	q := queued{ev: schema.Event{
		TypeMeta:  schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		ID:        id,
		Device:    e.o.Device,
		Time:      now.UTC(),
		Type:      ev.Type,
		Reason:    ev.Reason,
		Pod:       ev.Pod,
		Container: ev.Container,
		Message:   message,
		ExitCode:  ev.ExitCode,
	}}
	report, err := crashReport(q.ev, ev.LogTail)
	if err == nil {
		q.report = report
		q.ev.CrashReport = report != nil
		q.payload, err = json.Marshal(q.ev)
	}
	if err != nil {
		e.mu.Unlock()
		e.o.Logger.Error("encode event failed", "reason", ev.Reason, "err", err)
		return
	}
	e.queue = append(e.queue, q)
	e.bytes += len(q.payload) + len(q.report)
	e.trimLocked()
	e.mu.Unlock()
	wake.Signal(e.kick)
}

// trimLocked drops the oldest events while the queue is over its bounds
// (keeping the newest one whatever its size). The count of dropped
// events goes on the event that is then the oldest, re-encoded, so that
// it travels with the next event published.
func (e *Events) trimLocked() {
	n := 0
	for len(e.queue) > 1 && (len(e.queue) > e.o.QueueSize || e.bytes > e.o.QueueBytes) {
		d := e.queue[0]
		e.bytes -= len(d.payload) + len(d.report)
		n += 1 + d.ev.Dropped
		e.queue[0] = queued{}
		e.queue = e.queue[1:]
	}
	if n == 0 {
		return
	}
	h := &e.queue[0]
	h.ev.Dropped += n
	payload, err := json.Marshal(h.ev)
	if err != nil { // cannot happen: it encoded before
		e.o.Logger.Error("encode event failed", "reason", h.ev.Reason, "err", err)
		return
	}
	e.bytes += len(payload) - len(h.payload)
	h.payload = payload
}

// crashReport encodes the crash report of ev (a log tail about a
// container; the tail's last MaxCrashLogBytes), nil if it has none.
func crashReport(ev schema.Event, logTail string) ([]byte, error) {
	if logTail == "" || ev.Pod == "" || ev.Container == "" {
		return nil, nil
	}
	if len(logTail) > schema.MaxCrashLogBytes {
		logTail = logTail[len(logTail)-schema.MaxCrashLogBytes:]
	}
	ev.LogTail = logTail
	cr, _ := schema.CrashReportOf(&ev)
	return json.Marshal(cr)
}

// newEventID returns 12 random bytes in hex.
func newEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
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
// published stays queued (with its ID) until the next Flush or Record.
func (e *Events) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.kick:
		}
		if e.o.Batch && e.o.Linger > 0 {
			t := e.o.Clock.NewTimer(e.o.Linger)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
		}
		for {
			ids, payload, first, report := e.next()
			if ids == nil {
				break
			}
			topic := e.o.Topic
			if report {
				topic = e.o.CrashTopic
			}
			pctx, cancel := context.WithTimeout(ctx, e.o.PublishTimeout)
			err := e.o.Publisher.Publish(pctx, topic, false, payload)
			cancel()
			if err != nil {
				e.o.Logger.Debug("publish event failed; keeping it queued", "reason", first, "events", len(ids), "crash_report", report, "err", err)
				break
			}
			if report {
				e.reportSent(ids[0])
			} else {
				e.pop(ids)
			}
		}
	}
}

// next returns the IDs and the message of the next events to publish:
// the head of the queue, and with Batch those queued after it that fit
// (up to one with a crash report not yet sent). If the head has a crash
// report not yet sent, that report is next, alone (report true).
func (e *Events) next() (ids []string, payload []byte, first string, report bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		return nil, nil, "", false
	}
	head := e.queue[0]
	if head.report != nil {
		return []string{head.ev.ID}, head.report, head.ev.Reason, true
	}
	n, size := 1, len(head.payload)
	if e.o.Batch {
		for n < len(e.queue) && n <= schema.MaxEventBatch && e.queue[n].report == nil && size+len(e.queue[n].payload)+1 <= e.o.BatchBytes {
			size += len(e.queue[n].payload) + 1
			n++
		}
	}
	ids = make([]string, n)
	for i := range n {
		ids[i] = e.queue[i].ev.ID
	}
	if n == 1 {
		return ids, head.payload, head.ev.Reason, false
	}
	// The head's JSON object, with the others as its "more": each
	// payload is a whole encoded Event without a "more" of its own.
	b := make([]byte, 0, size+16)
	b = append(b, head.payload[:len(head.payload)-1]...)
	b = append(b, `,"more":[`...)
	for i := 1; i < n; i++ {
		if i > 1 {
			b = append(b, ',')
		}
		b = append(b, e.queue[i].payload...)
	}
	b = append(b, "]}"...)
	return ids, b, head.ev.Reason, false
}

// reportSent marks the crash report of the event with this ID, at the
// head of the queue, as acknowledged: the event itself is next.
func (e *Events) reportSent(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 || e.queue[0].ev.ID != id {
		return // dropped meanwhile
	}
	e.bytes -= len(e.queue[0].report)
	e.queue[0].report = nil
}

// pop removes the events with these IDs from the head of the queue, those
// still there (Record may have dropped some meanwhile).
func (e *Events) pop(ids []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if len(e.queue) == 0 || e.queue[0].ev.ID != id {
			continue
		}
		e.bytes -= len(e.queue[0].payload) + len(e.queue[0].report)
		e.queue[0] = queued{}
		e.queue = e.queue[1:]
	}
}
