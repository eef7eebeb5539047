package schema

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// UpdateWindow says when a device may replace a Deployment's pod: from
// each time Schedule names, for Duration. Outside it a device pulls the
// new images ahead and keeps the running version; a device that runs
// nothing of the pod yet (a first install) is never held back.
type UpdateWindow struct {
	// Schedule is a 5-field cron expression (minute hour day-of-month
	// month day-of-week), such as "0 1 * * *" (every night at 01:00) or
	// "30 22 * * 1-5". Fields take *, numbers, ranges (1-5), lists
	// (1,3,5) and steps (*/15, 0-30/10); day-of-week runs from 0
	// (Sunday) to 6, 7 being Sunday too. Required.
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open from each start, a Go
	// duration such as 4h or 90m, at most 24h. Required.
	Duration string `json:"duration"`
	// TimeZone is the zone Schedule is read in: "device" (the device's
	// local time zone, which its agent reports in status.agent.timeZone)
	// or an IANA name such as Europe/Paris. Defaults to device.
	TimeZone string `json:"timeZone,omitempty"`
}

// TimeZoneDevice is UpdateWindow.TimeZone for the device's own zone.
const TimeZoneDevice = "device"

// MaxWindowDuration bounds UpdateWindow.Duration.
const MaxWindowDuration = 24 * time.Hour

// UpdateLock lets the pod's own containers hold off its replacement: the
// agent mounts a directory at Path in each container and does not replace
// the pod while a process holds a flock on a file in it (a crashed holder
// releases it). After Deadline it follows OnDeadline.
type UpdateLock struct {
	// Path is where the lock directory is mounted in the containers, an
	// absolute path. Defaults to /run/fleet/lock.
	Path string `json:"path,omitempty"`
	// Deadline is how long the agent waits for the lock to be released,
	// counted from when it first found it held for a new revision, a Go
	// duration such as 10m. Defaults to 10m.
	Deadline string `json:"deadline,omitempty"`
	// OnDeadline is what the agent does once Deadline has passed: force
	// (replace the pod although the lock is held) or wait (keep waiting
	// for the release). Defaults to force.
	OnDeadline LockPolicy `json:"onDeadline,omitempty"`
}

// LockPolicy is UpdateLock.OnDeadline.
type LockPolicy string

const (
	// LockForce replaces the pod once the deadline has passed.
	LockForce LockPolicy = "force"
	// LockWait keeps waiting for the lock's release.
	LockWait LockPolicy = "wait"
)

// Defaults of UpdateLock.
const (
	DefaultLockPath     = "/run/fleet/lock"
	DefaultLockDeadline = 10 * time.Minute
)

// LockPath returns Path with its default.
func (l *UpdateLock) LockPath() string {
	if l == nil || l.Path == "" {
		return DefaultLockPath
	}
	return l.Path
}

// LockDeadline returns Deadline as a duration, with its default.
func (l *UpdateLock) LockDeadline() time.Duration {
	if l != nil && l.Deadline != "" {
		if d, err := time.ParseDuration(l.Deadline); err == nil && d > 0 {
			return d
		}
	}
	return DefaultLockDeadline
}

// Policy returns OnDeadline with its default.
func (l *UpdateLock) Policy() LockPolicy {
	if l == nil || l.OnDeadline == "" {
		return LockForce
	}
	return l.OnDeadline
}

// validateUpdateWindow checks w at field.
func validateUpdateWindow(w *UpdateWindow, field string, errs *errList) {
	if w == nil {
		return
	}
	if w.Schedule == "" {
		errs.add(field+".schedule", `required: a 5-field cron expression such as "0 1 * * *"`)
	} else if _, err := ParseCron(w.Schedule); err != nil {
		errs.add(field+".schedule", "%v", err)
	}
	if _, err := w.WindowDuration(); err != nil {
		errs.add(field+".duration", "%v", err)
	}
	if w.TimeZone != "" && w.TimeZone != TimeZoneDevice {
		if _, err := time.LoadLocation(w.TimeZone); err != nil || strings.HasPrefix(w.TimeZone, "/") {
			errs.add(field+".timeZone", "unknown time zone %q: want %q or an IANA name such as Europe/Paris", truncate(w.TimeZone), TimeZoneDevice)
		}
	}
}

// WindowDuration returns Duration, checked.
func (w *UpdateWindow) WindowDuration() (time.Duration, error) {
	if w.Duration == "" {
		return 0, fmt.Errorf("required: how long the window stays open, such as 4h")
	}
	d, err := time.ParseDuration(w.Duration)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q: want a duration such as 4h or 90m", truncate(w.Duration))
	case d <= 0:
		return 0, fmt.Errorf("%q: must be positive", truncate(w.Duration))
	case d > MaxWindowDuration:
		return 0, fmt.Errorf("%q: must be at most 24h", truncate(w.Duration))
	}
	return d, nil
}

// Location returns the zone the window is read in; device is the
// device's own zone.
func (w *UpdateWindow) Location(device *time.Location) *time.Location {
	if w.TimeZone == "" || w.TimeZone == TimeZoneDevice {
		return device
	}
	if loc, err := time.LoadLocation(w.TimeZone); err == nil {
		return loc
	}
	return device
}

