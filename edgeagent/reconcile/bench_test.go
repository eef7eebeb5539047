package reconcile

import (
	"context"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/desired"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// BenchmarkChange is what a change costs the agent from the inbox on:
// decoding and judging the payload (desired.Inbox.Offer), persisting it,
// the passes, the Fake runtime's calls and the status the reconciler
// hands on, without MQTT, signatures, status or event publishing. Each op
// is one change, alternately adding the scale suite's pod and removing it;
// it ends when the reconciler reports the change applied. The state
// directory is on /dev/shm when there is one, as the scale suite's.
func BenchmarkChange(b *testing.B) {
	root := b.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if root, err = os.MkdirTemp("/dev/shm", "reconcile-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(root) })
	}
	dir, err := state.Open(root)
	if err != nil {
		b.Fatal(err)
	}
	spec := schema.PodSpec{Containers: []schema.Container{{
		Name: "app", Image: "registry.example.com/fleet/scale-app:1.0.0", Args: []string{"--listen", ":8080"},
		Resources: schema.Resources{Limits: schema.ResourceList{Memory: "64Mi", CPU: "250m"}},
	}}}
	schema.DefaultPodSpec(&spec)
	pod := schema.Pod{Name: "scale", Spec: spec, Hash: schema.PodSpecHash(spec)}
	payload := func(gen int64) []byte {
		ds := schema.DesiredState{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
			Device:   "dev", Generation: gen, Store: "00000000-0000-4000-8000-000000000000",
		}
		if gen%2 == 1 {
			ds.Pods = []schema.Pod{pod}
		}
		p, err := json.Marshal(ds)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	// Payloads are made before the clock starts: the hub's work.
	payloads := make([][]byte, b.N+2)
	for i := range payloads {
		payloads[i] = payload(int64(i + 1))
	}
	applied := make(chan int64, 16)
	inbox := desired.New("dev", nil)
	rec, err := New(Options{
		Runtime: runtime.NewFake(runtime.FakeOptions{}), State: dir, Inbox: inbox, Agent: state.Agent{Containers: state.History{}},
		OnStatus: func(st Status) {
			if st.ObservedGeneration == 0 || st.ObservedGeneration != st.Generation {
				return
			}
			want := int(st.ObservedGeneration % 2)
			if len(st.Pods) != want || want == 1 && !st.Pods[0].Ready {
				return
			}
			select {
			case applied <- st.ObservedGeneration:
			default:
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	change := func(gen int64) {
		if out, _, err := inbox.Offer(payloads[gen-1]); out != desired.Accepted {
			b.Fatalf("generation %d: %v %v", gen, out, err)
		}
		for {
			select {
			case g := <-applied:
				if g == gen {
					return
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("generation %d not applied", gen)
			}
		}
	}
	change(1) // warm
	change(2)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		change(int64(i + 3))
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
