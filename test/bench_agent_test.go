package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// BenchmarkAgent is `make bench-agent`: the real fleet-agent (built as
// released, no -race) on the private containerd with three pods of the
// test image, at the default --resync-interval (30 s). It prints what
// issue 45 asks of the agent: idle CPU per hour over a window of
// FLEET_BENCH_AGENT_IDLE (default 5m), CPU per change that replaces a
// pod (FLEET_BENCH_AGENT_CHANGES, default 20), the agent's memory
// (VmRSS, RssAnon, RssFile, Pss) converged, idle and after the changes,
// the log writers' memory, and the host's steal over the run. It runs
// once whatever b.N (-benchtime 1x); go test without -bench never runs
// it, and with FLEET_REQUIRE_CONTAINERD=1 a missing containerd fails it.
func BenchmarkAgent(b *testing.B) {
	idle := benchEnvDuration(b, "FLEET_BENCH_AGENT_IDLE", 5*time.Minute)
	changes := benchEnvInt(b, "FLEET_BENCH_AGENT_CHANGES", 20)
	host0 := readHostCPU(b)
	// FLEET_BENCH_AGENT_ENV: environment of the agent, to compare
	// settings ("GOGC=50 GODEBUG=gctrace=1").
	f := StartFleet(b, FleetOptions{Agents: 1, AgentResync: 30 * time.Second, AgentEnv: strings.Fields(os.Getenv("FLEET_BENCH_AGENT_ENV"))})
	dev := f.Devices()[0]
	agent := f.Agent(b, dev)
	pid := agent.PID()
	var deps []e2eDep
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("bench-agent-%d", i)
		deps = append(deps, e2eDep{Name: name, Selector: map[string]string{"fleet/device": dev}})
		names = append(names, name)
	}
	f.deleteOnCleanup(b, names...)

	var rep agentReport
	f.applyDeps(b, deps...)
	f.AwaitConverged(b, 2*time.Minute, dev)
	rep.mem("converged, 3 pods", readAgentMem(b, pid))
	agent.AwaitLog(b, 0, "start-up pages released", time.Minute)
	awaitResyncs(b, agent, 1, time.Minute)

	// Idle: the CPU over the window, the memory sampled each second.
	cpu0, t0 := agentCPU(b, pid), time.Now()
	lo, hi := sampleAgentMem(b, pid, idle)
	rep.idleCPU = float64(agentCPU(b, pid)-cpu0) / float64(time.Since(t0)) * 3600
	rep.idleWindow = time.Since(t0)
	rep.mem(fmt.Sprintf("idle, lowest over %v", idle), lo)
	rep.mem(fmt.Sprintf("idle, highest over %v", idle), hi)
	rep.mem("idle, at the end", readAgentMem(b, pid))

	rep.changes, rep.changeCPU, rep.changeTime = changeAgentPods(b, f, agent, dev, deps, changes)
	rep.mem(fmt.Sprintf("right after %d changes", changes), readAgentMem(b, pid))
	mark := agent.LogMark()
	agent.AwaitLog(b, mark, "pages released again", 2*time.Minute)
	rep.mem(fmt.Sprintf("after %d changes, released", changes), readAgentMem(b, pid))
	awaitResyncs(b, agent, 2, time.Minute)
	rep.mem(fmt.Sprintf("after %d changes, two resyncs later", changes), readAgentMem(b, pid))
	rep.writers = logWriterMem(b)
	rep.steal = readHostCPU(b).stealSince(host0)
	rep.print()
	if path := os.Getenv("FLEET_BENCH_AGENT_JSON"); path != "" {
		rep.writeJSON(b, path, hi)
	}
	b.ReportMetric(rep.idleCPU, "idle-cpu-s/h")
	b.ReportMetric(rep.changeCPU*1000, "cpu-ms/change")
	b.ReportMetric(float64(rep.rows[len(rep.rows)-1].m.rss)/(1<<20), "idle-rss-MiB")
}

// changeAgentPods replaces one pod n times (a new args is a new pod
// version), each time waiting for the device to report it converged, and
// returns the agent's CPU per change and the mean apply → converged time.
func changeAgentPods(b *testing.B, f *Fleet, agent *Agent, dev string, deps []e2eDep, n int) (int, float64, time.Duration) {
	b.Helper()
	pid := agent.PID()
	cpu0 := agentCPU(b, pid)
	var total time.Duration
	for i := range n {
		gen := f.Device(b, dev).Status.DesiredGeneration
		deps[i%len(deps)].Args = []string{"echo", fmt.Sprintf("v%d", i), "sleep", "forever"}
		start := time.Now()
		f.applyDeps(b, deps...)
		f.AwaitDevices(b, time.Minute, "converged on the replaced pod", func(d schema.Device) bool {
			return d.Status != nil && d.Status.Converged && d.Status.ObservedGeneration > gen
		}, dev)
		total += time.Since(start)
	}
	return n, (agentCPU(b, pid) - cpu0).Seconds() / float64(n), total / time.Duration(n)
}

// agentMem is a process's memory: /proc/PID/status and smaps_rollup.
type agentMem struct{ rss, anon, file, pss int64 }

