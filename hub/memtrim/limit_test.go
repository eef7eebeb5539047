package memtrim

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
	"time"
)

func TestSoftLimit(t *testing.T) {
	for _, c := range []struct {
		name string
		f    footprint
		want int64
	}{
		{"an empty process: the least headroom", footprint{}, limitMinHeadroom},
		{"a small heap: GOGC paces it", footprint{live: 10 << 20, held: 40 << 20}, 40<<20 + limitMinHeadroom},
		{"the hub at 10,000 devices: half the live heap above what it holds",
			footprint{live: 250 << 20, held: 600 << 20}, 600<<20 + 125<<20},
	} {
		if got := softLimit(c.f); got != c.want {
			t.Errorf("%s: softLimit(%+v) = %d, want %d", c.name, c.f, got, c.want)
		}
	}
}

// The footprint read from the runtime holds at least the live heap, and
// the limit set from it is lifted when Run ends.
func TestRunFollowsFootprint(t *testing.T) {
	// Run is on when GOMEMLIMIT is not set; the test starts from no
	// limit whatever the environment gave the process.
	t.Setenv("GOMEMLIMIT", "")
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	l := newLimiter(true)
	f, ok := l.read()
	if !ok {
		t.Fatal("the runtime's memory metrics cannot be read")
	}
	if f.held < f.live || f.held == 0 {
		t.Fatalf("footprint %+v: it must hold the live heap", f)
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		defer close(done)
		Run(ctx, time.Hour, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) == math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatal("no memory limit set within 10 s")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	if got := debug.SetMemoryLimit(-1); got < int64(f.held) {
		t.Errorf("limit %d below the footprint %d", got, f.held)
	}
	cancel()
	<-done
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit %d left after Run returned", got)
	}
}

// An operator's GOMEMLIMIT stays as it is.
func TestLimiterLeavesGOMEMLIMIT(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	l := newLimiter(false)
	l.follow()
	l.stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit %d set though GOMEMLIMIT was given", got)
	}
}
