package hub

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultMemoryTrimInterval is how often the hub checks for free heap to
// give back to the OS.
const DefaultMemoryTrimInterval = 15 * time.Second

// trimMinFree is the least free heap worth a forced collection.
const trimMinFree = 64 << 20

// trimMemory gives the OS back the heap a burst left free. After a
// reconnect storm or a fleet-wide rollout the Go runtime keeps the peak
// for a long while (its background scavenger returns memory slowly, and
// only down to about the next GC goal): with 10,000 devices that was
// ~40 KiB per device of free heap still resident after they had all
// converged. When at least 64 MiB, and at least half the live heap, is
// free, one forced collection and scavenge (debug.FreeOSMemory) returns it
// and shrinks the goroutine stacks the burst grew; between bursts nothing
// is forced.
func trimMemory(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
			return // a runtime without these metrics
		}
		free, live := samples[0].Value.Uint64(), samples[1].Value.Uint64()
		if !shouldTrim(free, live) {
			continue
		}
		start := time.Now()
		debug.FreeOSMemory()
		log.Debug("returned free heap to the OS", "free_bytes", free, "live_bytes", live,
			"took", time.Since(start).Round(time.Millisecond))
	}
}

func shouldTrim(free, live uint64) bool { return free >= trimMinFree && free >= live/2 }
