package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary play the suite's roles: the suite
// re-executes its own binary (here, this test binary) for the simulator
// and the floor.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		if err := run(os.Args[1:]); err != nil {
			os.Stderr.WriteString("scale role: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if hubBuilt.Load() {
		if bin, err := hubBin(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// hubBuilt tells TestMain whether hubBin ran (so it never builds just to
// clean up).
var hubBuilt atomic.Bool

// hubBin builds fleet-hub once for every test of the process.
var hubBin = sync.OnceValues(func() (string, error) {
	hubBuilt.Store(true)
	dir, err := os.MkdirTemp("", "fleet-scale-test-")
	if err != nil {
		return "", err
	}
	return buildHub(context.Background(), dir)
})

// smokeOptions runs every phase at a size CI affords.
func smokeOptions(t *testing.T, brokerKind string) options {
	bin, err := hubBin()
	if err != nil {
		t.Fatal(err)
	}
	return options{
		HubBin: bin,
		Agents: 20, Broker: brokerKind, RuntimeLatency: 5 * time.Millisecond, LatencySigma: 0.3,
		StatusInterval: time.Millisecond, Changes: 20, Phases: allPhases, MemorySettle: 0,
		WorkDir: t.TempDir(), StateRoot: t.TempDir(), ConnectRate: 0, FloorInflight: 1000,
		DeadlineScale: 1, StormSignal: syscall.SIGTERM, HubLogLevel: "warn", AgentLogLevel: "off",
	}
}

// TestSmoke runs the whole pipeline with 20 hollow agents against a real
// fleet-hub, on its embedded broker and on Mosquitto (which must be
// installed; FLEET_SCALE_SMOKE_BROKERS=embedded limits it by hand): every phase must complete
// with every device converged (as the hub's API reports it), none lost,
// and no container started that did not have to be.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleet-hub, Mosquitto and two simulator processes")
	}
	kinds := []string{"embedded", "mosquitto"}
	if v := os.Getenv("FLEET_SCALE_SMOKE_BROKERS"); v != "" {
		kinds = strings.Split(v, ",") // e.g. "embedded" where Mosquitto misbehaves
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			if kind == "mosquitto" {
				if _, err := mosquittoBinary(); err != nil {
					t.Fatalf("%v (apt-get install -y mosquitto)", err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			o := smokeOptions(t, kind)
			start := time.Now()
			results, err := runOnce(ctx, o, log)
			t.Logf("%s in %v", kind, time.Since(start).Round(time.Millisecond))
			var table strings.Builder
			_ = writeTable(&table, results)
			t.Logf("results:\n%s", table.String())
			if err != nil {
				t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
			}
			var names []string
			for _, r := range results {
				names = append(names, r.Name)
				if r.Error != "" || r.Lost != 0 || r.RedundantRestarts != 0 {
					t.Errorf("%s: error %q, lost %d, redundant restarts %d", r.Name, r.Error, r.Lost, r.RedundantRestarts)
				}
				if r.Target == "" && !r.OK {
					t.Errorf("%s: ran cleanly without a target, but ok is false", r.Name)
				}
				switch r.Name {
				case phaseFloor, phaseConverge, phaseStorm:
					if r.Samples != o.Agents || r.WallMS <= 0 {
						t.Errorf("%s: %d samples of %d devices, wall %v ms", r.Name, r.Samples, o.Agents, r.WallMS)
					}
					if r.Name == phaseStorm && r.Reconnect != "jittered" {
						t.Errorf("storm: reconnect %q, want jittered", r.Reconnect)
					}
				case phaseSingle:
					if r.Samples != o.Changes || r.WallMS < r.MaxMS {
						t.Errorf("%s: %d samples of %d changes, wall %v ms (longest change %v ms)", r.Name, r.Samples, o.Changes, r.WallMS, r.MaxMS)
					}
				case phaseMemory:
					if r.HubRSSBytes <= 0 || r.HubRSSEmptyBytes <= 0 || r.HubRSSConvergedBytes <= 0 || r.HubRSSPeakBytes < r.HubRSSBytes {
						t.Errorf("%s: hub RSS %d, empty %d, converged %d, peak %d", r.Name, r.HubRSSBytes, r.HubRSSEmptyBytes, r.HubRSSConvergedBytes, r.HubRSSPeakBytes)
					}
					if r.AgentBytesPerDevice <= 0 {
						t.Errorf("%s: no simulator RSS per agent (the simulator's free and stats commands)", r.Name)
					}
				}
			}
			if !slices.Equal(names, allPhases) {
				t.Errorf("phases %v, want %v", names, allPhases)
			}
		})
	}
}

// TestStormAtOnce runs B4 with the jitter taken out of the agents'
// reconnect backoff: every agent retries at the same instants, and still
// none is lost and no container restarts.
func TestStormAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleet-hub and a simulator process")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := smokeOptions(t, "embedded")
	o.Phases = []string{phaseConverge, phaseStorm}
	o.ReconnectAtOnce = true
	results, err := runOnce(ctx, o, log)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
	}
	var storm *Result
	for i := range results {
		if results[i].Name == phaseStorm {
			storm = &results[i]
		}
	}
	if storm == nil {
		t.Fatalf("no storm result in %+v", results)
	}
	if storm.Reconnect != "at-once" || storm.Error != "" || storm.Samples != o.Agents || storm.Lost != 0 || storm.RedundantRestarts != 0 {
		t.Errorf("storm: reconnect %q, error %q, %d samples of %d, lost %d, redundant restarts %d",
			storm.Reconnect, storm.Error, storm.Samples, o.Agents, storm.Lost, storm.RedundantRestarts)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-agents", "10", "-broker", "mosquitto", "-runtime-latency", "65ms", "-phases", "floor,storm", "-storm-signal", "KILL", "-reconnect-at-once"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.Agents != 10 || o.Broker != "mosquitto" || o.RuntimeLatency != 65*time.Millisecond ||
		!slices.Equal(o.Phases, []string{phaseFloor, phaseStorm}) || o.StormSignal != syscall.SIGKILL || !o.ReconnectAtOnce {
		t.Errorf("options %+v", o)
	}
	for _, bad := range [][]string{
		{"-agents", "0"}, {"-broker", "emqx"}, {"-phases", "floor,nope"}, {"-storm-signal", "HUP"}, {"extra"},
		{"-runtime-latency", "-5ms"}, {"-runtime-latency", "slow"}, {"-runtime-latency", "lognormal:"}, {"-runtime-latency", "lognormalish"},
	} {
		var sink bytes.Buffer
		if _, err := parseOptions(bad, &sink); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestRuntimeLatencyForms: the issue's two settings, "0 ms, or lognormal
// around 65 ms", in the forms a user would type them.
func TestRuntimeLatencyForms(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "0ms": 0, "65ms": 65 * time.Millisecond, "lognormal": 65 * time.Millisecond,
		"LogNormal": 65 * time.Millisecond, "lognormal:80ms": 80 * time.Millisecond, " 1s ": time.Second,
	} {
		o, err := parseOptions([]string{"-runtime-latency", in}, io.Discard)
		if err != nil || o.RuntimeLatency != want {
			t.Errorf("-runtime-latency %q: %v, %v; want %v", in, o.RuntimeLatency, err, want)
		}
	}
	o, err := parseOptions(nil, io.Discard)
	if err != nil || o.RuntimeLatency != 0 {
		t.Errorf("default -runtime-latency: %v, %v; want 0", o.RuntimeLatency, err)
	}
}

// TestMemorySettleDefault: a small fleet's run does not wait for a memory
// trim that cannot happen; a given -memory-settle always wins.
func TestMemorySettleDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"-agents", "100"}, smallFleetMemorySettle},
		{[]string{"-agents", "1000"}, defaultMemorySettle},
		{[]string{"-agents", "100", "-memory-settle", "30s"}, 30 * time.Second},
		{[]string{"-agents", "10000", "-memory-settle", "0"}, 0},
	} {
		o, err := parseOptions(c.args, io.Discard)
		if err != nil || o.MemorySettle != c.want {
			t.Errorf("%q: memory settle %v, %v; want %v", c.args, o.MemorySettle, err, c.want)
		}
	}
}

