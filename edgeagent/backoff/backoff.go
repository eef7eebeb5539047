// Package backoff computes capped exponential delays with jitter, so that a
// fleet of devices that lost the same broker do not come back in lockstep.
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"
)

// FullJitter as Policy.Jitter draws each wait uniformly from [0, d]
// ("full jitter"): the widest spread of a fleet's retries.
const FullJitter = 1.0

// Policy is a capped exponential backoff: the n-th consecutive failure
// (n from 0) waits about Initial·Factorⁿ, at most Max. Factor is 2 when
// zero (values not above 1 also mean 2). Jitter in [0,1] is the fraction
// of each delay that is randomised: the wait is drawn uniformly from
// [d·(1-Jitter), d]. Zero Jitter means none; FullJitter (1) means [0, d].
type Policy struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64
	Factor  float64
}

// Delay returns the un-jittered delay after failures consecutive failures
// (0 for the first retry).
func (p Policy) Delay(failures int) time.Duration {
	if p.Initial <= 0 {
		return 0
	}
	f := p.Factor
	if f <= 1 {
		f = 2
	}
	d := p.Initial
	for i := 0; i < failures; i++ {
		if p.Max > 0 && d >= p.Max {
			break
		}
		if float64(d) > float64(1<<62)/f { // avoid overflow with Max unset
			break
		}
		d = time.Duration(float64(d) * f)
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Jittered returns Delay(failures) with jitter drawn from r (a *rand.Rand;
// nil uses the global source).
func (p Policy) Jittered(failures int, r *rand.Rand) time.Duration {
	d := p.Delay(failures)
	j := min(max(p.Jitter, 0), 1)
	if d <= 0 || j == 0 {
		return d
	}
	span := int64(float64(d) * j)
	if span <= 0 {
		return d
	}
	var n int64
	if r != nil {
		n = r.Int64N(span + 1)
	} else {
		n = rand.Int64N(span + 1)
	}
	return d - time.Duration(n)
}

// Backoff tracks consecutive failures of one operation. It is safe for
// concurrent use.
type Backoff struct {
	p        Policy
	mu       sync.Mutex
	failures int
	r        *rand.Rand
}

// New returns a Backoff; seed feeds its jitter (use different seeds per
// device, or 0 for a random seed).
func New(p Policy, seed uint64) *Backoff {
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Backoff{p: p, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Next records a failure and returns how long to wait before retrying.
func (b *Backoff) Next() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.p.Jittered(b.failures, b.r)
	b.failures++
	return d
}

// Reset forgets the failures (after a success).
func (b *Backoff) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
}

// Failures returns the number of consecutive failures recorded.
func (b *Backoff) Failures() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures
}
