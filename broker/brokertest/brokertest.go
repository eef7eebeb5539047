// Package brokertest runs Fleet's embedded broker in tests: on the
// options given (a loopback Addr, the test's accounts), until the test
// ends.
package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
)

// StopTimeout bounds how long Start's cleanup waits for the broker to
// stop before it fails the test.
const StopTimeout = 10 * time.Second

// Start creates a broker with o and runs it until the test ends; the test
// fails if the broker cannot start, if Run returns an error, or if it does
// not return within StopTimeout of the end.
func Start(t testing.TB, o broker.Options) *broker.Broker {
	t.Helper()
	b, err := broker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("broker: Run: %v", err)
			}
		case <-time.After(StopTimeout):
			t.Errorf("broker: Run did not return within %v of cancel", StopTimeout)
		}
	})
	return b
}