func TestResultSettle(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Result
		want bool
	}{
		{"no target, clean", Result{Name: phaseFloor}, true},
		{"no target, error", Result{Name: phaseFloor, Error: "boom"}, false},
		{"no target, lost", Result{Name: phaseConverge, Lost: 1}, false},
		{"no target, redundant restarts", Result{Name: phaseStorm, RedundantRestarts: 2}, false},
		{"target met", Result{Name: phaseSingle, Target: "p99 ≤ 20ms", OK: true}, true},
		{"target missed", Result{Name: phaseSingle, Target: "p99 ≤ 20ms"}, false},
		{"target met, but an error", Result{Name: phaseConverge, Target: "p99 ≤ 250ms", OK: true, Error: "boom"}, false},
		{"target met, but lost", Result{Name: phaseStorm, Target: "wall ≤ 5s", OK: true, Lost: 3}, false},
	} {
		r := c.r
		r.settle()
		if r.OK != c.want {
			t.Errorf("%s: ok %v, want %v", c.name, r.OK, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	lat = append(lat, -1) // a device that never reported
	var r Result
	r.fill(lat)
	if r.Samples != 100 || r.Lost != 1 || r.P50MS != 50 || r.P99MS != 99 || r.MaxMS != 100 {
		t.Errorf("got %+v", r)
	}
	r = Result{}
	r.fill([]time.Duration{-1})
	if r.Lost != 1 || r.Samples != 0 || r.P99MS != 0 {
		t.Errorf("all lost: got %+v", r)
	}
}

func TestUpdateMarkdown(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	other := "# Benchmarks\n\n## Schema\n\nsomeone else's\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	m := machine{CPUs: 2, Model: "Test CPU", RAM: "1.0 GiB", Kernel: "6.0", GoVersion: "go1.26"}
	o1 := options{Agents: 1000, Broker: "embedded", StatusInterval: time.Millisecond}
	o2 := options{Agents: 10000, Broker: "mosquitto", RuntimeLatency: 65 * time.Millisecond, LatencySigma: 0.3, StatusInterval: time.Millisecond}
	r := []Result{{Name: phaseConverge, WallMS: 100, P50MS: 50, P99MS: 90, Ratio: 1.2, Target: "p99 ≤ 250ms", OK: true}}
	now := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	o3 := o2
	o3.ReconnectAtOnce = true                     // a run of its own, beside o2's
	for _, o := range []options{o1, o2, o3, o1} { // o1 twice: replaced, not duplicated
		if err := updateMarkdown(path, o, m, r, now); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.HasPrefix(doc, other) {
		t.Errorf("the other section changed:\n%s", doc)
	}
	for _, want := range []string{sectionHeading, "Test CPU", "#### 1000 agents, embedded broker", "#### 10000 agents, mosquitto broker", "agents reconnecting without jitter", "KubeEdge"} {
		if !strings.Contains(doc, want) {
			t.Errorf("missing %q in:\n%s", want, doc)
		}
	}
	if strings.Index(doc, "#### 1000 agents") > strings.Index(doc, "#### 10000 agents") {
		t.Errorf("runs not in size order:\n%s", doc)
	}
	if n := strings.Count(doc, "#### 1000 agents"); n != 1 {
		t.Errorf("run block written %d times:\n%s", n, doc)
	}
	if n := strings.Count(doc, sectionHeading); n != 1 {
		t.Errorf("section written %d times", n)
	}
	// A section after ours survives.
	if err := os.WriteFile(path, []byte(doc+"\n## Later\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateMarkdown(path, o2, m, r, now); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.HasSuffix(string(b), "## Later\n\nkept\n") || strings.Count(string(b), "#### 10000 agents") != 2 {
		t.Errorf("after a second section:\n%s", b)
	}
}

func TestCPUTimeAndRSS(t *testing.T) {
	if c := cpuTime(os.Getpid()); c < 0 {
		t.Errorf("cpuTime of self: %v", c)
	}
	if r := rss(os.Getpid()); r <= 0 {
		t.Errorf("rss of self: %d", r)
	}
	if c := cpuTime(1 << 30); c != -1 {
		t.Errorf("cpuTime of no process: %v", c)
	}
}

func TestHollowMemoryLimit(t *testing.T) {
	if got, want := hollowMemoryLimit(10_000, 24<<30), int64(512<<20+10_000*400<<10); got != want {
		t.Errorf("10,000 agents on 24 GiB: limit %d, want %d", got, want)
	}
	if got, want := hollowMemoryLimit(10_000, 8<<30), int64(2<<30); got != want {
		t.Errorf("10,000 agents on 8 GiB: limit %d, want a quarter of the machine, %d", got, want)
	}
	if got, want := hollowMemoryLimit(20, 0), int64(512<<20+20*400<<10); got != want {
		t.Errorf("machine size unknown: limit %d, want %d", got, want)
	}
}

func TestHostSteal(t *testing.T) {
	a := parseHostCPU("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3 4\n")
	if a != (hostCPU{total: 1000, steal: 35}) {
		t.Fatalf("parseHostCPU = %+v, want total 1000 and steal 35", a)
	}
	// Guest time is inside user: it must not be counted twice.
	b := parseHostCPU("cpu  300 0 100 1335 20 0 10 235 50 0\n")
	if got := stealPercent(a, b); got != 20 {
		t.Errorf("stealPercent = %v, want 20 (200 of 1000 ticks)", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if h := parseHostCPU(bad); h != (hostCPU{}) {
			t.Errorf("parseHostCPU(%q) = %+v, want zero", bad, h)
		}
	}
	// A kernel without the steal field reports none.
	if h := parseHostCPU("cpu 1 2 3 4 5\n"); h != (hostCPU{total: 15}) {
		t.Errorf("parseHostCPU(old kernel) = %+v", h)
	}
	if got := stealPercent(hostCPU{}, b); got != -1 {
		t.Errorf("stealPercent from nothing = %v, want -1", got)
	}
	if got := stealPercent(b, b); got != -1 {
		t.Errorf("stealPercent over no time = %v, want -1", got)
	}
	// This machine's own /proc/stat parses, if it has one.
	if _, err := os.Stat("/proc/stat"); err == nil && readHostCPU().total == 0 {
		t.Error("readHostCPU read nothing from /proc/stat")
	}
}
