package broker

import (
	"sync"
	"testing"
	"time"
)

func TestDispatcherOrderAndClose(t *testing.T) {
	d := newDispatcher(discard)
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	for i := range 3000 { // past the warning threshold, without blocking
		if !d.enqueue(func() {
			if i == 0 {
				<-release
			}
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
		}) {
			t.Fatal("enqueue refused")
		}
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3000 run", n)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("run out of order at %d: %d", i, v)
		}
	}

	// close waits for the running function and drops the rest.
	running, unblock := make(chan struct{}), make(chan struct{})
	ran := make(chan struct{}, 1)
	d.enqueue(func() { close(running); <-unblock })
	d.enqueue(func() { ran <- struct{}{} })
	<-running
	closed := make(chan struct{})
	go func() { d.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a handler runs")
	case <-time.After(20 * time.Millisecond):
	}
	close(unblock)
	<-closed
	select {
	case <-ran:
		t.Fatal("queued function ran after close")
	default:
	}
	if d.enqueue(func() {}) {
		t.Fatal("enqueue after close accepted")
	}
	d.close() // idempotent
}
