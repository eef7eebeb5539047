package ratelimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/ratelimit"
)

// fakeClock is a hand-driven clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestBucket(t *testing.T) {
	clk := newFakeClock()
	r := ratelimit.Rate{Burst: 3, PerSecond: 2}
	var b ratelimit.Bucket
	for i := range 3 {
		if ok, _ := b.Take(r, clk.Now(), 1); !ok {
			t.Fatalf("take %d of a full bucket refused", i)
		}
	}
	ok, wait := b.Take(r, clk.Now(), 1)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("empty bucket: ok=%v wait=%v, want refused, 500ms", ok, wait)
	}
	clk.Advance(499 * time.Millisecond)
	if ok, _ := b.Take(r, clk.Now(), 1); ok {
		t.Fatal("token earned before its time")
	}
	clk.Advance(time.Millisecond)
	if ok, _ := b.Take(r, clk.Now(), 1); !ok {
		t.Fatal("token not earned after 500ms at 2/s")
	}
	// An hour later it holds Burst, not more.
	clk.Advance(time.Hour)
	n := 0
	for {
		if ok, _ := b.Take(r, clk.Now(), 1); !ok {
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("after an hour: %d tokens, want the burst, 3", n)
	}
	// A clock going back earns nothing and breaks nothing.
	clk.Advance(-time.Minute)
	if ok, _ := b.Take(r, clk.Now(), 1); ok {
		t.Error("token earned by a clock going back")
	}
	if ok, wait := b.Take(r, clk.Now(), 4); ok || wait != time.Duration(1<<63-1) {
		t.Errorf("taking more than the burst: ok=%v wait=%v, want never", ok, wait)
	}

	// Charge overdraws down to -Burst; Available takes nothing.
	clk.Advance(time.Hour)
	for range 10 {
		b.Charge(r, clk.Now(), 1)
	}
	if ok, wait := b.Available(r, clk.Now(), 1); ok || wait != 2*time.Second {
		t.Errorf("after overdrawing: ok=%v wait=%v, want a debt of 3 (the burst) plus 1: 2s at 2/s", ok, wait)
	}
	clk.Advance(2 * time.Second)
	for range 3 {
		if ok, _ := b.Available(r, clk.Now(), 1); !ok {
			t.Fatal("Available took a token")
		}
	}
}

func TestKeyedEvictsLeastRecentlyUsed(t *testing.T) {
	clk := newFakeClock()
	k := ratelimit.NewKeyed(ratelimit.Rate{Burst: 1, PerSecond: 0.001}, 3, clk.Now)
	for _, key := range []string{"a", "b", "c"} {
		if ok, _ := k.Take(key, 1); !ok {
			t.Fatalf("first take of %s refused", key)
		}
	}
	// "a" is used again (refused: empty), so "b" is the least recent.
	if ok, _ := k.Take("a", 1); ok {
		t.Fatal("a: second take allowed")
	}
	if ok, _ := k.Take("d", 1); !ok {
		t.Fatal("d: first take refused")
	}
	if k.Len() != 3 {
		t.Fatalf("%d buckets, want the bound, 3", k.Len())
	}
	// b was evicted: it starts full again; a and c are still empty.
	if ok, _ := k.Take("b", 1); !ok {
		t.Error("b was not evicted")
	}
	if ok, _ := k.Take("a", 1); ok {
		t.Error("a was evicted, though recently used")
	}
	// Available creates no bucket, and forgets one that is full again.
	k2 := ratelimit.NewKeyed(ratelimit.Rate{Burst: 2, PerSecond: 1}, 3, clk.Now)
	if ok, _ := k2.Available("x", 1); !ok || k2.Len() != 0 {
		t.Errorf("Available of a new key: %v, %d buckets", ok, k2.Len())
	}
	k2.Charge("x", 1)
	if ok, _ := k2.Available("x", 1); !ok || k2.Len() != 1 {
		t.Errorf("after one charge: %v, %d buckets", ok, k2.Len())
	}
	clk.Advance(time.Second)
	if ok, _ := k2.Available("x", 1); !ok || k2.Len() != 0 {
		t.Errorf("refilled: %v, %d buckets, want forgotten", ok, k2.Len())
	}
}

