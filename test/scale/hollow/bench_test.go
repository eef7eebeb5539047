package hollow_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// benchBrokerEnv makes the test binary the benchmark's broker process
// (see TestMain): the broker and the driver run apart from the agents, so
// the benchmark process's CPU is the agents' alone, as the scale suite
// measures it.
const benchBrokerEnv = "FLEET_HOLLOW_BENCH_BROKER"

func TestMain(m *testing.M) {
	if os.Getenv(benchBrokerEnv) == "1" {
		if err := benchBroker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench broker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchCommand is one line to the broker process: the devices (first
// line), then one round per line.
type benchCommand struct {
	Devices []hollow.Device `json:"devices,omitempty"`
	// Generation of the round; Pod: the desired state runs the scale
	// suite's pod (else none).
	Generation int64 `json:"generation,omitempty"`
	Pod        bool  `json:"pod,omitempty"`
}

type benchReply struct {
	Addr  string `json:"addr,omitempty"`
	Error string `json:"error,omitempty"`
}

// benchPod is the scale suite's converge pod (test/scale deployment).
func benchPod() schema.Pod {
	spec := schema.PodSpec{Containers: []schema.Container{{
		Name:  "app",
		Image: "registry.example.com/fleet/scale-app:1.0.0",
		Args:  []string{"--listen", ":8080"},
		Resources: schema.Resources{Limits: schema.ResourceList{
			Memory: "64Mi", CPU: "250m",
		}},
	}}}
	schema.DefaultPodSpec(&spec)
	return schema.Pod{Name: "scale", Spec: spec, Hash: schema.PodSpecHash(spec)}
}

// benchBroker runs an embedded broker for the devices of the first
// command and, for each further command, publishes a signed desired state
// to every device (as the hub does) and answers once every device
// reports it applied.
func benchBroker(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	if !sc.Scan() {
		return errors.New("no devices")
	}
	var first benchCommand
	if err := json.Unmarshal(sc.Bytes(), &first); err != nil {
		return err
	}
	auth := broker.NewStaticAuth()
	for _, d := range first.Devices {
		auth.Set(broker.Identity{Name: d.Name, Role: broker.RoleDevice}, d.Token)
	}
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	conn := b.InlineConn()
	defer conn.Close()
	topics := schema.Topics{}

	var mu sync.Mutex
	var want benchCommand
	left := map[string]bool{}
	done := make(chan struct{}, 1)
	pod := benchPod()
	if err := conn.Subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), func(topic string, payload []byte) {
		var st schema.DeviceStatus
		if json.Unmarshal(payload, &st) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !left[st.Device] || st.ObservedGeneration != want.Generation {
			return
		}
		if want.Pod && (len(st.Pods) != 1 || !st.Pods[0].Ready || st.Pods[0].Hash != pod.Hash) || !want.Pod && len(st.Pods) != 0 {
			return
		}
		delete(left, st.Device)
		if len(left) == 0 {
			done <- struct{}{}
		}
	}); err != nil {
		return err
	}
	if err := enc.Encode(benchReply{Addr: b.Addr().String()}); err != nil {
		return err
	}
	for sc.Scan() {
		var c benchCommand
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return err
		}
		mu.Lock()
		want = c
		for _, d := range first.Devices {
			left[d.Name] = true
		}
		mu.Unlock()
		for _, d := range first.Devices {
			ds := schema.DesiredState{
				TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
				Device:   d.Name, Generation: c.Generation, Store: "00000000-0000-4000-8000-000000000000",
			}
			if c.Pod {
				ds.Pods = []schema.Pod{pod}
			}
			canonical, err := json.Marshal(ds)
			if err != nil {
				return err
			}
			payload, err := schema.SignDesiredState(canonical, key, nil)
			if err != nil {
				return err
			}
			if err := conn.Publish(ctx, topics.Device(d.Name, schema.TopicDesired), payload, true); err != nil {
				return err
			}
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			mu.Lock()
			n := len(left)
			mu.Unlock()
			_ = enc.Encode(benchReply{Error: fmt.Sprintf("%d devices did not apply generation %d", n, c.Generation)})
			continue
		}
		if err := enc.Encode(benchReply{}); err != nil {
			return err
		}
	}
	return sc.Err()
}

