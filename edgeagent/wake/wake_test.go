package wake

import "testing"

func TestSignalCollapsesAndNeverBlocks(t *testing.T) {
	c := New()
	for range 3 {
		Signal(c) // the second and third find c full and return
	}
	select {
	case <-c:
	default:
		t.Fatal("no wake after signals")
	}
	select {
	case <-c:
		t.Fatal("three signals woke the loop twice")
	default:
	}
	Signal(c)
	if len(c) != 1 {
		t.Fatalf("a signal after the wake was taken: %d queued, want 1", len(c))
	}
}
