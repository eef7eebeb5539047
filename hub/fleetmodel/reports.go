package fleetmodel

import (
	"encoding/json"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Report is what the hub last heard from a device.
type Report struct {
	// Status is the last accepted report (nil if none); never modified
	// once set.
	Status *schema.DeviceStatus
	// Raw is Status as received (or as stored).
	Raw []byte
	// Online is what the device's online topic last said.
	Online bool
	// LastSeen is when the device was last heard from (zero: never).
	LastSeen time.Time
}

// report is a device's Report with its recent events and the cached JSON
// of its observed info.
type report struct {
	Report
	// uid of the device the messages were accepted for; "" for a report
	// loaded from the store (which deletes it with the device).
	uid     string
	events  []schema.Event // ring, oldest at evStart once full
	evStart int
	// crashes are the latest crash report per container (at most
	// MaxCrashReports), top the last TopReport (remote.go).
	crashes []schema.CrashReport
	top     *schema.TopReport
	// version counts changes; the cached API JSON is for infoVersion.
	version     uint64
	info        []byte
	infoVersion uint64
	infoGen     int64
	infoUntil   time.Time
}

// ---- the ingest's side ------------------------------------------------------------

// UpdateReport changes the report of a registered device, under the
// model's lock. update gets the report (a new one if the device has none,
// or has one of an earlier device of the same name) and whether the device
// counted as online (connected, heard from, not stale) until now; it
// returns whether it changed anything. It must not block.
func (m *Model) UpdateReport(name, uid string, update func(r *Report, wasOnline bool) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.entryLocked(name, uid)
	if !update(&r.Report, m.freshLocked(r, m.now())) {
		return
	}
	r.version++
	m.recountLocked(name)
}

// AddEvent keeps ev among the device's keep most recent events, and marks
// the device as heard from now. An event whose ID (when set) is already
// among them is a re-delivery: it is dropped, and AddEvent returns false.
// An event with a LogTail about a container (from an agent before the
// crashreports topic) also becomes that container's crash report
// (CrashReports); the event is kept without its LogTail, with
// CrashReport set, so no reader of events (a monitor) ever gets a log.
func (m *Model) AddEvent(name, uid string, ev schema.Event, keep int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.eventsKeep = keep
	r := m.entryLocked(name, uid)
	r.LastSeen = m.now()
	r.version++
	added := ev.ID == "" || !r.hasEvent(ev.ID)
	if added {
		if cr, ok := schema.CrashReportOf(&ev); ok {
			cr.Device = name
			r.putCrash(cr)
			ev.CrashReport = true
		}
		ev.LogTail = ""
		r.addEvent(ev, keep)
	}
	m.recountLocked(name)
	return added
}

// hasEvent reports whether an event with this ID is among the recent ones.
func (r *report) hasEvent(id string) bool {
	for i := range r.events {
		if r.events[i].ID == id {
			return true
		}
	}
	return false
}

// AddHubEvent keeps an event the hub itself raises about a device (a
// host port two deployments claim on it, say) among its recent events,
// as many as the ingest keeps (32 until it has said). Unlike AddEvent it
// does not count as hearing from the device.
func (m *Model) AddHubEvent(name, uid string, ev schema.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := m.eventsKeep
	if keep <= 0 {
		keep = defaultEventsKeep
	}
	m.entryLocked(name, uid).addEvent(ev, keep)
	m.reports[name].version++
}

// defaultEventsKeep is AddHubEvent's ring size before the ingest has said
// its own.
const defaultEventsKeep = 32

// addEvent puts ev in the ring of the keep most recent events.
func (r *report) addEvent(ev schema.Event, keep int) {
	switch {
	case len(r.events) < keep && r.evStart == 0:
		r.events = append(r.events, ev)
	case len(r.events) > 0:
		r.events[r.evStart] = ev
		r.evStart = (r.evStart + 1) % len(r.events)
	}
}

// LoadReports adds reports read from the store, for the devices that have
// none yet (what came live is newer).
func (m *Model) LoadReports(loaded map[string]Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, r := range loaded {
		if _, ok := m.reports[name]; !ok {
			m.reports[name] = &report{Report: r, version: 1}
			m.recountLocked(name)
		}
	}
}

// HasReport reports whether anything is known of the device's messages.
func (m *Model) HasReport(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.reports[name] != nil
}

// entryLocked returns the device's report, a new one if the device has
// none or the one it has belongs to an earlier device of the same name.
func (m *Model) entryLocked(name, uid string) *report {
	r := m.reports[name]
	if r == nil || r.uid != "" && r.uid != uid {
		r = &report{uid: uid}
		m.reports[name] = r
	}
	if r.uid == "" {
		r.uid = uid
	}
	return r
}

// ---- reads, from any goroutine --------------------------------------------------

// usableLocked returns the report if it belongs to the device with this
// uid ("" matches any).
func (m *Model) usableLocked(name, uid string) *report {
	r := m.reports[name]
	if r == nil || r.uid != "" && uid != "" && r.uid != uid {
		return nil
	}
	return r
}

// freshLocked reports whether r counts as online at now: connected, heard
// from, and not stale (when staleness is on).
func (m *Model) freshLocked(r *report, now time.Time) bool {
	return r.Online && !r.LastSeen.IsZero() && (m.staleAfter <= 0 || now.Sub(r.LastSeen) <= m.staleAfter)
}

// DeviceState returns the last report of the device whose uid is given,
// and whether it counts as online (connected and not stale).
func (m *Model) DeviceState(name, uid string) (*schema.DeviceStatus, bool) {
	now := m.now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.usableLocked(name, uid)
	if r == nil {
		return nil, false
	}
	return r.Status, m.freshLocked(r, now)
}

// DeviceInfo returns the hub's view of a device (schema.DeviceObservedInfo).
func (m *Model) DeviceInfo(name, uid string) *schema.DeviceObservedInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var r Report
	if e := m.usableLocked(name, uid); e != nil {
		r = e.Report
	}
	return ObservedInfo(m.desired[name], r.Status, r.Online, r.LastSeen, m.now(), m.staleAfter)
}

