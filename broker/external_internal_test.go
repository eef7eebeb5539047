package broker

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := &backoff{min: 100 * time.Millisecond, max: time.Second}
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		for range 50 {
			bb := *b
			d := bb.next()
			if d < c/2 || d > c {
				t.Fatalf("step %d: delay %v outside [%v, %v]", i, d, c/2, c)
			}
		}
		b.next()
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
	// Jitter: delays at one step are not all equal.
	seen := map[time.Duration]bool{}
	for range 20 {
		bb := backoff{min: time.Second, max: time.Minute}
		seen[bb.next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
}
