package clock

import (
	"testing"
	"time"
)

func fired(t Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestFakeTimers(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start)
	a := c.NewTimer(time.Second)
	b := c.NewTimer(time.Minute)
	if c.Timers() != 2 {
		t.Fatalf("Timers = %d", c.Timers())
	}
	c.Advance(999 * time.Millisecond)
	if fired(a) || fired(b) {
		t.Fatal("fired early")
	}
	c.Advance(time.Millisecond)
	if !fired(a) || fired(b) {
		t.Fatal("a should fire, b not")
	}
	if !b.Stop() || b.Stop() {
		t.Fatal("Stop should report active once")
	}
	c.Advance(time.Hour)
	if fired(b) {
		t.Fatal("stopped timer fired")
	}
	b.Reset(time.Second)
	c.Advance(time.Second)
	if !fired(b) {
		t.Fatal("reset timer did not fire")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Hour + 2*time.Second)) {
		t.Fatalf("Now = %s", got)
	}
	z := c.NewTimer(0)
	if !fired(z) {
		t.Fatal("zero timer should fire at once")
	}
}

func TestRealClock(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Fatal("Stop of a pending real timer should report true")
	}
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
}
