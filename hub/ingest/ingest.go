// Package ingest receives what agents publish — status, online and events —
// over the hub's MQTT connection, checks it, keeps the latest report of
// every device in memory, and writes reports to the store in batches.
//
// Bad input never corrupts state: a payload that does not decode, does not
// validate, is too large, or names another device than its topic is
// counted (fleet_mqtt_malformed_payloads_total), logged at a limited rate
// and dropped; the device's last good report stays.
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/controller"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultFlushInterval   = 200 * time.Millisecond
	DefaultFlushBatch      = 256
	DefaultMaxPayload      = 64 << 10
	DefaultStaleAfter      = 90 * time.Second
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

// Registry tells which devices exist (the controller).
type Registry interface {
	// Device returns the uid and labels of a registered device.
	Device(name string) (uid string, labels map[string]string, ok bool)
	// Desired returns the device's current desired state, or nil.
	Desired(name string) *schema.DesiredState
}

// Options configure an Ingest. Conn, Store and Registry are required.
type Options struct {
	Conn     Subscriber
	Store    *store.Store
	Registry Registry
	Topics   schema.Topics
	Logger   *slog.Logger
	Metrics  *metrics.Metrics
	// OnChange is called with the device's name after its report or
	// online state changed (the controller's DeviceStatusChanged). It must
	// not block.
	OnChange func(device string)
	// FlushInterval and FlushBatch: reports are written to the store in one
	// transaction every FlushInterval, or as soon as FlushBatch are
	// waiting. Defaults 200 ms and 256.
	FlushInterval time.Duration
	FlushBatch    int
	// MaxPayload is the largest payload accepted; default 64 KiB.
	MaxPayload int
	// StaleAfter: a device not heard from for this long is stale (and
	// counts as offline); default 90 s, three agent heartbeats.
	StaleAfter time.Duration
	// EventsPerDevice is how many recent events are kept per device;
	// default 32.
	EventsPerDevice int
	// Now is the clock; default time.Now.
	Now func() time.Time
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
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	if o.EventsPerDevice <= 0 {
		o.EventsPerDevice = DefaultEventsPerDevice
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// entry is what the hub knows of one device from its messages.
type entry struct {
	// uid of the device the messages were accepted for; "" for a report
	// loaded from the store (which deletes it with the device).
	uid      string
	status   *schema.DeviceStatus // never modified once stored here
	raw      []byte               // status as received
	online   bool
	lastSeen time.Time
	events   []schema.Event // ring, oldest at evStart once full
	evStart  int
	// version counts changes; the cached API JSON is for infoVersion.
	version     uint64
	info        []byte
	infoVersion uint64
	infoGen     int64
	infoUntil   time.Time
}

// pendingStatus is a report waiting to be written.
type pendingStatus struct {
	uid string
	raw []byte
}

// Ingest is the status ingest. Create it with New, then Run.
type Ingest struct {
	opts Options
	log  *slog.Logger
	m    *metrics.Metrics

	mu      sync.RWMutex
	entries map[string]*entry
	dirty   map[string]pendingStatus
	arch    map[string]string // device → reported arch not yet in its labels

	flush chan struct{}

	logMu      sync.Mutex
	lastLog    map[string]time.Time
	suppressed map[string]int
}

// New returns an Ingest.
func New(opts Options) (*Ingest, error) {
	opts.setDefaults()
	if opts.Conn == nil || opts.Store == nil || opts.Registry == nil {
		return nil, errors.New("new ingest: Conn, Store and Registry are required")
	}
	return &Ingest{
		opts:       opts,
		log:        opts.Logger,
		m:          opts.Metrics,
		entries:    map[string]*entry{},
		dirty:      map[string]pendingStatus{},
		arch:       map[string]string{},
		flush:      make(chan struct{}, 1),
		lastLog:    map[string]time.Time{},
		suppressed: map[string]int{},
	}, nil
}

// Load reads the last stored report of every device. Run calls it; call it
// earlier to have reports before Run starts.
func (in *Ingest) Load(ctx context.Context) error {
	now := in.opts.Now()
	loaded := map[string]*entry{}
	err := in.opts.Store.View(ctx, func(t *store.Txn) error {
		return t.Scan(store.StatusPrefix, func(key string, val []byte) error {
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
			loaded[name] = &entry{status: &st, raw: append([]byte(nil), val...), lastSeen: seen, version: 1}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("ingest: load statuses: %w", err)
	}
	in.mu.Lock()
	for name, e := range loaded {
		if _, ok := in.entries[name]; !ok {
			in.entries[name] = e
		}
	}
	in.mu.Unlock()
	return nil
}

// Subscribe subscribes to every device's status, online and events topics.
func (in *Ingest) Subscribe(ctx context.Context) error {
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		if err := in.opts.Conn.Subscribe(ctx, in.opts.Topics.DeviceFilter(kind), in.Handle); err != nil {
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

// Handle processes one MQTT message; it is the subscriptions' handler.
func (in *Ingest) Handle(topic string, payload []byte) {
	device, kind, err := in.opts.Topics.ParseDevice(topic)
	if err != nil {
		in.malformed(metrics.KindUnknown, "", err)
		return
	}
	switch kind {
	case schema.TopicStatus, schema.TopicOnline, schema.TopicEvents:
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
	uid, labels, ok := in.opts.Registry.Device(device)
	if !ok {
		if in.m != nil {
			in.m.Ignored.WithLabelValues(kind, metrics.ReasonUnknownDevice).Inc()
		}
		in.log.Debug("mqtt payload from an unknown device ignored", "device", device, "topic_kind", kind)
		return
	}
	switch kind {
	case schema.TopicStatus:
		in.handleStatus(device, uid, labels, payload)
	case schema.TopicOnline:
		in.handleOnline(device, uid, payload)
	case schema.TopicEvents:
		in.handleEvent(device, uid, payload)
	}
}

func (in *Ingest) handleStatus(device, uid string, labels map[string]string, payload []byte) {
	var st schema.DeviceStatus
	if err := json.Unmarshal(payload, &st); err != nil {
		in.malformed(schema.TopicStatus, device, fmt.Errorf("decode: %w", err))
		return
	}
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		in.malformed(schema.TopicStatus, device, err)
		return
	}
	if st.Device != device {
		in.malformed(schema.TopicStatus, device, fmt.Errorf("payload names device %q", truncate(st.Device)))
		return
	}
	now := in.opts.Now()
	in.mu.Lock()
	e := in.entryLocked(device, uid)
	if older(&st, e.status) {
		// A late or re-delivered report (QoS 1 duplicates, reordering
		// across reconnects) must not take the hub's view backwards.
		in.mu.Unlock()
		if in.m != nil {
			in.m.Ignored.WithLabelValues(schema.TopicStatus, metrics.ReasonStale).Inc()
		}
		return
	}
	// A heartbeat repeats the last report with a new time: the controller
	// has nothing to redo for it, unless the device was stale until now.
	// (10,000 devices send 333 a second.)
	notify := !sameReport(e.status, &st) || !e.online || e.lastSeen.IsZero() || now.Sub(e.lastSeen) > in.opts.StaleAfter
	e.status, e.raw, e.lastSeen = &st, payload, now
	e.version++
	in.dirty[device] = pendingStatus{uid: uid, raw: payload}
	if a := st.Agent.Arch; a != "" && labels[schema.LabelArch] != a {
		if err := schema.ValidateLabelValue(a); err == nil {
			in.arch[device] = a
		}
	}
	full := len(in.dirty) >= in.opts.FlushBatch
	in.mu.Unlock()
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
		in.malformed(schema.TopicOnline, device, fmt.Errorf("payload %q: want %q or %q", truncate(string(payload)), schema.Online, schema.Offline))
		return
	}
	in.mu.Lock()
	e := in.entryLocked(device, uid)
	changed := e.online != online
	e.online = online
	if online {
		e.lastSeen = in.opts.Now()
	}
	e.version++
	in.mu.Unlock()
	if changed {
		in.log.Debug("device online state", "device", device, "online", online)
	}
	in.opts.OnChange(device)
}

func (in *Ingest) handleEvent(device, uid string, payload []byte) {
	var ev schema.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		in.malformed(schema.TopicEvents, device, fmt.Errorf("decode: %w", err))
		return
	}
	if err := schema.ValidateEvent(&ev); err != nil {
		in.malformed(schema.TopicEvents, device, err)
		return
	}
	if ev.Device != device {
		in.malformed(schema.TopicEvents, device, fmt.Errorf("payload names device %q", truncate(ev.Device)))
		return
	}
	in.mu.Lock()
	e := in.entryLocked(device, uid)
	if n := in.opts.EventsPerDevice; len(e.events) < n {
		e.events = append(e.events, ev)
	} else {
		e.events[e.evStart] = ev
		e.evStart = (e.evStart + 1) % n
	}
	e.lastSeen = in.opts.Now()
	e.version++
	in.mu.Unlock()
}

// entryLocked returns the device's entry, a new one if the device has none
// or the one it has belongs to an earlier device of the same name.
func (in *Ingest) entryLocked(device, uid string) *entry {
	e := in.entries[device]
	if e == nil || e.uid != "" && e.uid != uid {
		e = &entry{uid: uid}
		in.entries[device] = e
	}
	if e.uid == "" {
		e.uid = uid
	}
	return e
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

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Forget drops what is known of a deleted device.
func (in *Ingest) Forget(device string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.entries, device)
	delete(in.dirty, device)
	delete(in.arch, device)
}

// ---- what other parts read -------------------------------------------------------

// usable returns the entry if it belongs to the device with this uid.
func (in *Ingest) usableLocked(name, uid string) *entry {
	e := in.entries[name]
	if e == nil || e.uid != "" && uid != "" && e.uid != uid {
		return nil
	}
	return e
}

// DeviceState implements controller.StatusSource: the last report, and
// whether the device is online and not stale.
func (in *Ingest) DeviceState(name, uid string) (*schema.DeviceStatus, bool) {
	now := in.opts.Now()
	in.mu.RLock()
	defer in.mu.RUnlock()
	e := in.usableLocked(name, uid)
	if e == nil {
		return nil, false
	}
	return e.status, e.online && !e.lastSeen.IsZero() && now.Sub(e.lastSeen) <= in.opts.StaleAfter
}

// DeviceInfo returns the hub's view of a device (schema.DeviceObservedInfo).
func (in *Ingest) DeviceInfo(name, uid string) *schema.DeviceObservedInfo {
	desired := in.opts.Registry.Desired(name)
	in.mu.RLock()
	defer in.mu.RUnlock()
	var (
		st       *schema.DeviceStatus
		online   bool
		lastSeen time.Time
	)
	if e := in.usableLocked(name, uid); e != nil {
		st, online, lastSeen = e.status, e.online, e.lastSeen
	}
	return controller.ObservedInfo(desired, st, online, lastSeen, in.opts.Now(), in.opts.StaleAfter)
}

// DeviceInfoJSON is DeviceInfo encoded, cached until the device's state,
// its desired generation or its staleness changes: a list of 10,000
// devices mostly copies bytes.
func (in *Ingest) DeviceInfoJSON(name, uid string) []byte {
	desired := in.opts.Registry.Desired(name)
	var gen int64
	if desired != nil {
		gen = desired.Generation
	}
	now := in.opts.Now()
	in.mu.RLock()
	e := in.usableLocked(name, uid)
	if e == nil {
		in.mu.RUnlock()
		b, _ := json.Marshal(controller.ObservedInfo(desired, nil, false, time.Time{}, now, in.opts.StaleAfter))
		return b
	}
	if e.info != nil && e.infoVersion == e.version && e.infoGen == gen && now.Before(e.infoUntil) {
		b := e.info
		in.mu.RUnlock()
		return b
	}
	st, online, lastSeen, version := e.status, e.online, e.lastSeen, e.version
	in.mu.RUnlock()

	info := controller.ObservedInfo(desired, st, online, lastSeen, now, in.opts.StaleAfter)
	b, err := json.Marshal(info)
	if err != nil {
		return nil
	}
	until := now.Add(24 * time.Hour)
	if !lastSeen.IsZero() && !info.Stale {
		until = lastSeen.Add(in.opts.StaleAfter)
	}
	in.mu.Lock()
	if e2 := in.entries[name]; e2 == e && e.version == version {
		e.info, e.infoVersion, e.infoGen, e.infoUntil = b, version, gen, until
	}
	in.mu.Unlock()
	return b
}

// Events returns the device's recent events, oldest first.
func (in *Ingest) Events(name, uid string) []schema.Event {
	in.mu.RLock()
	defer in.mu.RUnlock()
	out := []schema.Event{}
	e := in.usableLocked(name, uid)
	if e == nil {
		return out
	}
	out = append(out, e.events[e.evStart:]...)
	return append(out, e.events[:e.evStart]...)
}

// ---- writing to the store -----------------------------------------------------

func (in *Ingest) wakeFlush() {
	select {
	case in.flush <- struct{}{}:
	default:
	}
}

// Flush writes the waiting reports (and fleet/arch labels) to the store
// now. What fails stays waiting for the next flush.
func (in *Ingest) Flush(ctx context.Context) {
	in.mu.Lock()
	dirty, arch := in.dirty, in.arch
	if len(dirty) > 0 {
		in.dirty = map[string]pendingStatus{}
	}
	if len(arch) > 0 {
		in.arch = map[string]string{}
	}
	in.mu.Unlock()
	if len(dirty) > 0 {
		if err := in.writeStatuses(ctx, dirty); err != nil {
			in.log.Error("store device statuses", "devices", len(dirty), "err", err)
			in.requeue(dirty, nil)
		}
	}
	if len(arch) > 0 {
		if err := in.writeArch(ctx, arch); err != nil {
			in.log.Error("store fleet/arch labels", "devices", len(arch), "err", err)
			in.requeue(nil, arch)
		}
	}
}

// requeue puts back what failed, unless newer reports came meanwhile.
func (in *Ingest) requeue(dirty map[string]pendingStatus, arch map[string]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, v := range dirty {
		if _, newer := in.dirty[k]; !newer && in.entries[k] != nil {
			in.dirty[k] = v
		}
	}
	for k, v := range arch {
		if _, newer := in.arch[k]; !newer && in.entries[k] != nil {
			in.arch[k] = v
		}
	}
}

// writeStatuses stores reports in transactions of at most maxChunkBytes,
// skipping devices deleted (or re-created) since the report came.
func (in *Ingest) writeStatuses(ctx context.Context, dirty map[string]pendingStatus) error {
	names := make([]string, 0, len(dirty))
	for n := range dirty {
		names = append(names, n)
	}
	for len(names) > 0 {
		n, size := 0, 0
		for n < len(names) && (n == 0 || size+len(dirty[names[n]].raw) < maxChunkBytes) {
			size += len(dirty[names[n]].raw)
			n++
		}
		chunk := names[:n]
		names = names[n:]
		_, err := in.opts.Store.Write(ctx, func(t *store.Txn) error {
			for _, name := range chunk {
				p := dirty[name]
				// DeviceUID answers from the store's in-memory index,
				// exact for this transaction: no read and decode of the
				// device object per report.
				if uid, ok := t.DeviceUID(name); !ok || p.uid != "" && uid != p.uid {
					continue
				}
				if err := t.Set(store.StatusKey(name), p.raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range chunk {
			delete(dirty, name)
		}
		if in.m != nil {
			in.m.StatusFlushes.Inc()
		}
	}
	return nil
}

// writeArch sets the fleet/arch label of devices whose agent reported an
// architecture their label does not have: one transaction per 256 devices,
// a write only where the label changes.
func (in *Ingest) writeArch(ctx context.Context, arch map[string]string) error {
	names := make([]string, 0, len(arch))
	for n := range arch {
		names = append(names, n)
	}
	for len(names) > 0 {
		chunk := names[:min(256, len(names))]
		names = names[len(chunk):]
		var set []string
		_, err := in.opts.Store.Write(ctx, func(t *store.Txn) error {
			set = set[:0]
			for _, name := range chunk {
				a := arch[name]
				o, err := t.GetObject(schema.KindDevice, name)
				if err != nil || o.GetMetadata().Labels[schema.LabelArch] == a {
					continue // deleted meanwhile, or already labelled
				}
				set = append(set, name)
				_, err = t.MutateObject(schema.KindDevice, name, func(o schema.Object) error {
					md := o.GetMetadata()
					if md.Labels == nil {
						md.Labels = map[string]string{}
					}
					md.Labels[schema.LabelArch] = a
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range set {
			in.log.Info("device architecture label set", "device", name, "arch", arch[name])
		}
		for _, name := range chunk {
			delete(arch, name)
		}
	}
	return nil
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
