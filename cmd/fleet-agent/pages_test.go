package main

import (
	"testing"
	"time"
)

// TestPageKeeper: releases come once a burst of work is over (the
// resident set stopped growing) and left at least pageSlack over the idle
// floor; a burst taken for the floor is released once more; never while
// settling, while the set grows, or, idle, period after period.
func TestPageKeeper(t *testing.T) {
	const mib = 1 << 20
	k := newPageKeeper(10*time.Second, 30*time.Second) // settle 5 polls, period 30
	if k.settle != 5 || k.period != 30 {
		t.Fatalf("settle %d, period %d; want 5, 30", k.settle, k.period)
	}
	k.released(6 * mib)
	step := func(what string, rss int64, want bool) {
		t.Helper()
		if got := k.observe(rss); got != want {
			t.Errorf("%s: observe(%.1f MiB) = %v, want %v (since %d, floor %.1f, low %.1f)", what, float64(rss)/mib, got, want, k.since, float64(k.floor)/mib, float64(k.low)/mib)
		}
	}
	// Settling: the idle set comes back, then is the floor.
	for i, rss := range []int64{7 * mib, 8 * mib, 9 * mib, 9 * mib, 9 * mib} {
		step("settling "+string(rune('1'+i)), rss, false)
	}
	step("idle", 9*mib+mib/2, false) // under the slack
	step("idle", 9*mib, false)
	step("burst, growing", 14*mib, false)
	step("burst, growing", 15*mib, false)
	step("burst over", 15*mib+100<<10, true) // a few pages more: quiet
	k.released(7 * mib)

	// A burst while settling is taken for the floor, above the lowest:
	// released once more as soon as it stops growing.
	for range 5 {
		step("settling on a burst", 15*mib, false)
	}
	step("burst over", 15*mib, true)
	k.released(7 * mib)
	for range 5 {
		step("settling", 9*mib, false)
	}
	for k.since < 3*k.period {
		step("idle", 9*mib+mib/2, false) // under the slack, period after period
	}
	step("burst, growing", 12*mib, false)
	step("burst over", 12*mib, true)
	k.released(7 * mib)

	// The idle set grew (more pods): one more release, then it is the
	// reference.
	for range 5 {
		step("settling, more pods", 12*mib, false)
	}
	step("idle, more pods: once more", 12*mib, true)
	k.released(7 * mib)
	for range 5 {
		step("settling, more pods", 12*mib, false)
	}
	for k.since < 3*k.period {
		step("idle, more pods", 12*mib, false)
	}

	// A first floor that is a burst (the first desired state during the
	// start-up settle): the period compares with what the release left.
	k = newPageKeeper(10*time.Second, 30*time.Second)
	k.released(6 * mib)
	for range 5 {
		step("first settle on a burst", 15*mib, false)
	}
	for k.since < k.period-1 {
		step("idle on the first floor", 15*mib, false)
	}
	step("period, first floor", 15*mib, true)
}
