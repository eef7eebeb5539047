// Package ratelimit holds the token buckets Fleet uses against abuse: per
// source address against guessed credentials (AuthLimiter, shared by the
// hub's HTTP API and the embedded MQTT broker) and per client against
// publish floods (Keyed). Every type takes its clock from its options, so
// tests drive time by hand instead of sleeping.
package ratelimit

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// Clock returns the current time; time.Now by default.
type Clock func() time.Time

// Rate is the shape of a token bucket: it holds at most Burst tokens and
// gains PerSecond tokens a second. A bucket starts full.
type Rate struct {
	Burst     float64
	PerSecond float64
}

// Bucket is one token bucket. Its zero value is full on first use. It is
// not safe for concurrent use: Keyed and AuthLimiter lock around it.
type Bucket struct {
	tokens float64
	last   time.Time
}

// refill adds the tokens earned since the last call. A clock that goes
// back earns nothing.
func (b *Bucket) refill(r Rate, now time.Time) {
	if b.last.IsZero() {
		b.tokens, b.last = r.Burst, now
		return
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(r.Burst, b.tokens+el.Seconds()*r.PerSecond)
		b.last = now
	}
}

// Take takes n tokens if the bucket holds them. Otherwise it takes
// nothing and returns how long until it will hold n (forever, as the
// largest Duration, if the rate cannot refill that many).
func (b *Bucket) Take(r Rate, now time.Time, n float64) (ok bool, wait time.Duration) {
	b.refill(r, now)
	if b.tokens >= n {
		b.tokens -= n
		return true, 0
	}
	if r.PerSecond <= 0 || n > r.Burst {
		return false, time.Duration(math.MaxInt64)
	}
	return false, time.Duration(math.Ceil((n - b.tokens) / r.PerSecond * float64(time.Second)))
}

// Available reports whether the bucket holds n tokens, taking none, and
// if not how long until it will (as Take).
func (b *Bucket) Available(r Rate, now time.Time, n float64) (ok bool, wait time.Duration) {
	b.refill(r, now)
	if b.tokens >= n {
		return true, 0
	}
	if r.PerSecond <= 0 || n > r.Burst {
		return false, time.Duration(math.MaxInt64)
	}
	return false, time.Duration(math.Ceil((n - b.tokens) / r.PerSecond * float64(time.Second)))
}

// Charge takes n tokens even if the bucket holds fewer, down to -Burst: a
// debt the refill pays back before the next token is available.
func (b *Bucket) Charge(r Rate, now time.Time, n float64) {
	b.refill(r, now)
	b.tokens = math.Max(-r.Burst, b.tokens-n)
}

// Credit gives n tokens back, up to Burst: traffic the bucket's owner
// was asked for (see Keyed.Credit).
func (b *Bucket) Credit(r Rate, now time.Time, n float64) {
	b.refill(r, now)
	b.tokens = math.Min(r.Burst, b.tokens+n)
}

// full reports whether the bucket holds Burst tokens: it then behaves as
// a new one and need not be kept.
func (b *Bucket) full(r Rate, now time.Time) bool {
	b.refill(r, now)
	return b.tokens >= r.Burst
}

// Keyed holds one Bucket per key (a source address, a client) in a map
// bounded to Max keys: when a new key comes in, the least recently used
// key goes (it is most likely full again by then, and a full bucket is
// the same as a new one). It is safe for concurrent use.
type Keyed struct {
	rate Rate
	max  int
	now  Clock

	mu  sync.Mutex
	m   map[string]*list.Element // of *keyedEntry
	lru list.List                // front: most recently used
}

type keyedEntry struct {
	key string
	b   Bucket
}

// NewKeyed returns buckets of the rate, at most limit of them (at least 1);
// now nil means time.Now.
func NewKeyed(rate Rate, limit int, now Clock) *Keyed {
	if now == nil {
		now = time.Now
	}
	return &Keyed{rate: rate, max: max(limit, 1), now: now, m: map[string]*list.Element{}}
}

// Rate returns the buckets' rate.
func (k *Keyed) Rate() Rate { return k.rate }

// Take takes n tokens from key's bucket, as Bucket.Take.
func (k *Keyed) Take(key string, n float64) (bool, time.Duration) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.get(key)
	return e.b.Take(k.rate, now, n)
}

// Available reports whether key's bucket holds n tokens, as
// Bucket.Available. It creates no bucket: a key without one is full.
func (k *Keyed) Available(key string, n float64) (bool, time.Duration) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	el, ok := k.m[key]
	if !ok {
		var b Bucket
		return b.Available(k.rate, now, n)
	}
	e := el.Value.(*keyedEntry)
	ok, wait := e.b.Available(k.rate, now, n)
	if ok && e.b.full(k.rate, now) {
		// Full again: the same as no bucket.
		k.lru.Remove(el)
		delete(k.m, key)
	}
	return ok, wait
}

// Charge takes n tokens from key's bucket, as Bucket.Charge.
func (k *Keyed) Charge(key string, n float64) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.get(key).b.Charge(k.rate, now, n)
}

// Credit gives n tokens back to key's bucket, up to the burst, as
// Bucket.Credit. A key without a bucket is full already: it creates none.
func (k *Keyed) Credit(key string, n float64) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if el, ok := k.m[key]; ok {
		el.Value.(*keyedEntry).b.Credit(k.rate, now, n)
	}
}

// Len returns the number of buckets held.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

// get returns key's entry, creating it (and evicting the least recently
// used one if the map is full); k.mu is held.
func (k *Keyed) get(key string) *keyedEntry {
	if el, ok := k.m[key]; ok {
		k.lru.MoveToFront(el)
		return el.Value.(*keyedEntry)
	}
	for len(k.m) >= k.max {
		old := k.lru.Back()
		k.lru.Remove(old)
		delete(k.m, old.Value.(*keyedEntry).key)
	}
	e := &keyedEntry{key: key}
	k.m[key] = k.lru.PushFront(e)
	return e
}
