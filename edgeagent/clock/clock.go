// Package clock is the agent's view of time: an interface with the real
// clock and a Fake whose time moves only when a test says so.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the agent uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire after d.
	Reset(d time.Duration)
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a manually advanced clock. Its timers fire, in order of their
// deadlines, from Advance. The zero value is not usable; use NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires once the clock reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	keep := f.timers[:0]
	for _, t := range f.timers {
		if !t.when.After(now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(f.timers[len(keep):])
	f.timers = keep
	f.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		select {
		case t.c <- now:
		default: // like time.Timer: an unread tick is not doubled
		}
	}
}

// Timers returns how many timers are pending: tests wait for a goroutine to
// arm its timer before advancing.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

type fakeTimer struct {
	f    *Fake
	c    chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.Stop()
	// Drain a stale tick so the new deadline is the only one seen, as
	// time.Timer does since Go 1.23.
	select {
	case <-t.c:
	default:
	}
	t.f.mu.Lock()
	t.when = t.f.now.Add(d)
	if d <= 0 {
		t.f.mu.Unlock()
		select {
		case t.c <- t.when:
		default:
		}
		return
	}
	t.f.timers = append(t.f.timers, t)
	t.f.mu.Unlock()
}
