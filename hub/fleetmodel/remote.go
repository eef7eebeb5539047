package fleetmodel

import (
	"cmp"
	"slices"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// MaxCrashReports bounds the crash reports kept per device: the latest of
// each container, at most this many containers (the oldest report goes).
const MaxCrashReports = 16

// AddCrashReport makes cr the crash report of its container on the
// device (unless the one kept is newer), and marks the device as heard
// from now. cr.Device is set to name.
func (m *Model) AddCrashReport(name, uid string, cr schema.CrashReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.entryLocked(name, uid)
	r.LastSeen = m.now()
	r.version++
	cr.Device = name
	r.putCrash(cr)
	m.recountLocked(name)
}

// putCrash makes cr the crash report of its container, unless the one
// kept is newer.
func (r *report) putCrash(cr schema.CrashReport) {
	for i := range r.crashes {
		if c := &r.crashes[i]; c.Pod == cr.Pod && c.Container == cr.Container {
			if !cr.Time.Before(c.Time) {
				*c = cr
			}
			return
		}
	}
	if len(r.crashes) >= MaxCrashReports {
		oldest := 0
		for i := range r.crashes {
			if r.crashes[i].Time.Before(r.crashes[oldest].Time) {
				oldest = i
			}
		}
		r.crashes = slices.Delete(r.crashes, oldest, oldest+1)
	}
	r.crashes = append(r.crashes, cr)
}

// CrashReports returns the latest crash report of each of the device's
// containers, newest first.
func (m *Model) CrashReports(name, uid string) []schema.CrashReport {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := []schema.CrashReport{}
	if r := m.usableLocked(name, uid); r != nil {
		out = append(out, r.crashes...)
	}
	slices.SortStableFunc(out, func(a, b schema.CrashReport) int { return b.Time.Compare(a.Time) })
	return out
}

// CrashReport returns the crash report of a container of the device; an
// empty container means the newest of the pod's.
func (m *Model) CrashReport(name, uid, pod, container string) (schema.CrashReport, bool) {
	for _, c := range m.CrashReports(name, uid) { // newest first
		if c.Pod == pod && (container == "" || c.Container == container) {
			return c, true
		}
	}
	return schema.CrashReport{}, false
}

// Presence tells whether the device counts as online (connected, heard
// from, not stale) and when it was last heard from (zero: never).
func (m *Model) Presence(name, uid string) (online bool, lastSeen time.Time) {
	now := m.now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	r := m.usableLocked(name, uid)
	if r == nil {
		return false, time.Time{}
	}
	return m.freshLocked(r, now), r.LastSeen
}

// SetTop keeps t as the device's last TopReport (the model keeps t: it
// must not be modified afterwards). It does not count as hearing from the
// device.
func (m *Model) SetTop(name, uid string, t *schema.TopReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.devices[name]; !ok {
		return
	}
	m.entryLocked(name, uid).top = t
}

// Top returns the device's last TopReport, nil if none. It must not be
// modified.
func (m *Model) Top(name, uid string) *schema.TopReport {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r := m.usableLocked(name, uid); r != nil {
		return r.top
	}
	return nil
}

// TopReports returns the last TopReport of every registered device that
// has one, by device name. They must not be modified.
func (m *Model) TopReports() []*schema.TopReport {
	m.mu.RLock()
	out := make([]*schema.TopReport, 0)
	for name, r := range m.reports {
		if d, ok := m.devices[name]; ok && r.top != nil && (r.uid == "" || r.uid == d.UID) {
			out = append(out, r.top)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *schema.TopReport) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

// LoadCrashReports adds crash reports read from the store, for the
// devices that have none yet (what came live is newer).
func (m *Model) LoadCrashReports(loaded map[string][]schema.CrashReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, crs := range loaded {
		if len(crs) > MaxCrashReports {
			crs = crs[:MaxCrashReports]
		}
		r := m.reports[name]
		if r == nil {
			r = &report{version: 1}
			m.reports[name] = r
			m.recountLocked(name)
		}
		if len(r.crashes) == 0 {
			r.crashes = crs
		}
	}
}