func readAgentMem(t testing.TB, pid int) agentMem {
	t.Helper()
	m := agentMem{
		rss:  procStatusBytes(t, pid, "VmRSS"),
		anon: procStatusBytes(t, pid, "RssAnon"),
		file: procStatusBytes(t, pid, "RssFile"),
	}
	m.pss = procKB(t, fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	return m
}

// sampleAgentMem reads the memory every second for d and returns the
// samples of lowest and highest VmRSS.
func sampleAgentMem(t testing.TB, pid int, d time.Duration) (lo, hi agentMem) {
	t.Helper()
	end := time.Now().Add(d)
	lo = readAgentMem(t, pid)
	hi = lo
	for time.Now().Before(end) {
		time.Sleep(time.Second) // a sampling period, not a synchronisation
		m := readAgentMem(t, pid)
		if m.rss < lo.rss {
			lo = m
		}
		if m.rss > hi.rss {
			hi = m
		}
	}
	return lo, hi
}

// procKB reads a "Field: N kB" line of a /proc file, in bytes.
func procKB(t testing.TB, path, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in %s", field, path)
	return 0
}

// agentCPU is the CPU time of every thread of the process, from each
// thread's schedstat (nanoseconds; /proc/PID/stat counts 10 ms ticks, too
// coarse for an idle agent). The Go runtime does not end its threads.
func agentCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(stats) == 0 {
		t.Fatalf("no threads of %d: %v", pid, err)
	}
	var ns int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that just ended
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("parse %s %q: %v", p, b, err)
		}
		ns += v
	}
	return time.Duration(ns)
}

// logWriterMem is the memory of every `fleet-agent log-writer` process.
func logWriterMem(t testing.TB) []agentMem {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var ws []agentMem
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if len(args) < 2 || filepath.Base(string(args[0])) != "fleet-agent" || string(args[1]) != "log-writer" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ws = append(ws, readAgentMem(t, pid))
	}
	return ws
}

// hostCPU is the machine's CPU time from /proc/stat's cpu line, in ticks.
type hostCPU struct{ total, steal int64 }

func readHostCPU(t testing.TB) hostCPU {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatalf("read /proc/stat: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: %q", line)
	}
	var c hostCPU
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat %q: %v", line, err)
		}
		if i < 8 { // user … steal; guest time is counted in user already
			c.total += v
		}
		if i == 7 {
			c.steal = v
		}
	}
	return c
}

// stealSince is the share of the CPU time since c0 that was stolen.
func (c hostCPU) stealSince(c0 hostCPU) float64 {
	if c.total <= c0.total {
		return 0
	}
	return float64(c.steal-c0.steal) / float64(c.total-c0.total)
}

type agentReport struct {
	rows []struct {
		when string
		m    agentMem
	}
	idleCPU    float64 // CPU seconds per hour
	idleWindow time.Duration
	changes    int
	changeCPU  float64 // CPU seconds per change
	changeTime time.Duration
	writers    []agentMem
	steal      float64
}

func (r *agentReport) mem(when string, m agentMem) {
	r.rows = append(r.rows, struct {
		when string
		m    agentMem
	}{when, m})
}

// print writes the report as a Markdown table, to paste into
// BENCHMARKS.md.
func (r *agentReport) print() {
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	load, _ := os.ReadFile("/proc/loadavg")
	var w strings.Builder
	fmt.Fprintf(&w, "\nfleet-agent on containerd, three pods, --resync-interval 30s (load %s, steal %.1f%% over the run)\n\n",
		strings.Join(strings.Fields(string(load))[:3], " "), r.steal*100)
	fmt.Fprintf(&w, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(&w, "| idle CPU (window %v) | %.2f CPU s per hour |\n", r.idleWindow.Round(time.Second), r.idleCPU)
	fmt.Fprintf(&w, "| CPU per change that replaces a pod (%d changes, apply → converged %v mean) | %.1f ms |\n",
		r.changes, r.changeTime.Round(time.Millisecond), r.changeCPU*1000)
	fmt.Fprintf(&w, "\n| agent memory (MiB) | VmRSS | RssAnon | RssFile | Pss |\n|---|---|---|---|---|\n")
	for _, row := range r.rows {
		fmt.Fprintf(&w, "| %s | %s | %s | %s | %s |\n", row.when, mib(row.m.rss), mib(row.m.anon), mib(row.m.file), mib(row.m.pss))
	}
	var sum agentMem
	for _, m := range r.writers {
		sum.rss, sum.anon, sum.file, sum.pss = sum.rss+m.rss, sum.anon+m.anon, sum.file+m.file, sum.pss+m.pss
	}
	if n := int64(len(r.writers)); n > 0 {
		fmt.Fprintf(&w, "| each of the %d log writers, mean | %s | %s | %s | %s |\n", n, mib(sum.rss/n), mib(sum.anon/n), mib(sum.file/n), mib(sum.pss/n))
	}
	fmt.Print(w.String())
}

func benchEnvDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration such as 5m", name, v)
	}
	return d
}

func benchEnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// writeJSON writes the figures make bench's headline reads (test/scale
// summary.go, AgentFigures): the memory is the idle maximum, the one the
// issue's 15 MiB is about.
func (r *agentReport) writeJSON(t testing.TB, path string, idle agentMem) {
	t.Helper()
	load, _ := os.ReadFile("/proc/loadavg")
	cpuMS, steal := r.changeCPU*1000, r.steal*100
	out, err := json.Marshal(map[string]any{
		"idle_cpu_s_per_hour": r.idleCPU, "cpu_ms_per_change": cpuMS,
		"vmrss_max_bytes": idle.rss, "pss_max_bytes": idle.pss, "steal_pct": steal,
		"load_avg": strings.Join(strings.Fields(string(load))[:1], ""),
		"note":     fmt.Sprintf("idle window %v at --resync-interval 30s, %d changes; memory: the idle maximum", r.idleWindow.Round(time.Second), r.changes),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
