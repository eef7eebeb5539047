package hub

import (
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestShouldTrim(t *testing.T) {
	for _, c := range []struct {
		free, live uint64
		want       bool
	}{
		{0, 0, false},
		{trimMinFree - 1, 0, false},           // too little to be worth a collection
		{trimMinFree, 0, true},                // a burst's leftovers over an idle heap
		{trimMinFree, 4 * trimMinFree, false}, // ordinary headroom of a big live heap
		{2 * trimMinFree, 4 * trimMinFree, true},
	} {
		if got := shouldTrim(c.free, c.live); got != c.want {
			t.Errorf("shouldTrim(free %d, live %d) = %v, want %v", c.free, c.live, got, c.want)
		}
	}
}

var sink [][]byte

// After a burst, the free heap goes back to the OS at the next check.
func TestTrimMemoryReturnsABurst(t *testing.T) {
	free := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	for range 256 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC()
	if f := free(); f < trimMinFree {
		t.Fatalf("the burst left %d bytes free; the test needs at least %d", f, trimMinFree)
	}
	ctx := t.Context()
	go trimMemory(ctx, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	deadline := time.Now().Add(10 * time.Second)
	for free() >= trimMinFree {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of heap still free (not returned) after 10s", free())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
