package edgeagent

import (
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// BenchmarkAgentChange is what one change costs an agent: the hub
// publishes a desired state that replaces the device's pod, and the agent
// receives it, persists it, stops and removes the old container, creates
// and starts the new one (the Fake runtime, no latency), persists its
// records and reports the pod running. Per op: the wall time from the
// publish to that status, and the CPU of the whole process (agent and the
// in-process test broker, which is the same in every run).
func BenchmarkAgentChange(b *testing.B) {
	br := startBroker(b, nil)
	br.addDevice("pi-1", "token-pi-1")
	o := fastOptions(b, "pi-1", "tcp://"+br.addr, runtime.NewFake(runtime.FakeOptions{}), b.TempDir())
	o.Logger = slog.New(slog.DiscardHandler)
	o.StatusInterval = time.Millisecond
	o.HeartbeatInterval = time.Hour
	o.ResyncInterval = time.Hour
	runAgent(b, o)

	change := func(gen int64) {
		br.publishDesired("pi-1", desiredJSON(b, "pi-1", "s1", gen, podOf("app", schema.RestartAlways, fmt.Sprintf("app:%d", gen))))
		br.awaitApplied("pi-1", gen, 1, schema.PhaseRunning)
	}
	change(1) // connected, warm
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		change(int64(i + 2))
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
