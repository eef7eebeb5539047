package backoff

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDelayDoublesToMax(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := p.Delay(i); got != w*time.Second {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w*time.Second)
		}
	}
	if got := p.Delay(1000); got != time.Minute {
		t.Errorf("Delay(1000) = %s", got)
	}
	if got := (Policy{Initial: time.Second}).Delay(1000); got <= 0 {
		t.Errorf("uncapped Delay overflowed: %s", got)
	}
}

func TestJitterStaysInBoundsAndSpreads(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 10; n++ {
		d := p.Delay(n)
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			j := p.Jittered(n, r)
			if j < d/2 || j > d {
				t.Fatalf("Jittered(%d) = %s, outside [%s, %s]", n, j, d/2, d)
			}
			seen[j] = true
		}
		if len(seen) < 50 {
			t.Errorf("Jittered(%d) gave only %d distinct delays: no thundering-herd protection", n, len(seen))
		}
	}
	if got := (Policy{Initial: time.Second}).Jittered(2, r); got != 4*time.Second {
		t.Errorf("zero jitter changed the delay: %s", got)
	}
}

func TestBackoffNextAndReset(t *testing.T) {
	b := New(Policy{Initial: time.Second, Max: 4 * time.Second}, 7)
	var got []time.Duration
	for i := 0; i < 4; i++ {
		got = append(got, b.Next())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Next sequence %v, want %v", got, want)
		}
	}
	if b.Failures() != 4 {
		t.Fatalf("Failures = %d", b.Failures())
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset Next = %s", d)
	}
}

func TestSeedsDiffer(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}
	a, b := New(p, 1), New(p, 2)
	same := 0
	for i := 0; i < 6; i++ {
		if a.Next() == b.Next() {
			same++
		}
	}
	if same == 6 {
		t.Fatal("two devices with different seeds back off in lockstep")
	}
}

func TestFullJitterIsUniformOverTheWindow(t *testing.T) {
	p := Policy{Initial: 250 * time.Millisecond, Max: time.Minute, Jitter: FullJitter}
	r := rand.New(rand.NewPCG(7, 11))
	const n = 4000
	var below, above int // first retry in [0, 125 ms) and [125, 250 ms]
	for range n {
		d := p.Jittered(0, r)
		if d < 0 || d > 250*time.Millisecond {
			t.Fatalf("first retry %s outside [0, 250ms]", d)
		}
		if d < 125*time.Millisecond {
			below++
		} else {
			above++
		}
		if d := p.Jittered(20, r); d < 0 || d > time.Minute {
			t.Fatalf("capped retry %s outside [0, 60s]", d)
		}
	}
	if below < n*45/100 || above < n*45/100 {
		t.Errorf("first retries not spread over [0, 250ms]: %d below 125 ms, %d above", below, above)
	}
}

func TestFactor(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Factor: 1.5}
	want := []time.Duration{100, 150, 225, 338, 506, 759, 1000, 1000}
	for i, w := range want {
		if got := p.Delay(i).Round(time.Millisecond); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	// Zero, or a factor that would not grow, doubles.
	for _, f := range []float64{0, 1, 0.5} {
		if got := (Policy{Initial: time.Second, Factor: f}).Delay(3); got != 8*time.Second {
			t.Errorf("factor %v: Delay(3) = %v, want 8s", f, got)
		}
	}
	// No overflow without a cap.
	if got := (Policy{Initial: time.Second, Factor: 1.5}).Delay(1000); got <= 0 {
		t.Errorf("Delay(1000) = %v", got)
	}
}
