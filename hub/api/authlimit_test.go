package api

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/schema"
)

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestAuthThrottle: after the burst of wrong tokens from one address the
// API answers 429 with Retry-After without checking; the admin token,
// which worked before, still works from that address; the monitor token,
// never used, waits for the refill.
func TestAuthThrottle(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	var failures, throttled int
	var mu sync.Mutex
	h := newTestHub(t, Options{AuthLimiter: ratelimit.NewAuthLimiter(ratelimit.AuthOptions{
		Now:         clk.Now,
		OnFailure:   func() { mu.Lock(); failures++; mu.Unlock() },
		OnThrottled: func() { mu.Lock(); throttled++; mu.Unlock() },
	})})
	if r := h.do(t, "GET", "/v1/devices", h.Admin, nil); r.Code != http.StatusOK {
		t.Fatalf("admin: %d %s", r.Code, r.Body)
	}
	codes := map[int]int{}
	for i := range 30 {
		r := h.do(t, "GET", "/v1/devices", fmt.Sprintf("wrong-%02d-%s", i, strings.Repeat("x", 40)), nil)
		codes[r.Code]++
		if r.Code == http.StatusTooManyRequests {
			if ra := r.Header.Get("Retry-After"); ra != "1" {
				t.Errorf("Retry-After %q, want 1", ra)
			}
			if st := r.status(t); st.Reason != ReasonTooManyRequests {
				t.Errorf("429 reason %q", st.Reason)
			}
		}
	}
	if codes[http.StatusUnauthorized] != ratelimit.DefaultAuthBurst || codes[http.StatusTooManyRequests] != 30-ratelimit.DefaultAuthBurst {
		t.Fatalf("30 wrong tokens: %v, want %d × 401 and the rest 429", codes, ratelimit.DefaultAuthBurst)
	}
	mu.Lock()
	if failures != ratelimit.DefaultAuthBurst || throttled != 30-ratelimit.DefaultAuthBurst {
		t.Errorf("counted %d failures, %d throttled", failures, throttled)
	}
	mu.Unlock()
	// A missing token is no guess: 401, not counted.
	if r := h.do(t, "GET", "/v1/devices", "", nil); r.Code != http.StatusUnauthorized {
		t.Errorf("no token while throttled: %d", r.Code)
	}
	if r := h.do(t, "GET", "/v1/devices", h.Admin, nil); r.Code != http.StatusOK {
		t.Errorf("admin token while throttled: %d %s", r.Code, r.Body)
	}
	if r := h.do(t, "GET", "/v1/devices", h.Monitor, nil); r.Code != http.StatusTooManyRequests {
		t.Errorf("unseen monitor token while throttled: %d, want 429", r.Code)
	}
	clk.Advance(time.Second)
	if r := h.do(t, "GET", "/v1/devices", h.Monitor, nil); r.Code != http.StatusOK {
		t.Errorf("monitor token after a refill: %d %s", r.Code, r.Body)
	}
	if logs := h.Logs.String(); strings.Contains(logs, "wrong-0") || strings.Contains(logs, h.Admin) {
		t.Error("a token was logged")
	}
}

// TestAuthThrottleAudited: an address that guesses tokens gets one audit
// entry for its 401s and one for its 429s at once, then one a minute each
// counting the others, never the tokens.
func TestAuthThrottleAudited(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	h := newTestHub(t, Options{AuthLimiter: ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Now: clk.Now})})
	fake := &fakeClock{t: time.Now()}
	h.API.agg.Now = fake.now
	// The admin token works before the guessing, so it still passes.
	if r := h.do(t, "GET", "/v1/devices", h.Admin, nil); r.Code != http.StatusOK {
		t.Fatalf("admin: %d %s", r.Code, r.Body)
	}
	for i := range 30 {
		h.do(t, "GET", "/v1/devices", fmt.Sprintf("wrong-%02d-%s", i, strings.Repeat("x", 40)), nil)
	}
	var got []string
	counts := map[string]int{}
	for _, e := range h.audit(t, "") {
		if e.Actor == schema.AuditAnonymous {
			got = append(got, e.Result+" "+e.Detail)
			counts[e.Result] += e.Count
			if strings.Contains(e.Detail, "wrong-") {
				t.Errorf("an audit entry holds a token: %+v", e)
			}
		}
	}
	// The first of each at once; the counts of the others written before
	// the trail is read.
	want := []string{"401 wrong bearer token", "429 too many failed logins from this address: refused unchecked",
		"401 wrong bearer token", "429 too many failed logins from this address: refused unchecked"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || counts["401"]+counts["429"] != 30 {
		t.Fatalf("anonymous audit entries (counts %v):\n%s\nwant:\n%s", counts, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A minute later: the first 429 again at once.
	fake.add(AuditThrottle)
	for i := range 2 {
		h.do(t, "GET", "/v1/devices", fmt.Sprintf("again-%02d-%s", i, strings.Repeat("y", 40)), nil)
	}
	var anon []schema.AuditEntry
	for _, e := range h.audit(t, "") {
		if e.Actor == schema.AuditAnonymous {
			anon = append(anon, e)
		}
	}
	if n := len(anon); n != 6 || anon[4].Result != "429" || anon[4].Count != 1 || anon[5].Result != "429" || anon[5].Count != 1 {
		t.Fatalf("the next 429 entries: %+v", anon)
	}
}