// DeviceInfoJSON is DeviceInfo encoded, cached until the device's report,
// its desired generation or its staleness changes: a list of 10,000
// devices mostly copies bytes.
func (m *Model) DeviceInfoJSON(name, uid string) []byte {
	now := m.now()
	m.mu.RLock()
	desired := m.desired[name]
	var gen int64
	if desired != nil {
		gen = desired.Generation
	}
	e := m.usableLocked(name, uid)
	if e == nil {
		m.mu.RUnlock()
		b, _ := json.Marshal(ObservedInfo(desired, nil, false, time.Time{}, now, m.staleAfter))
		return b
	}
	if e.info != nil && e.infoVersion == e.version && e.infoGen == gen && now.Before(e.infoUntil) {
		b := e.info
		m.mu.RUnlock()
		return b
	}
	r, version := e.Report, e.version
	m.mu.RUnlock()

	info := ObservedInfo(desired, r.Status, r.Online, r.LastSeen, now, m.staleAfter)
	b, err := json.Marshal(info)
	if err != nil {
		return nil
	}
	until := now.Add(24 * time.Hour)
	if !r.LastSeen.IsZero() && !info.Stale && m.staleAfter > 0 {
		until = r.LastSeen.Add(m.staleAfter)
	}
	m.mu.Lock()
	if m.reports[name] == e && e.version == version {
		e.info, e.infoVersion, e.infoGen, e.infoUntil = b, version, gen, until
	}
	m.mu.Unlock()
	return b
}

// Events returns the device's recent events, oldest first.
func (m *Model) Events(name, uid string) []schema.Event {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := []schema.Event{}
	r := m.usableLocked(name, uid)
	if r == nil {
		return out
	}
	out = append(out, r.events[r.evStart:]...)
	return append(out, r.events[:r.evStart]...)
}