func TestAuthLimiterThrottlesFailuresOnly(t *testing.T) {
	clk := newFakeClock()
	var failures, throttled int
	l := ratelimit.NewAuthLimiter(ratelimit.AuthOptions{
		Now:         clk.Now,
		OnFailure:   func() { failures++ },
		OnThrottled: func() { throttled++ },
	})
	const attacker = "192.0.2.1"
	good := []byte("device-token")

	// Successes never use up the allowance.
	for range 100 {
		a, _, ok := l.Admit(attacker, []byte("dev-1"), good)
		if !ok {
			t.Fatal("a good credential was throttled before any failure")
		}
		a.Succeeded()
	}
	// The burst of failures is checked, then the source is throttled.
	checked := 0
	for i := range 1000 {
		a, wait, ok := l.Admit(attacker, []byte("dev-1"), fmt.Appendf(nil, "guess-%d", i))
		if !ok {
			if wait != time.Second {
				t.Fatalf("retry after %v, want 1s", wait)
			}
			continue
		}
		checked++
		a.Failed()
	}
	if checked != ratelimit.DefaultAuthBurst || failures != checked || throttled != 1000-checked {
		t.Fatalf("checked %d (failures %d, throttled %d) of 1000 guesses, want the burst %d", checked, failures, throttled, ratelimit.DefaultAuthBurst)
	}
	// Another source is not affected; IPv4-mapped addresses and ports
	// are the same source.
	if _, _, ok := l.Admit("198.51.100.7", []byte("x")); !ok {
		t.Error("another source throttled")
	}
	if _, _, ok := l.Admit(ratelimit.Source("[::ffff:192.0.2.1]:4711"), []byte("x")); ok {
		t.Error("the attacker's IPv4-mapped address is a new source")
	}
	// The device behind the attacker's NAT still gets in with the
	// credential that worked before; a new credential does not.
	a, _, ok := l.Admit(attacker, []byte("dev-1"), good)
	if !ok {
		t.Fatal("a known-good credential was throttled")
	}
	a.Succeeded()
	if _, _, ok := l.Admit(attacker, []byte("dev-2"), []byte("never-seen")); ok {
		t.Error("a new credential was checked from a throttled source")
	}
	// One guess a second after that.
	for sec := range 5 {
		clk.Advance(time.Second)
		a, _, ok := l.Admit(attacker, []byte("dev-1"), []byte("guess"))
		if !ok {
			t.Fatalf("second %d: no guess allowed", sec)
		}
		a.Failed()
		if _, _, ok := l.Admit(attacker, []byte("dev-1"), []byte("guess")); ok {
			t.Fatalf("second %d: two guesses allowed", sec)
		}
	}
	// A credential that stops working (rotated) is forgotten: it no
	// longer passes a throttled source.
	clk.Advance(time.Second)
	a, _, _ = l.Admit(attacker, []byte("dev-1"), good)
	a.Failed()
	if _, _, ok := l.Admit(attacker, []byte("dev-1"), good); ok {
		t.Error("a credential that failed is still known good")
	}
	if s := l.Stats(); s.Failures != int64(failures) || s.Throttled != int64(throttled) {
		t.Errorf("stats %+v, callbacks counted %d failures and %d throttled", s, failures, throttled)
	}
}

