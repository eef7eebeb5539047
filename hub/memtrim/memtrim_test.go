package memtrim

import (
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestShouldTrim(t *testing.T) {
	idle := heapSample{cycles: 7}
	for _, c := range []struct {
		name string
		now  heapSample
		want bool
	}{
		{"nothing held", heapSample{cycles: 7}, false},
		{"too little to be worth a collection", heapSample{cycles: 7, surplus: trimMinSurplus - 1}, false},
		{"a burst's leftovers over a small live heap", heapSample{cycles: 7, surplus: trimMinSurplus}, true},
		{"ordinary headroom of a big live heap", heapSample{cycles: 7, live: 4 * trimMinSurplus, surplus: trimMinSurplus}, false},
		{"half the live heap", heapSample{cycles: 7, live: 4 * trimMinSurplus, surplus: 2 * trimMinSurplus}, true},
		{"still collecting: busy", heapSample{cycles: 8, surplus: 10 * trimMinSurplus}, false},
	} {
		if got := shouldTrim(idle, c.now); got != c.want {
			t.Errorf("%s: shouldTrim = %v, want %v", c.name, got, c.want)
		}
	}
}

var sink [][]byte

// After a burst, the heap goes back to the OS once the hub is quiet.
func TestTrimMemoryReturnsABurst(t *testing.T) {
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	held := func() uint64 {
		h, _ := readHeap(heapSamples())
		return h.surplus
	}
	for range 256 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC()
	if s := held(); s < trimMinSurplus {
		t.Fatalf("the burst left a surplus of %d bytes; the test needs at least %d", s, trimMinSurplus)
	}
	before := released()
	go Run(t.Context(), 10*time.Millisecond, slog.New(slog.DiscardHandler))
	deadline := time.Now().Add(10 * time.Second)
	for held() >= trimMinSurplus {
		if time.Now().After(deadline) {
			t.Fatalf("a surplus of %d bytes still held after 10s (released %d more)", held(), released()-before)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
