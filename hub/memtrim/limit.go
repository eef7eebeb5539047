package memtrim

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// limitInterval is how often the soft memory limit follows the
// footprint: often enough that a growing fleet (a reconnect storm adds
// 250 MB of live heap and stacks in a few seconds at 10,000 devices)
// raises it before the collector has to work against it for long.
const limitInterval = time.Second

// limitMinHeadroom is the least room above the footprint the limit
// leaves: with a small heap, GOGC alone paces the collector.
const limitMinHeadroom = 64 << 20

// limitHeadroomPercent is the room above the footprint, as a share of
// the live heap, the limit leaves for new allocations.
//
// Why a limit at all: since Go 1.18 GOGC counts goroutine stacks in the
// heap goal (goal = live + (live + stacks) × GOGC/100), and the
// embedded broker's two goroutines per client hold as much memory in
// stacks as the whole live heap (BENCHMARKS.md, issue 45: 255 MB of
// stacks beside 250 MB of live heap at 10,000 devices). GOGC=100 then
// lets the heap grow to three times its live size in a burst: a hub that
// needs 650 MB peaked at 1.2-1.3 GB after its fleet converged. A lower
// GOGC would hold the peak down too, but also makes every collection of
// a quiet hub come twice as often; the limit costs collections only
// when a burst reaches it.
const limitHeadroomPercent = 50

// limiter sets the process's soft memory limit (debug.SetMemoryLimit)
// to its footprint plus headroom, each limitInterval.
type limiter struct {
	on      bool
	samples []metrics.Sample
	set     int64 // the limit last set; 0: none
	prev    int64 // the limit before, restored by stop
}

// newLimiter returns a limiter that does nothing unless on (GOMEMLIMIT
// given: the operator's limit stays).
func newLimiter(on bool) *limiter {
	return &limiter{on: on, prev: debug.SetMemoryLimit(-1), samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}}
}

// footprint is what the process holds that a collection cannot free:
// the live heap, the heap's part-used spans, goroutine stacks and the
// runtime's own structures. It leaves out free pages and dead objects
// not yet swept.
type footprint struct {
	live, held uint64
}

func (l *limiter) read() (footprint, bool) {
	metrics.Read(l.samples)
	var v [5]uint64
	for i, s := range l.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return footprint{}, false
		}
		v[i] = s.Value.Uint64()
	}
	live, total, released, free, objects := v[0], v[1], v[2], v[3], v[4]
	idle := released + free + objects
	if idle > total+live {
		return footprint{}, false // metrics read at different instants
	}
	return footprint{live: live, held: total + live - idle}, true
}

// softLimit is the limit for footprint f.
func softLimit(f footprint) int64 {
	room := max(f.live*limitHeadroomPercent/100, limitMinHeadroom)
	return int64(min(f.held+room, math.MaxInt64/2))
}

// follow sets the limit for the footprint now.
func (l *limiter) follow() {
	if !l.on {
		return
	}
	f, ok := l.read()
	if !ok {
		return
	}
	l.set = softLimit(f)
	debug.SetMemoryLimit(l.set)
}

// stop puts back the limit there was before.
func (l *limiter) stop() {
	if l.on && l.set != 0 {
		debug.SetMemoryLimit(l.prev)
		l.set = 0
	}
}
