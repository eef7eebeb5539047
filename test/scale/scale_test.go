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

	"github.com/fleetmq/fleet/schema"
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
		StatusInterval: time.Millisecond, Changes: 20, Phases: singlePhases(), MemorySettle: 0,
		WorkDir: t.TempDir(), StateRoot: t.TempDir(), ConnectRate: 0, FloorInflight: 1000,
		DeadlineScale: 1, StormSignal: syscall.SIGTERM, HubLogLevel: "warn", AgentLogLevel: "off",
		// The bytes phase: 5 agents through the counter, pinging every
		// 2 s, for 7 s.
		IdleWindow: 7 * time.Second, BytesSample: 5, AgentKeepAlive: 2 * time.Second,
	}
}

// singlePhases are the phases of a run on one broker: all but the
// bridged topology's uplink phase.
func singlePhases() []string {
	return slices.DeleteFunc(slices.Clone(allPhases), func(p string) bool { return p == phaseUplink })
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
				case phaseRollout:
					checkRollout(t, r)
				case phaseBytes:
					checkBytes(t, r)
				case phaseMemory:
					if r.HubRSSBytes <= 0 || r.HubRSSEmptyBytes <= 0 || r.HubRSSConvergedBytes <= 0 || r.HubRSSPeakBytes < r.HubRSSBytes {
						t.Errorf("%s: hub RSS %d, empty %d, converged %d, peak %d", r.Name, r.HubRSSBytes, r.HubRSSEmptyBytes, r.HubRSSConvergedBytes, r.HubRSSPeakBytes)
					}
					if r.AgentBytesPerDevice <= 0 {
						t.Errorf("%s: no simulator RSS per agent (the simulator's free and stats commands)", r.Name)
					}
				}
			}
			if want := singlePhases(); !slices.Equal(names, want) {
				t.Errorf("phases %v, want %v", names, want)
			}
		})
	}
}

// checkBytes asserts what the byte counter saw: in the idle window the
// sampled agents sent nothing but keepalives (pings, a few every
// keepalive, and their answers; no status republished, nothing
// reconnected), and a change cost a desired state down and a status up.
func checkBytes(t *testing.T, r Result) {
	t.Helper()
	f := r.Bytes
	if f == nil || f.Devices != 5 {
		t.Fatalf("bytes: figures %+v, want 5 devices sampled", f)
	}
	for k, v := range f.IdlePackets {
		if k != "up PINGREQ" && k != "down PINGRESP" {
			t.Errorf("bytes: an idle device sent or got %s (%.0f a day): want keepalives only", k, v)
		}
	}
	// 7 s at a 2 s keepalive: about 3 pings a device.
	perWindow := f.IdlePackets["up PINGREQ"] * f.WindowS / 86400
	if perWindow < 2 || perWindow > 5 {
		t.Errorf("bytes: %.1f pings per device in %.0f s with a 2 s keepalive", perWindow, f.WindowS)
	}
	if f.IdleWirePerDay <= f.IdlePayloadPerDay || f.IdleSegmentsPerDay <= 0 {
		t.Errorf("bytes: wire %.0f, payload %.0f, segments %.0f a day: headers not counted", f.IdleWirePerDay, f.IdlePayloadPerDay, f.IdleSegmentsPerDay)
	}
	if f.Reconnects != 0 {
		t.Errorf("bytes: %d reconnects while idle", f.Reconnects)
	}
	if f.ChangePackets["down PUBLISH"] < 1 || f.ChangePackets["up PUBLISH"] < 1 || f.ChangeWire <= 0 {
		t.Errorf("bytes: per change %+v (%.0f bytes): want a desired state down and a status up", f.ChangePackets, f.ChangeWire)
	}
}

// checkRollout asserts the rollout phase's verdict, not its timings: v2
// rolled back, at or before the step due, having reached no more devices
// than that step allows, and every device back on v1.
func checkRollout(t *testing.T, r Result) {
	t.Helper()
	f := r.Rollout
	if f == nil {
		t.Fatalf("%s: no rollout figures: %+v", r.Name, r)
	}
	if r.Error != "" || !r.OK || r.Lost != 0 {
		t.Errorf("%s: error %q, ok %v, lost %d", r.Name, r.Error, r.OK, r.Lost)
	}
	if f.Phase != string(schema.RolloutRolledBack) || f.StopStep < 1 || f.StopStep > f.DueStep {
		t.Errorf("%s: phase %s at step %d, want RolledBack by step %d (%s)", r.Name, f.Phase, f.StopStep, f.DueStep, f.Reason)
	}
	if f.EverNew == 0 || f.EverNew > f.Allowed || f.MaxUpdated == 0 || f.MaxUpdated > f.Allowed {
		t.Errorf("%s: %d devices reported v2, the hub gave it to up to %d; allowed %d", r.Name, f.EverNew, f.MaxUpdated, f.Allowed)
	}
	if f.FailedReported < f.FailureLimit || f.FailedReported > f.FailDevices {
		t.Errorf("%s: %d devices reported v2 failing, want the limit %d to %d", r.Name, f.FailedReported, f.FailureLimit, f.FailDevices)
	}
	if r.Samples != f.EverNew || r.WallMS <= 0 || r.HubConfirmMS <= 0 {
		t.Errorf("%s: %d back on v1 of the %d that ran v2, wall %v ms, hub confirm %v ms", r.Name, r.Samples, f.EverNew, r.WallMS, r.HubConfirmMS)
	}
}

