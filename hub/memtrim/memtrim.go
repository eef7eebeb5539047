package memtrim

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultInterval is how often the hub checks for heap to give back to
// the OS.
const DefaultInterval = 10 * time.Second

// trimMinSurplus is the least surplus heap worth a forced collection.
const trimMinSurplus = 64 << 20

// heapSample is what Run reads of the runtime.
type heapSample struct {
	cycles  uint64 // completed GC cycles
	live    uint64 // live heap as of the last GC
	surplus uint64 // heap held beyond it: dead objects not yet swept, free and unused spans
}

// heapSamples are the runtime metrics readHeap reads, in its order.
func heapSamples() []metrics.Sample {
	return []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
}

func readHeap(s []metrics.Sample) (heapSample, bool) {
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return heapSample{}, false // a runtime without these metrics
		}
	}
	held := s[2].Value.Uint64() + s[3].Value.Uint64() + s[4].Value.Uint64()
	h := heapSample{cycles: s[0].Value.Uint64(), live: s[1].Value.Uint64()}
	if held > h.live {
		h.surplus = held - h.live
	}
	return h, true
}

// Run gives the OS back the heap a burst left behind. After a
// reconnect storm or a fleet-wide rollout the Go runtime keeps the peak
// for a long while (its background scavenger returns memory slowly, and
// only down to about the next GC goal): with 10,000 devices, half the
// hub's 1.1 GB RSS after they had all converged. When no collection ran
// since the last check (the burst is over) and the heap held beyond the
// live one is at least 64 MiB and half the live heap, one forced
// collection and scavenge (debug.FreeOSMemory) returns it and shrinks the
// goroutine stacks the burst grew. While the hub is busy, nothing is
// forced.
func Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	samples := heapSamples()
	prev, ok := readHeap(samples)
	if !ok {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h, _ := readHeap(samples)
		if !shouldTrim(prev, h) {
			prev = h
			continue
		}
		start := time.Now()
		debug.FreeOSMemory()
		prev, _ = readHeap(samples)
		log.Info("returned surplus heap to the OS", "surplus_bytes", h.surplus, "live_bytes", h.live,
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// shouldTrim: no collection between the two samples, and a surplus worth
// returning.
func shouldTrim(prev, now heapSample) bool {
	return now.cycles == prev.cycles && now.surplus >= trimMinSurplus && now.surplus >= now.live/2
}
