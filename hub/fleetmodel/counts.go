package fleetmodel

import (
	"time"

	"github.com/fleetmq/fleet/schema"
)

// counts are the fleet_devices* gauges, kept up to date device by device:
// every change to a device's registration, desired state or report
// recounts that one device (recountLocked).
//
// Online depends on the time as well: a device is online while it is
// connected and was heard from within StaleAfter. So the devices that are
// connected and heard from sit in buckets by the second they were last
// heard from (counted from the model's epoch, on the monotonic clock); a
// scrape adds up the buckets inside the window and checks one by one only
// the devices of the bucket the window's edge cuts. Connected devices
// report every heartbeat, so the buckets span about StaleAfter seconds.
// With staleness off (agents that do not heartbeat, the default) a
// scrape just adds up every bucket.
type counts struct {
	// devices holds what each registered device contributes.
	devices   map[string]contribution
	converged int64
	fresh     map[int64]map[string]struct{} // second last heard from → devices
	// spare are emptied buckets, kept for reuse: every second a bucket
	// empties and another fills, and a map grown to its size is cheaper
	// to reuse than to grow again.
	spare []map[string]struct{}
}

// maxSpare bounds the emptied buckets kept.
const maxSpare = 4

// contribution is what one registered device adds to the counts.
type contribution struct {
	heard     bool  // connected and heard from: in fresh[sec]
	sec       int64 // the bucket, when heard
	converged bool
}

func newCounts() counts {
	return counts{devices: map[string]contribution{}, fresh: map[int64]map[string]struct{}{}}
}

// second returns the bucket of t: whole seconds since the epoch, rounded
// down.
func (m *Model) second(t time.Time) int64 {
	d := t.Sub(m.epoch)
	s := int64(d / time.Second)
	if d < 0 && d%time.Second != 0 {
		s--
	}
	return s
}

// contributionLocked derives what a registered device adds to the counts.
func (m *Model) contributionLocked(name, uid string) contribution {
	var c contribution
	var st *schema.DeviceStatus
	if r := m.usableLocked(name, uid); r != nil {
		st = r.Status
		if r.Online && !r.LastSeen.IsZero() {
			c.heard, c.sec = true, m.second(r.LastSeen)
		}
	}
	if ds := m.desired[name]; ds != nil {
		c.converged = Converged(ds, st)
	}
	return c
}

// recountLocked brings the counts up to date with one device.
func (m *Model) recountLocked(name string) {
	old, was := m.counts.devices[name]
	d, is := m.devices[name]
	var c contribution
	if is {
		c = m.contributionLocked(name, d.UID)
	}
	if was == is && old == c {
		return
	}
	if was {
		m.counts.remove(name, old)
	}
	if is {
		m.counts.add(name, c)
	} else {
		delete(m.counts.devices, name)
	}
}

// recountAllLocked counts every device afresh (after a load).
func (m *Model) recountAllLocked() {
	m.counts = newCounts()
	for name, d := range m.devices {
		m.counts.add(name, m.contributionLocked(name, d.UID))
	}
}

func (c *counts) add(name string, x contribution) {
	c.devices[name] = x
	if x.converged {
		c.converged++
	}
	if x.heard {
		set := c.fresh[x.sec]
		if set == nil {
			if n := len(c.spare); n > 0 {
				set, c.spare = c.spare[n-1], c.spare[:n-1]
			} else {
				set = map[string]struct{}{}
			}
			c.fresh[x.sec] = set
		}
		set[name] = struct{}{}
	}
}

func (c *counts) remove(name string, x contribution) {
	if x.converged {
		c.converged--
	}
	if x.heard {
		if set := c.fresh[x.sec]; set != nil {
			delete(set, name)
			if len(set) == 0 {
				delete(c.fresh, x.sec)
				if len(c.spare) < maxSpare {
					c.spare = append(c.spare, set)
				}
			}
		}
	}
}

// Counts returns how many devices are registered, how many are online
// (connected and not stale) and how many have converged (their report
// shows their latest desired state). It does not look at every device.
func (m *Model) Counts() (devices, online, converged int64) {
	now := m.now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(len(m.devices)), m.onlineLocked(now), m.counts.converged
}

// OnlineCount is Counts' online.
func (m *Model) OnlineCount() int64 {
	now := m.now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.onlineLocked(now)
}

// ConvergedCount is Counts' converged.
func (m *Model) ConvergedCount() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.counts.converged
}

// onlineLocked counts the devices heard from within StaleAfter of now
// (with staleness off: every connected device heard from).
func (m *Model) onlineLocked(now time.Time) int64 {
	if m.staleAfter <= 0 {
		var n int64
		for _, set := range m.counts.fresh {
			n += int64(len(set))
		}
		return n
	}
	cutoff := now.Add(-m.staleAfter)
	edge := m.second(cutoff)
	var n int64
	for sec, set := range m.counts.fresh {
		switch {
		case sec > edge:
			n += int64(len(set))
		case sec == edge:
			for name := range set {
				if !m.reports[name].LastSeen.Before(cutoff) {
					n++
				}
			}
		}
	}
	return n
}