// TestRolloutAtScale is issue 28's "Safe rollouts" at scale: 200 hollow
// agents on the embedded broker, a Staged rollout of a revision that 10 %
// of them (every 10th by name) cannot pull. The rollout must stop at the
// failure threshold (5 %: the 10th failure, in the 50 % step), give the
// bad revision to no more devices than that step allows, and roll every
// device back. Timings are logged, never asserted.
func TestRolloutAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleet-hub and a simulator of 200 agents")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := smokeOptions(t, "embedded")
	o.Agents, o.Phases, o.ConnectRate = 200, []string{phaseRollout}, 1000
	start := time.Now()
	results, err := runOnce(ctx, o, log)
	t.Logf("%d agents in %v", o.Agents, time.Since(start).Round(time.Millisecond))
	var table strings.Builder
	_ = writeTable(&table, results)
	t.Logf("results:\n%s", table.String())
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, logs.String())
	}
	if len(results) != 1 || results[0].Name != phaseRollout {
		t.Fatalf("results %+v, want the rollout phase's only", results)
	}
	r := results[0]
	checkRollout(t, r)
	// 200 devices, 20 failing (index 9, 19, …), limit 10: steps reach 2,
	// 20 (2 failing), 100 (10 failing): due at step 3, 100 allowed.
	if f := r.Rollout; f.FailDevices != 20 || f.FailureLimit != 10 || f.DueStep != 3 || f.Allowed != 100 {
		t.Errorf("figures %+v: want 20 failing devices, limit 10, due at step 3 allowing 100", *f)
	}
}

func TestRolloutFailingAndDueStep(t *testing.T) {
	staged := rolloutStrategy().Staged
	for _, c := range []struct {
		n, failing, limit, due, allowed int
	}{
		{1, 1, 1, 1, 1}, // the only device fails
		// The last device fails: not in the steps of 2, 1 (10 %, so
		// still 2) and 3 (50 %) devices.
		{5, 1, 1, 4, 5},
		{20, 2, 1, 3, 10}, // device 9 is in the 50 % step
		{200, 20, 10, 3, 100},
		{1000, 100, 50, 3, 500},
		{10000, 1000, 500, 3, 5000},
	} {
		failing := rolloutFailing(c.n)
		due := rolloutDueStep(staged, c.n, failing)
		if len(failing) != c.failing || staged.FailureLimit(c.n) != c.limit || due != c.due || staged.StepTarget(due-1, c.n) != c.allowed {
			t.Errorf("n=%d: %d failing, limit %d, due at step %d allowing %d; want %d, %d, %d, %d",
				c.n, len(failing), staged.FailureLimit(c.n), due, staged.StepTarget(due-1, c.n), c.failing, c.limit, c.due, c.allowed)
		}
	}
	if due := rolloutDueStep(staged, 200, nil); due != 0 {
		t.Errorf("no failing device: due at step %d, want 0 (never)", due)
	}
}

