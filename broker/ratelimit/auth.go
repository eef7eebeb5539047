package ratelimit

import (
	"container/list"
	"crypto/sha256"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of AuthOptions.
const (
	// DefaultAuthBurst failed attempts may come from one source at once…
	DefaultAuthBurst = 10
	// …and then DefaultAuthPerSecond a second.
	DefaultAuthPerSecond = 1
	// DefaultMaxSources bounds the sources tracked (~150 bytes each).
	DefaultMaxSources = 10000
	// DefaultMaxKnownGood bounds the credentials remembered as good
	// (~150 bytes each): more than the devices and operators of a large
	// fleet.
	DefaultMaxKnownGood = 65536
)

// AuthOptions configure an AuthLimiter. The zero value works.
type AuthOptions struct {
	// Rate of failed attempts allowed per source; default
	// DefaultAuthBurst, then DefaultAuthPerSecond.
	Rate Rate
	// MaxSources bounds the sources tracked; the least recently seen
	// goes first. Default DefaultMaxSources.
	MaxSources int
	// MaxKnownGood bounds the credentials remembered as good; default
	// DefaultMaxKnownGood.
	MaxKnownGood int
	// Now is the clock; default time.Now.
	Now Clock
	// OnFailure, if set, is called for every failed attempt, and
	// OnThrottled for every attempt refused unchecked (metrics).
	OnFailure   func()
	OnThrottled func()
}

// AuthLimiter slows down guessing of credentials from one source address.
//
// Only failures count: each failed attempt takes a token from its
// source's bucket, and an attempt is checked only while the bucket holds
// one. So a source may fail DefaultAuthBurst times at once and then once a
// second, and an attempt beyond that is refused without its credential
// being checked at all (no oracle, no hashing cost). Successful logins
// take nothing: a reconnect storm of a whole fleet behind one address is
// never throttled. Attempts checked at the same moment may overdraw the
// bucket (down to minus the burst); the debt is paid back by waiting.
//
// A throttled source may still log in with a credential that has
// succeeded before, from any address: that is how a real device behind
// the same NAT as an attacker keeps (re)connecting during the attack. The
// limiter remembers such credentials by their SHA-256 only, in memory; a
// guess matches one only if it is that credential. A credential that
// fails the real check afterwards (rotated, revoked) is forgotten. A
// credential never seen before (a device enrolled during the attack, from
// the attacker's address) competes with the attacker for the refill: one
// check a second. Use Admit, then exactly one of Attempt.Succeeded or
// Attempt.Failed.
type AuthLimiter struct {
	opts    AuthOptions
	sources *Keyed

	failures  atomic.Int64
	throttled atomic.Int64

	mu   sync.Mutex
	good map[[sha256.Size]byte]*list.Element
	lru  list.List // of [sha256.Size]byte; front: most recent
}

// NewAuthLimiter returns a limiter with opts' defaults filled in.
func NewAuthLimiter(opts AuthOptions) *AuthLimiter {
	if opts.Rate.Burst <= 0 {
		opts.Rate.Burst = DefaultAuthBurst
	}
	if opts.Rate.PerSecond <= 0 {
		opts.Rate.PerSecond = DefaultAuthPerSecond
	}
	if opts.MaxSources <= 0 {
		opts.MaxSources = DefaultMaxSources
	}
	if opts.MaxKnownGood <= 0 {
		opts.MaxKnownGood = DefaultMaxKnownGood
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &AuthLimiter{
		opts:    opts,
		sources: NewKeyed(opts.Rate, opts.MaxSources, opts.Now),
		good:    map[[sha256.Size]byte]*list.Element{},
	}
}

// Attempt is one authentication attempt Admit let through.
type Attempt struct {
	l      *AuthLimiter
	source string
	fp     [sha256.Size]byte
}

// Admit decides whether an attempt from source (see Source) presenting
// credential (every part of it: for MQTT, username and password) may be
// checked. When it may not, it returns false and how long the source
// should wait; the attempt is counted as throttled.
func (l *AuthLimiter) Admit(source string, credential ...[]byte) (Attempt, time.Duration, bool) {
	a := Attempt{l: l, source: source, fp: fingerprint(credential)}
	ok, wait := l.sources.Available(source, 1)
	if ok {
		return a, 0, true
	}
	if l.knownGood(a.fp) {
		return a, 0, true
	}
	l.throttled.Add(1)
	if l.opts.OnThrottled != nil {
		l.opts.OnThrottled()
	}
	return Attempt{}, max(wait, time.Second), false
}

// Succeeded records that the credential was good: it is remembered.
func (a Attempt) Succeeded() {
	if a.l == nil {
		return
	}
	a.l.remember(a.fp)
}

// Failed records a failed attempt: it takes a token from the source, and
// the credential, if it was remembered as good, is forgotten.
func (a Attempt) Failed() {
	if a.l == nil {
		return
	}
	a.l.sources.Charge(a.source, 1)
	a.l.forget(a.fp)
	a.l.failures.Add(1)
	if a.l.opts.OnFailure != nil {
		a.l.opts.OnFailure()
	}
}

// Stats are an AuthLimiter's counts since it was made.
type Stats struct {
	Failures, Throttled int64
	// Sources is the number of sources with a bucket (each has failed
	// recently).
	Sources int
}

// Stats returns the counts.
func (l *AuthLimiter) Stats() Stats {
	return Stats{Failures: l.failures.Load(), Throttled: l.throttled.Load(), Sources: l.sources.Len()}
}

func (l *AuthLimiter) knownGood(fp [sha256.Size]byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.good[fp]
	if ok {
		l.lru.MoveToFront(el)
	}
	return ok
}

func (l *AuthLimiter) remember(fp [sha256.Size]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.good[fp]; ok {
		l.lru.MoveToFront(el)
		return
	}
	for len(l.good) >= l.opts.MaxKnownGood {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.good, old.Value.([sha256.Size]byte))
	}
	l.good[fp] = l.lru.PushFront(fp)
}

func (l *AuthLimiter) forget(fp [sha256.Size]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.good[fp]; ok {
		l.lru.Remove(el)
		delete(l.good, fp)
	}
}

// fingerprint hashes the parts of a credential, each length-prefixed so
// that ("ab", "c") and ("a", "bc") differ.
func fingerprint(parts [][]byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		l := uint64(len(p))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write(p)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Source returns the key AuthLimiter tracks a remote address under: the
// IP address of an IPv4 peer, the /64 network of an IPv6 peer (one host
// commonly holds a whole /64), or the address as given if it is not
// ip:port (a pipe in tests).
func Source(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remote
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return ip.String()
}