// Open reports whether the window is open at now, read in loc: if so,
// until when; if not, when it opens next (zero if never within a year).
// A window that does not parse is read as always open: validation
// refuses it, and holding a device forever would be worse.
func (w *UpdateWindow) Open(now time.Time, loc *time.Location) (open bool, until, next time.Time) {
	c, err := ParseCron(w.Schedule)
	d, derr := w.WindowDuration()
	if err != nil || derr != nil {
		return true, time.Time{}, time.Time{}
	}
	local := now.In(loc)
	// The latest start at or before now, looked for in the last
	// Duration (at most 24 h): the window is open if it is less than
	// Duration ago.
	if start, ok := c.Prev(local, d); ok && now.Before(start.Add(d)) {
		return true, start.Add(d), time.Time{}
	}
	return false, time.Time{}, c.Next(local)
}

// Cron is a parsed 5-field cron expression.
type Cron struct {
	minute, hour, dom, month, dow uint64 // bit sets
	domStar, dowStar              bool
}

// ParseCron parses a 5-field cron expression (minute hour day-of-month
// month day-of-week).
func ParseCron(s string) (Cron, error) {
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return Cron{}, fmt.Errorf("%q: want 5 fields (minute hour day-of-month month day-of-week), such as \"0 1 * * *\", got %d", truncate(s), len(fields))
	}
	var c Cron
	specs := []struct {
		name     string
		lo, hi   int
		set      *uint64
		star     *bool
		sunday7  bool
		fieldPos int
	}{
		{"minute", 0, 59, &c.minute, nil, false, 0},
		{"hour", 0, 23, &c.hour, nil, false, 1},
		{"day of month", 1, 31, &c.dom, &c.domStar, false, 2},
		{"month", 1, 12, &c.month, nil, false, 3},
		{"day of week", 0, 7, &c.dow, &c.dowStar, true, 4},
	}
	for _, sp := range specs {
		set, err := parseCronField(fields[sp.fieldPos], sp.lo, sp.hi)
		if err != nil {
			return Cron{}, fmt.Errorf("%q: %s field %q: %v", truncate(s), sp.name, truncate(fields[sp.fieldPos]), err)
		}
		if sp.sunday7 && set&(1<<7) != 0 {
			set = set&^(1<<7) | 1
		}
		*sp.set = set
		if sp.star != nil {
			*sp.star = strings.HasPrefix(fields[sp.fieldPos], "*")
		}
	}
	return c, nil
}

// parseCronField parses one field into a bit set of the values from lo
// to hi it names.
func parseCronField(f string, lo, hi int) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(f, ",") {
		rng, stepStr, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > hi {
				return 0, fmt.Errorf("step %q: want a number from 1 to %d", stepStr, hi)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			as, bs, _ := strings.Cut(rng, "-")
			var err error
			if a, err = cronNumber(as, lo, hi); err != nil {
				return 0, err
			}
			if b, err = cronNumber(bs, lo, hi); err != nil {
				return 0, err
			}
			if a > b {
				return 0, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			n, err := cronNumber(rng, lo, hi)
			if err != nil {
				return 0, err
			}
			a, b = n, n
			if hasStep {
				b = hi
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func cronNumber(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%q: want a number from %d to %d", s, lo, hi)
	}
	return n, nil
}

// matches reports whether t (to the minute) is a start of c.
func (c Cron) matches(t time.Time) bool {
	if c.minute&(1<<t.Minute()) == 0 || c.hour&(1<<t.Hour()) == 0 || c.month&(1<<int(t.Month())) == 0 {
		return false
	}
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow // cron's rule: either day field matches
}

// Next returns the first start of c after t (in t's location), or the
// zero time if there is none within a year.
func (c Cron) Next(t time.Time) time.Time {
	m := t.Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(1, 0, 1)
	for m.Before(end) {
		if c.month&(1<<int(m.Month())) == 0 {
			m = time.Date(m.Year(), m.Month()+1, 1, 0, 0, 0, 0, m.Location())
			continue
		}
		if c.hour&(1<<m.Hour()) == 0 || !c.dayMatches(m) {
			m = time.Date(m.Year(), m.Month(), m.Day(), m.Hour()+1, 0, 0, 0, m.Location())
			continue
		}
		if c.matches(m) {
			return m
		}
		m = m.Add(time.Minute)
	}
	return time.Time{}
}

func (c Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Prev returns the latest start of c at or before t and no more than
// within before it.
func (c Cron) Prev(t time.Time, within time.Duration) (time.Time, bool) {
	m := t.Truncate(time.Minute)
	stop := t.Add(-within)
	for !m.Before(stop) {
		if c.matches(m) {
			return m, true
		}
		m = m.Add(-time.Minute)
	}
	return time.Time{}, false
}

// validateUpdateLock checks l at field.
func validateUpdateLock(l *UpdateLock, field string, errs *errList) {
	if l == nil {
		return
	}
	if l.Path != "" {
		switch {
		case !strings.HasPrefix(l.Path, "/") || path.Clean(l.Path) != l.Path || strings.Contains(l.Path, ".."):
			errs.add(field+".path", "%q: want a clean absolute path inside the container, such as %s", truncate(l.Path), DefaultLockPath)
		case l.Path == "/" || underAny(l.Path, "/proc", "/sys", "/dev"):
			errs.add(field+".path", "%q: must not be / or under /proc, /sys or /dev", truncate(l.Path))
		}
	}
	if l.Deadline != "" {
		if d, err := time.ParseDuration(l.Deadline); err != nil || d <= 0 {
			errs.add(field+".deadline", "%q: want a positive duration such as 10m", truncate(l.Deadline))
		}
	}
	switch l.OnDeadline {
	case "", LockForce, LockWait:
	default:
		errs.add(field+".onDeadline", "unsupported value %q: want %s or %s", truncate(string(l.OnDeadline)), LockForce, LockWait)
	}
}

func underAny(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
