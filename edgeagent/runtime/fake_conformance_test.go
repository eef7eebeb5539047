package runtime_test

import (
	"errors"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/runtimetest"
)

// TestFakeConformance holds the Fake to the contract the containerd
// runtime passes, so that what unit tests and hollow agents learn from it
// is true of the real thing.
func TestFakeConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
		f := runtime.NewFake(runtime.FakeOptions{})
		f.SetImageError(runtimetest.DefaultUnavailableImage, errors.New("dial tcp 127.0.0.1:1: connection refused"))
		return f
	}, "fleet.test/app:v1")
}
