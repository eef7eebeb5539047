package edgeagent

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
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
	benchChanges(b, change)
}

// benchChanges applies generation 1 (to connect and warm up), then b.N
// more, and reports the process's CPU per change.
func benchChanges(b *testing.B, change func(gen int64)) {
	change(1)
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

// BenchmarkAgentChangeContainerd is BenchmarkAgentChange on a real,
// private containerd (skipped without one, see containerdtest;
// FLEET_REQUIRE_CONTAINERD=1 makes that a failure) with the state on
// disk: each change replaces the pod's container (stop, remove, create,
// start a task that sleeps). cpu-µs/op is this process's CPU: the agent,
// its containerd client and the test broker, not containerd's or the
// shims'.
func BenchmarkAgentChangeContainerd(b *testing.B) {
	d := containerdtest.Start(b)
	const ns = "fleet-agent-bench"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tarPath, ref := testimage.Build(b, testimage.Options{})
	if _, err := testimage.Import(namespaces.WithNamespace(ctx, ns), d.Client(), tarPath, ""); err != nil {
		b.Fatal(err)
	}
	rt, err := containerd.New(ctx, containerd.Options{
		Socket: d.Socket(), Namespace: ns,
		Logger:   slog.New(slog.DiscardHandler),
		Registry: containerd.RegistryConfig{Mirrors: map[string][]string{"fleet.test": {"http://127.0.0.1:1"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close() })

	br := startBroker(b, nil)
	br.addDevice("pi-1", "token-pi-1")
	o := fastOptions(b, "pi-1", "tcp://"+br.addr, rt, b.TempDir())
	o.Logger = slog.New(slog.DiscardHandler)
	o.StatusInterval = time.Millisecond
	o.HeartbeatInterval = time.Hour
	o.ResyncInterval = time.Hour
	o.StopTimeout = time.Second
	_, stop := runAgent(b, o)
	defer stop()

	change := func(gen int64) {
		p := schema.Pod{Name: "app", Spec: schema.PodSpec{RestartPolicy: schema.RestartAlways, Containers: []schema.Container{{
			Name: "c0", Image: ref, Args: []string{"sleep", "forever"},
			Env: []schema.EnvVar{{Name: "GENERATION", Value: fmt.Sprint(gen)}},
		}}}}
		br.publishDesired("pi-1", desiredJSON(b, "pi-1", "s1", gen, p))
		br.awaitApplied("pi-1", gen, 1, schema.PhaseRunning)
	}
	benchChanges(b, change)
}
