package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultFlushInterval   = 200 * time.Millisecond
	DefaultFlushBatch      = 256
	DefaultMaxPayload      = 64 << 10
	DefaultStaleAfter      = fleetmodel.DefaultStaleAfter
	DefaultEventsPerDevice = 32
	// maxChunkBytes bounds one store transaction of reports.
	maxChunkBytes = 512 << 10
	// logEvery limits malformed-payload logs to one per topic kind per
	// interval (with the number suppressed).
	logEvery = 5 * time.Second
)

// Subscriber subscribes to MQTT topics; broker.Conn is one.
type Subscriber interface {
	Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error
}

// Options configure an Ingest. Conn, Store and Model are required.
type Options struct {
	Conn  Subscriber
	Store *store.Store
	// Model is where reports go. The ingest reads from it only which
	// devices exist (Device) and writes only reports (UpdateReport,
	// AddEvent, LoadReports). A concrete type, not an interface: the
	// update of every status message is a closure that would escape to
	// the heap through an interface call.
	Model   *fleetmodel.Model
	Topics  schema.Topics
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// OnChange is called with the device's name after its report or
	// online state changed (the controller's DeviceStatusChanged). It must
	// not block.
	OnChange func(device string)
	// OnOnline, if set, is called with the device's name when its online
	// topic says it came online (remote.Manager.DeviceOnline repeats the
	// acks of its open streams at once). It must not block.
	OnOnline func(device string)
	// FlushInterval and FlushBatch: reports are written to the store in one
	// transaction every FlushInterval, or as soon as FlushBatch are
	// waiting. Defaults 200 ms and 256.
	FlushInterval time.Duration
	FlushBatch    int
	// MaxPayload is the largest payload accepted; default 64 KiB.
	MaxPayload int
	// EventsPerDevice is how many recent events are kept per device;
	// default 32.
	EventsPerDevice int
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnChange == nil {
		o.OnChange = func(string) {}
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.FlushBatch <= 0 {
		o.FlushBatch = DefaultFlushBatch
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.EventsPerDevice <= 0 {
		o.EventsPerDevice = DefaultEventsPerDevice
	}
}

// pendingStatus is a report waiting to be written.
type pendingStatus struct {
	uid string
	raw []byte
}

// Ingest is the status ingest. Create it with New, then Run.
type Ingest struct {
	opts  Options
	log   *slog.Logger
	m     *metrics.Metrics
	model *fleetmodel.Model

	// What waits to be written to the store. Lock order: the model's
	// lock, then mu.
	mu    sync.Mutex
	dirty map[string]pendingStatus
	arch  map[string]string // device → reported arch not yet in its labels
	// crashes are the devices (→ uid) whose crash reports changed.
	crashes map[string]string

	flush chan struct{}

	// keys are the devices' bound public keys, as last seen (keys.go).
	keys keyBook

	logMu      sync.Mutex
	lastLog    map[string]time.Time
	suppressed map[string]int
}

// New returns an Ingest.
func New(opts Options) (*Ingest, error) {
	opts.setDefaults()
	if opts.Conn == nil || opts.Store == nil || opts.Model == nil {
		return nil, errors.New("new ingest: Conn, Store and Model are required")
	}
	return &Ingest{
		opts:       opts,
		log:        opts.Logger,
		m:          opts.Metrics,
		model:      opts.Model,
		dirty:      map[string]pendingStatus{},
		arch:       map[string]string{},
		crashes:    map[string]string{},
		flush:      make(chan struct{}, 1),
		lastLog:    map[string]time.Time{},
		suppressed: map[string]int{},
	}, nil
}

// Load reads the last stored report of every device into the model. Call
// it before Run.
func (in *Ingest) Load(ctx context.Context) error {
	now := in.model.Now()
	loaded := map[string]fleetmodel.Report{}
	err := in.opts.Store.View(ctx, func(t *store.Txn) error {
		err := t.Scan(store.StatusPrefix, func(key string, val []byte) error {
			name := key[len(store.StatusPrefix):]
			var st schema.DeviceStatus
			if err := json.Unmarshal(val, &st); err != nil {
				in.log.Error("stored device status does not decode; ignoring it", "device", name, "err", err)
				return nil
			}
			// The time of the report, as the agent's clock had it; never
			// in the future.
			seen := st.Time
			if seen.After(now) {
				seen = now
			}
			loaded[name] = fleetmodel.Report{Status: &st, Raw: append([]byte(nil), val...), LastSeen: seen}
			return nil
		})
		if err != nil {
			return err
		}
		return in.loadBoundKeys(t, loaded)
	})
	if err != nil {
		return fmt.Errorf("ingest: load statuses: %w", err)
	}
	in.model.LoadReports(loaded)
	crashes := map[string][]schema.CrashReport{}
	err = in.opts.Store.View(ctx, func(t *store.Txn) error {
		return t.Scan(store.CrashReportsPrefix, func(key string, val []byte) error {
			name := key[len(store.CrashReportsPrefix):]
			var crs []schema.CrashReport
			if err := json.Unmarshal(val, &crs); err != nil {
				in.log.Error("stored crash reports do not decode; ignoring them", "device", name, "err", err)
				return nil
			}
			crashes[name] = crs
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("ingest: load crash reports: %w", err)
	}
	in.model.LoadCrashReports(crashes)
	return nil
}

// Subscribe subscribes to every device's status, online, events and
// crashreports topics.
func (in *Ingest) Subscribe(ctx context.Context) error {
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents, schema.TopicCrashReports} {
		if err := in.opts.Conn.Subscribe(ctx, in.opts.Topics.DeviceFilter(kind), in.handleKept); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
	}
	return nil
}

// Run writes reports to the store in batches until ctx is done, then
// writes what is left. Call Load and Subscribe first.
func (in *Ingest) Run(ctx context.Context) error {
	t := time.NewTicker(in.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			in.Flush(fctx)
			return nil
		case <-t.C:
		case <-in.flush:
		}
		in.Flush(ctx)
	}
}

// ---- handling one message ------------------------------------------------------

// Handle processes one MQTT message. The caller may reuse payload once
// it returns.
func (in *Ingest) Handle(topic string, payload []byte) { in.handle(topic, payload, false) }

// handleKept is the subscriptions' handler: a broker.Conn's payload is the
// handler's to keep and never changes (on the embedded broker, the very
// bytes of the retained message), so a status is kept without a copy of
// its own and the broker and the model share one buffer.
func (in *Ingest) handleKept(topic string, payload []byte) { in.handle(topic, payload, true) }

// handle processes one message; kept says payload may be kept as it is.
func (in *Ingest) handle(topic string, payload []byte, kept bool) {
	device, kind, err := in.opts.Topics.ParseDevice(topic)
	if err != nil {
		in.malformed(metrics.KindUnknown, "", err)
		return
	}
	switch kind {
	case schema.TopicStatus, schema.TopicOnline, schema.TopicEvents, schema.TopicCrashReports:
	default:
		in.malformed(metrics.KindUnknown, device, fmt.Errorf("topic %q: unexpected kind %q", topic, kind))
		return
	}
	if in.m != nil {
		in.m.MQTTMessages.WithLabelValues(kind).Inc()
	}
	if len(payload) == 0 {
		// A cleared retained topic (the hub clears a deleted device's).
		return
	}
	if len(payload) > in.opts.MaxPayload {
		in.malformed(kind, device, fmt.Errorf("payload of %d bytes, more than %d", len(payload), in.opts.MaxPayload))
		return
	}
	uid, labels, ok := in.model.Device(device)
	if !ok {
		if in.m != nil {
			in.m.Ignored.WithLabelValues(kind, metrics.ReasonUnknownDevice).Inc()
		}
		in.log.Debug("mqtt payload from an unknown device ignored", "device", device, "topic_kind", kind)
		return
	}
	switch kind {
	case schema.TopicStatus:
		if !kept {
			// The report keeps the payload (Raw) and strings decoded
			// in place from it.
			payload = bytes.Clone(payload)
		}
		in.handleStatus(device, uid, labels, payload)
	case schema.TopicOnline:
		in.handleOnline(device, uid, payload)
	case schema.TopicEvents:
		in.handleEvent(device, uid, payload)
	case schema.TopicCrashReports:
		in.handleCrashReport(device, uid, payload)
	}
}

func (in *Ingest) handleStatus(device, uid string, labels map[string]string, payload []byte) {
	// payload is the report's to keep (Raw, and the strings decoded in
	// place from it), and is never changed.
	var st schema.DeviceStatus
	if err := decode(payload, &st); err != nil {
		in.malformed(schema.TopicStatus, device, fmt.Errorf("decode: %w", err))
		return
	}
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		in.malformed(schema.TopicStatus, device, err)
		return
	}
	if st.Device != device {
		in.malformed(schema.TopicStatus, device, fmt.Errorf("payload names device %q", schema.Truncate(st.Device, 64, "...")))
		return
	}
	// Only the device's bound key enters the report (keys.go).
	sp, payload, ok := in.checkKey(device, uid, &st, payload)
	if !ok {
		return
	}
	var rejected, notify, full bool
	in.model.UpdateReport(device, uid, func(r *fleetmodel.Report, wasOnline bool) bool {
		if older(sp, r.Status) {
			// A late or re-delivered report (QoS 1 duplicates, reordering
			// across reconnects) must not take the hub's view backwards.
			rejected = true
			return false
		}
		// A heartbeat repeats the last report with a new time: the
		// controller has nothing to redo for it, unless the device was
		// offline or stale until now. (10,000 devices send 333 a second.)
		notify = !wasOnline || !sameReport(r.Status, sp)
		r.Status, r.Raw, r.LastSeen = sp, payload, in.model.Now()
		// Under the model's lock, so the store gets the reports in the
		// model's order.
		in.mu.Lock()
		in.dirty[device] = pendingStatus{uid: uid, raw: payload}
		if a := sp.Agent.Arch; a != "" && labels[schema.LabelArch] != a {
			if err := schema.ValidateLabelValue(a); err == nil {
				in.arch[device] = a
			}
		}
		full = len(in.dirty) >= in.opts.FlushBatch
		in.mu.Unlock()
		return true
	})
	if rejected {
		if in.m != nil {
			in.m.Ignored.WithLabelValues(schema.TopicStatus, metrics.ReasonStale).Inc()
		}
		return
	}
	if in.m != nil {
		in.m.StatusMessages.Inc()
	}
	if full {
		in.wakeFlush()
	}
	if notify {
		in.opts.OnChange(device)
	}
}

// sameReport reports whether two reports differ at most in when they
// were sent and in the node facts (uptime, memory), which no controller
// decision reads.
func sameReport(a, b *schema.DeviceStatus) bool {
	if a == nil || b == nil {
		return false
	}
	x, y := *a, *b
	x.Time, y.Time = time.Time{}, time.Time{}
	x.Node, y.Node = nil, nil
	return reflect.DeepEqual(x, y)
}

func (in *Ingest) handleOnline(device, uid string, payload []byte) {
	var online bool
	switch strings.TrimSpace(string(payload)) {
	case schema.Online:
		online = true
	case schema.Offline:
	default:
		in.malformed(schema.TopicOnline, device, fmt.Errorf("payload %q: want %q or %q", schema.Truncate(string(payload), 64, "..."), schema.Online, schema.Offline))
		return
	}
	var changed bool
	in.model.UpdateReport(device, uid, func(r *fleetmodel.Report, _ bool) bool {
		changed = r.Online != online
		r.Online = online
		if online {
			r.LastSeen = in.model.Now()
		}
		return true
	})
	if changed {
		in.log.Debug("device online state", "device", device, "online", online)
	}
	if online && in.opts.OnOnline != nil {
		in.opts.OnOnline(device)
	}
	in.opts.OnChange(device)
}

func (in *Ingest) handleEvent(device, uid string, payload []byte) {
	var ev schema.Event
	if err := decode(payload, &ev); err != nil {
		in.malformed(schema.TopicEvents, device, fmt.Errorf("decode: %w", err))
		return
	}
	if err := schema.ValidateEvent(&ev); err != nil {
		in.malformed(schema.TopicEvents, device, err)
		return
	}
	if ev.Device != device {
		in.malformed(schema.TopicEvents, device, fmt.Errorf("payload names device %q", schema.Truncate(ev.Device, 64, "...")))
		return
	}
	// A message may carry a batch: the event and those recorded right
	// after it (ValidateEvent checked they are the same device's).
	more := ev.More
	ev.More = nil
	in.addEvent(device, uid, ev)
	for _, m := range more {
		in.addEvent(device, uid, m)
	}
}

// addEvent keeps one event of a device.
func (in *Ingest) addEvent(device, uid string, ev schema.Event) {
	// A device re-delivers what it queued while offline: an event whose
	// ID the model has seen is dropped there.
	if !in.model.AddEvent(device, uid, ev, in.opts.EventsPerDevice) {
		if in.m != nil {
			in.m.Ignored.WithLabelValues(schema.TopicEvents, metrics.ReasonDuplicate).Inc()
		}
		return
	}
	if _, ok := schema.CrashReportOf(&ev); ok {
		// From an agent before the crashreports topic: the model made it
		// the container's crash report (and kept the event without its
		// log); keep it across restarts, with the next flush.
		in.crashDirty(device, uid)
	}
}

// handleCrashReport keeps a crash report from the device's crashreports
// topic as its container's (the event that points at it comes next, on
// the events topic). A re-delivery changes nothing: the model keeps the
// newest report per container.
func (in *Ingest) handleCrashReport(device, uid string, payload []byte) {
	var cr schema.CrashReport
	if err := json.Unmarshal(payload, &cr); err != nil {
		in.malformed(schema.TopicCrashReports, device, fmt.Errorf("decode: %w", err))
		return
	}
	if err := schema.ValidateCrashReport(&cr); err != nil {
		in.malformed(schema.TopicCrashReports, device, err)
		return
	}
	if cr.Device != device {
		in.malformed(schema.TopicCrashReports, device, fmt.Errorf("payload names device %q", schema.Truncate(cr.Device, 64, "...")))
		return
	}
	in.model.AddCrashReport(device, uid, cr)
	in.crashDirty(device, uid)
}

// crashDirty has the next flush write the device's crash reports.
func (in *Ingest) crashDirty(device, uid string) {
	in.mu.Lock()
	in.crashes[device] = uid
	in.mu.Unlock()
}

// malformed counts and (rate-limited) logs a refused payload. The payload
// itself is never logged.
func (in *Ingest) malformed(kind, device string, err error) {
	if in.m != nil {
		in.m.Malformed.WithLabelValues(kind).Inc()
	}
	now := time.Now()
	in.logMu.Lock()
	if now.Sub(in.lastLog[kind]) < logEvery {
		in.suppressed[kind]++
		in.logMu.Unlock()
		return
	}
	n := in.suppressed[kind]
	in.lastLog[kind], in.suppressed[kind] = now, 0
	in.logMu.Unlock()
	in.log.Warn("malformed mqtt payload ignored", "device", device, "topic_kind", kind, "err", err, "suppressed_since_last_log", n)
}

// older reports whether st is an older report than cur from the same hub
// store: a lower observedGeneration AND an earlier time. Both must hold, so
// a device whose clock jumped backwards, or that was reset to a new store,
// is still heard.
func older(st, cur *schema.DeviceStatus) bool {
	if cur == nil || st.Store != cur.Store {
		return false
	}
	return st.ObservedGeneration < cur.ObservedGeneration && st.Time.Before(cur.Time)
}