// TestAuthLimiterConcurrent: successes take nothing, so a fleet logging
// in at once from one address (a NAT; a hub restart empties the
// known-good set) is never throttled; failures checked at the same moment
// overdraw the bucket and the source pays it back by waiting.
func TestAuthLimiterConcurrent(t *testing.T) {
	clk := newFakeClock()
	l := ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Now: clk.Now})
	var attempts []ratelimit.Attempt
	for i := range 1000 {
		a, _, ok := l.Admit("203.0.113.5", fmt.Appendf(nil, "device-%d", i))
		if !ok {
			t.Fatalf("login %d of a storm throttled", i)
		}
		attempts = append(attempts, a)
	}
	for _, a := range attempts[:20] {
		a.Failed() // 20 failures checked side by side
	}
	for _, a := range attempts[20:] {
		a.Succeeded()
	}
	if _, wait, ok := l.Admit("203.0.113.5", []byte("guess")); ok || wait != 11*time.Second {
		t.Errorf("after 20 side-by-side failures: ok=%v, retry after %v; want 11s (a debt of 10, then 1)", ok, wait)
	}
	if _, _, ok := l.Admit("203.0.113.5", []byte("device-999")); !ok {
		t.Error("a device of the storm is throttled")
	}
}

func TestAuthLimiterBounded(t *testing.T) {
	clk := newFakeClock()
	l := ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Now: clk.Now, MaxSources: 100, MaxKnownGood: 10})
	for i := range 10000 {
		a, _, ok := l.Admit(fmt.Sprintf("10.0.%d.%d", i/256, i%256), []byte("bad"))
		if !ok {
			t.Fatalf("source %d throttled at its first failure", i)
		}
		a.Failed()
	}
	if n := l.Stats().Sources; n != 100 {
		t.Errorf("%d sources tracked, want the bound, 100", n)
	}
	for i := range 50 {
		a, _, _ := l.Admit("10.9.9.9", fmt.Appendf(nil, "good-%d", i))
		a.Succeeded()
	}
	// Only the 10 most recent good credentials are remembered.
	for range ratelimit.DefaultAuthBurst {
		a, _, _ := l.Admit("10.9.9.9", []byte("bad"))
		a.Failed()
	}
	for i, want := range map[int]bool{0: false, 39: false, 40: true, 49: true} {
		if _, _, ok := l.Admit("10.9.9.9", fmt.Appendf(nil, "good-%d", i)); ok != want {
			t.Errorf("good-%d passes the throttled source: %v, want %v", i, ok, want)
		}
	}
}

func TestSource(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:1234":             "192.0.2.1",
		"[::ffff:192.0.2.1]:1":       "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:80":  "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"192.0.2.9":                  "192.0.2.9",
		"pipe":                       "pipe",
		"@":                          "@",
	} {
		if got := ratelimit.Source(in); got != want {
			t.Errorf("Source(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKeyedCredit: a credit gives tokens back, never beyond the burst, and
// creates no bucket for a key that has none (it is full already).
func TestKeyedCredit(t *testing.T) {
	clk := newFakeClock()
	k := ratelimit.NewKeyed(ratelimit.Rate{Burst: 3, PerSecond: 0.001}, 8, clk.Now)
	k.Credit("new", 5)
	if k.Len() != 0 {
		t.Fatalf("credit of a key without a bucket created one (%d buckets)", k.Len())
	}
	for range 3 {
		if ok, _ := k.Take("a", 1); !ok {
			t.Fatal("take within the burst refused")
		}
	}
	if ok, _ := k.Take("a", 1); ok {
		t.Fatal("take beyond the burst allowed")
	}
	k.Credit("a", 2)
	for i := range 2 {
		if ok, _ := k.Take("a", 1); !ok {
			t.Fatalf("credited token %d refused", i+1)
		}
	}
	if ok, _ := k.Take("a", 1); ok {
		t.Fatal("more taken than credited")
	}
	k.Credit("a", 100)
	n := 0
	for ; n < 10; n++ {
		if ok, _ := k.Take("a", 1); !ok {
			break
		}
	}
	if n != 3 {
		t.Errorf("after a credit of 100: %d tokens, want the burst, 3", n)
	}
}