// BenchmarkChange is the hollow agents' CPU per device-change, the
// scale suite's agents_cpu_ms / agents, without the suite: HOLLOW_AGENTS
// agents (default 100) in this process, the broker and the driver in a
// child process. Each op is one round: every agent is sent a signed
// desired state that alternately adds the scale suite's pod (as the
// converge phase does) and removes it, and the round ends when every
// agent reports it applied. cpu-µs/change is this process's CPU (user and
// system) per agent and round; cpu-µs/add (the converge phase's change)
// and cpu-µs/remove split it (a removal also collects the pod's image,
// which the next add pulls again). B/change and allocs/change are what
// the agents allocate per change: the simulator, as here, collects only
// at a memory limit, so each allocation is fresh memory. The state
// directories are on /dev/shm, as the suite's.
//
//	go test -run XXX -bench BenchmarkChange -benchtime 40x ./test/scale/hollow/
//
// With HOLLOW_BENCH_ATTACH=1 it prints "attach PID" and waits two
// seconds before the measured rounds ("detach" after them), for
// strace -c -f -p PID to count the agents' system calls per change.
func BenchmarkChange(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("HOLLOW_AGENTS")); err == nil && v > 0 {
		n = v
	}
	devs := make([]hollow.Device, n)
	for i := range devs {
		devs[i] = hollow.Device{Name: fmt.Sprintf("dev-%05d", i), Token: fmt.Sprintf("token-%d", i)}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchBrokerEnv+"=1")
	cmd.Stderr = os.Stderr
	toBroker, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	fromBroker, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		toBroker.Close()
		_ = cmd.Wait()
	})
	replies := bufio.NewScanner(fromBroker)
	enc := json.NewEncoder(toBroker)
	call := func(c benchCommand) benchReply {
		b.Helper()
		if err := enc.Encode(c); err != nil {
			b.Fatal(err)
		}
		if !replies.Scan() {
			b.Fatalf("broker process: no reply: %v", replies.Err())
		}
		var r benchReply
		if err := json.Unmarshal(replies.Bytes(), &r); err != nil {
			b.Fatal(err)
		}
		if r.Error != "" {
			b.Fatal(r.Error)
		}
		return r
	}
	addr := call(benchCommand{Devices: devs}).Addr

	root := b.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if root, err = os.MkdirTemp("/dev/shm", "hollow-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(root) })
	}
	s, err := hollow.New(hollow.Config{
		Broker: "tcp://" + addr, Devices: devs, StateRoot: root,
		StatusInterval: time.Millisecond, ConnectRate: 2500,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	deadline := time.Now().Add(time.Minute)
	for s.Stats().Connected < n {
		if time.Now().After(deadline) {
			b.Fatalf("connected: %+v", s.Stats())
		}
		time.Sleep(10 * time.Millisecond) // polling the agents' sessions
	}
	// As the scale suite's simulator (test/scale roles.go): collect only
	// at a memory limit sized for the agents, unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(512<<20 + int64(n)*400<<10))
	}
	gen := int64(1)
	round := func(pod bool) time.Duration {
		gen++
		cpu0 := processCPU(b)
		call(benchCommand{Generation: gen, Pod: pod})
		return processCPU(b) - cpu0
	}
	round(false) // the first state: the agents pin the hub's key
	round(true)  // warm
	round(false)
	var add, remove time.Duration
	var adds, removes int
	var m0, m1 goruntime.MemStats
	// HOLLOW_BENCH_ATTACH: a window for a tracer (see above), not
	// synchronization.
	attach := os.Getenv("HOLLOW_BENCH_ATTACH") != "" && b.N > 1
	if attach {
		fmt.Fprintf(os.Stderr, "attach %d\n", os.Getpid())
		time.Sleep(2 * time.Second)
	}
	b.ResetTimer()
	goruntime.ReadMemStats(&m0)
	for i := range b.N {
		if i%2 == 0 {
			add += round(true)
			adds++
		} else {
			remove += round(false)
			removes++
		}
	}
	b.StopTimer()
	goruntime.ReadMemStats(&m1)
	if attach {
		fmt.Fprintln(os.Stderr, "detach")
		time.Sleep(2 * time.Second)
	}
	per := func(d time.Duration, rounds int) float64 {
		if rounds == 0 {
			return 0
		}
		return float64(d.Microseconds()) / float64(rounds*n)
	}
	b.ReportMetric(per(add+remove, adds+removes), "cpu-µs/change")
	b.ReportMetric(per(add, adds), "cpu-µs/add")
	b.ReportMetric(per(remove, removes), "cpu-µs/remove")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N*n), "B/change")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N*n), "allocs/change")
	b.ReportMetric(0, "ns/op")
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