// TestRolloutTracker: the tracker orders each device's reports by their
// time stamps (the monitor's clients deliver them concurrently), and
// counts devices that ever reported the new revision and when they first
// reported it failing.
func TestRolloutTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	report := func(ms int, hash string, ready bool, reason string) *statusLite {
		p := podLite{Name: rolloutDeployment, Hash: hash, Ready: ready}
		if reason != "" {
			p.Containers = []containerLite{{Reason: reason}}
		}
		return &statusLite{Time: at(ms), Pods: []podLite{{Name: convergeDeployment, Hash: "x", Ready: true}, p}}
	}
	tr := newRolloutTracker(3, rolloutDeployment, "old", "new")
	if _, missing := tr.allOld(); len(missing) != 3 {
		t.Fatalf("nothing reported: missing %v, want all 3", missing)
	}
	tr.observe(0, report(0, "old", true, ""), at(1))
	tr.observe(1, report(0, "old", true, ""), at(2))
	tr.observe(2, report(0, "old", true, ""), at(3))
	if last, missing := tr.allOld(); len(missing) != 0 || !last.Equal(at(3)) {
		t.Fatalf("all on old: last %v, missing %v", last, missing)
	}
	// Device 0 runs the new revision, then goes back; its reports arrive
	// out of order.
	tr.observe(0, report(10, "new", false, ""), at(11))
	tr.observe(0, report(30, "old", true, ""), at(31))
	tr.observe(0, report(20, "new", true, ""), at(32)) // older than the last
	// Device 1 fails the new revision and goes back.
	tr.observe(1, report(12, "new", false, "ErrImagePull"), at(13)) // not a failure the hub counts
	tr.observe(1, report(14, "new", false, "ImagePullBackOff"), at(15))
	tr.observe(1, report(16, "new", false, "ImagePullBackOff"), at(17))
	tr.observe(1, report(40, "old", true, ""), at(41))
	// Device 2 never left the old revision.
	last, missing := tr.allOld()
	if len(missing) != 0 || !last.Equal(at(41)) {
		t.Errorf("back on old: last %v, missing %v; want %v, none", last, missing, at(41))
	}
	everNew, failures := tr.counts()
	if everNew != 2 || len(failures) != 1 || !failures[0].Equal(at(15)) {
		t.Errorf("counts: %d ever new, failures %v; want 2 and [%v]", everNew, failures, at(15))
	}
	lat := tr.backLatencies(at(25))
	if !slices.Equal(lat, []time.Duration{6 * time.Millisecond, 16 * time.Millisecond}) {
		t.Errorf("back latencies %v, want [6ms 16ms]: devices 0 and 1, from 25 ms", lat)
	}
	// A later report off the old revision takes the device out again.
	tr.observe(2, report(50, "new", false, ""), at(51))
	if _, missing := tr.allOld(); !slices.Equal(missing, []int{2}) {
		t.Errorf("missing %v, want [2]", missing)
	}
	if lat := tr.backLatencies(at(25)); !slices.Equal(lat, []time.Duration{6 * time.Millisecond, 16 * time.Millisecond, -1}) {
		t.Errorf("back latencies %v, want device 2 not back", lat)
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

// TestPerChange checks the per-change figures and the two ratios to the
// floor of the same run (issue 31): the hub's CPU per device-change over
// the bare broker's per publish-and-echo, the hollow agents' over the
// bare clients'.
func TestPerChange(t *testing.T) {
	rs := []Result{
		{Name: phaseFloor, Agents: 1000, HubCPUMS: 200, AgentsCPUMS: 100},
		{Name: phaseConverge, Agents: 1000, HubCPUMS: 500, AgentsCPUMS: 450},
		{Name: phaseSingle, Agents: 1000, HubCPUMS: 40, AgentsCPUMS: 30},
		{Name: phaseStorm, Agents: 1000, HubCPUMS: 900, AgentsCPUMS: 800},
		{Name: phaseBytes, Agents: 10, HubCPUMS: 36, AgentsCPUMS: 72, Bytes: &BytesFigures{WindowS: 360}},
		{Name: phaseRollout, Agents: 200, HubCPUMS: 60, AgentsCPUMS: 80, Rollout: &RolloutFigures{MaxUpdated: 100}},
		{Name: phaseMemory, Agents: 1000},
	}
	perChange(rs, options{Changes: 100})
	floor, conv, single, storm, idle, roll, mem := rs[0], rs[1], rs[2], rs[3], rs[4], rs[5], rs[6]
	if roll.HubCPUPerChangeUS != 300 || roll.AgentCPUPerChangeUS != 400 || roll.HubVsBroker != 1.5 || roll.AgentVsClient != 4 {
		t.Errorf("rollout: hub %v µs, agents %v µs a change, %v× the broker, %v× the clients: want 300, 400, 1.5, 4 (100 devices there and back)", roll.HubCPUPerChangeUS, roll.AgentCPUPerChangeUS, roll.HubVsBroker, roll.AgentVsClient)
	}
	if mem.HubCPUPerChangeUS != 0 || mem.HubVsBroker != 0 {
		t.Errorf("hub-memory: %v µs a change, ratio %v: want none, it measures no CPU", mem.HubCPUPerChangeUS, mem.HubVsBroker)
	}
	if floor.BrokerCPUPerMessageUS != 200 || floor.ClientCPUPerMessageUS != 100 || floor.HubCPUPerChangeUS != 200 {
		t.Errorf("floor: broker %v µs, clients %v µs a message (hub field %v): want 200 and 100", floor.BrokerCPUPerMessageUS, floor.ClientCPUPerMessageUS, floor.HubCPUPerChangeUS)
	}
	if conv.HubCPUPerChangeUS != 500 || conv.AgentCPUPerChangeUS != 450 || conv.HubVsBroker != 2.5 || conv.AgentVsClient != 4.5 {
		t.Errorf("converge: hub %v µs, agents %v µs a change, %v× the broker, %v× the clients: want 500, 450, 2.5, 4.5", conv.HubCPUPerChangeUS, conv.AgentCPUPerChangeUS, conv.HubVsBroker, conv.AgentVsClient)
	}
	if single.HubCPUPerChangeUS != 400 || single.HubVsBroker != 2 || single.AgentVsClient != 3 {
		t.Errorf("single-change: hub %v µs a change, %v× the broker, %v× the clients: want 400, 2, 3 (100 changes)", single.HubCPUPerChangeUS, single.HubVsBroker, single.AgentVsClient)
	}
	if storm.HubCPUPerChangeUS != 900 || storm.HubVsBroker != 0 || storm.BrokerCPUPerMessageUS != 0 {
		t.Errorf("storm: hub %v µs a device, ratio %v, broker field %v: want 900 and no floor figures", storm.HubCPUPerChangeUS, storm.HubVsBroker, storm.BrokerCPUPerMessageUS)
	}
	if idle.HubCPUPerChangeUS != 36000 || idle.AgentCPUPerChangeUS != 72000 { // 10 devices × 0.1 h = 1 device-hour
		t.Errorf("bytes: hub %v µs, agents %v µs a device-hour: want 36,000 and 72,000", idle.HubCPUPerChangeUS, idle.AgentCPUPerChangeUS)
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

// TestRolloutMarkdown: a run's rollout figures get a table of their own,
// and a rollout-only run a block of its own beside the full run's.
func TestRolloutMarkdown(t *testing.T) {
	path := t.TempDir() + "/BENCHMARKS.md"
	m := machine{CPUs: 2, Model: "Test CPU", RAM: "1.0 GiB", Kernel: "6.0", GoVersion: "go1.26"}
	now := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	full := options{Agents: 200, Broker: "embedded", StatusInterval: time.Millisecond, Phases: allPhases}
	only := full
	only.Phases = []string{phaseRollout}
	r := Result{Name: phaseRollout, WallMS: 900, Target: "RolledBack by step 3", OK: true, Rollout: &RolloutFigures{
		Phase: "RolledBack", Steps: 4, StopStep: 3, DueStep: 3, Allowed: 100, FailDevices: 20, FailureLimit: 10,
		EverNew: 100, MaxUpdated: 100, FailedReported: 10, V1MS: 2000, FailureToRollbackMS: 1500, LimitToRollbackMS: 40, RollbackToOldMS: 300,
	}}
	for _, o := range []options{full, only, only} {
		if err := updateMarkdown(path, o, m, []Result{r}, now); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		"| staged rollout |", "| rollout, v2 RolledBack | 2000 ms | 20 (10) | 3 of 4 (3) | 100 | 100 | 100 | 10 | 1500 ms | 40.0 ms | 300 ms | met |",
		"#### 200 agents, embedded broker, instant starts, phases rollout", `"rollout":{"phase":"RolledBack"`,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("missing %q in:\n%s", want, doc)
		}
	}
	if n := strings.Count(doc, "#### 200 agents"); n != 2 {
		t.Errorf("%d run blocks, want the full run's and the rollout-only run's:\n%s", n, doc)
	}
	if k := runKey(options{Agents: 10, Broker: "embedded", Phases: []string{phaseFloor, phaseConverge, phaseMemory, phaseSingle, phaseStorm}}); strings.Contains(k, "phases") {
		t.Errorf("a run without the rollout phase changed its key: %s", k)
	}
	if k := runKey(options{Agents: 10, Broker: "embedded", Phases: []string{phaseFloor, phaseConverge, phaseMemory, phaseSingle, phaseStorm, phaseRollout}}); strings.Contains(k, "phases") {
		t.Errorf("make bench's run (every phase but bytes) has a partial key: %s", k)
	}
	// The bytes run of make bench must not replace the full run's block.
	if k := runKey(options{Agents: 10, Broker: "embedded", Phases: []string{phaseConverge, phaseBytes}}); !strings.Contains(k, "phases=converge,bytes") {
		t.Errorf("a converge+bytes run has the full run's key: %s", k)
	}
	var out strings.Builder
	if err := writeTable(&out, []Result{r}); err != nil || !strings.Contains(out.String(), "rollout: v2 RolledBack at step 3 of 4 (due 3)") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
}
