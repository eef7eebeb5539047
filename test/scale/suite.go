package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// Phase names (Result.Name).
const (
	phaseFloor    = "floor"
	phaseConverge = "converge"
	phaseMemory   = "hub-memory"
	phaseSingle   = "single-change"
	phaseStorm    = "storm"
	phaseRollout  = "rollout"
	phaseBytes    = "bytes"
)

// allPhases are the phases in the order they run. The rollout phase comes
// last: it leaves a second pod on every device, which would change what
// the others measure.
var allPhases = []string{phaseFloor, phaseConverge, phaseMemory, phaseSingle, phaseBytes, phaseUplink, phaseStorm, phaseRollout}

// options are the suite's flags.
type options struct {
	Agents         int
	Broker         string
	RuntimeLatency time.Duration
	LatencySigma   float64
	StatusInterval time.Duration
	Changes        int
	MemorySettle   time.Duration
	// IdleWindow, BytesSample and AgentKeepAlive: the bytes phase.
	IdleWindow     time.Duration
	BytesSample    int
	AgentKeepAlive time.Duration
	AgentHeartbeat time.Duration
	Phases         []string
	JSON           bool
	// JSONFile: also write the -json lines into this file (make bench
	// keeps every run's figures for its headline: summary.go).
	JSONFile    string
	Markdown    string
	WorkDir     string
	StateRoot   string
	HubBin      string
	Profile     string
	ConnectRate int
	// ReconnectAtOnce takes the jitter out of the agents' reconnect
	// backoff (B4 with every agent retrying at the same instants).
	ReconnectAtOnce bool
	FloorInflight   int
	DeadlineScale   float64
	StormSignal     syscall.Signal
	HubLogLevel     string
	HubEnv          []string
	MosquittoExtra  []string
	AgentLogLevel   string
	DumpDir         string
	FromJSON        string
	Keep            bool
	Verbose         bool
	// Topology is "single" (every device on the hub's broker) or
	// "bridged" (Sites Mosquitto site brokers, each bridged to the core
	// Mosquitto the hub uses: bridged.go).
	Topology string
	Sites    int
	// AgentKind is "full" (the real edge agent) or "lite" (hollow/lite.go).
	AgentKind string
	// AgentsPerProcess: most devices one simulator process runs.
	AgentsPerProcess int
	// UplinkQuickAck: the bridges reach the core through uplink relays
	// (uplink.go).
	UplinkQuickAck bool
	// UplinkDown: how long the uplink phase keeps every uplink cut.
	UplinkDown time.Duration
	// FloodWindow: how long the flood phase floods (flood.go).
	FloodWindow time.Duration
	// Store is "badger" (the hub's default) or "etcd" (a 3-member etcd
	// cluster on loopback, started by the suite: store.go).
	Store string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.Agents, "agents", 1000, "number of hollow agents (devices)")
	fs.StringVar(&o.Broker, "broker", "embedded", "embedded (the hub's broker) or mosquitto (fleet-hub --broker)")
	fs.Func("runtime-latency", "the fake runtime's container start latency, log-normal around a median: a duration such as 65ms (0: instant), "+
		"lognormal ("+defaultLogNormalMedian.String()+", the containerd median measured here) or lognormal:DURATION (default 0)", func(v string) error {
		d, err := parseRuntimeLatency(v)
		o.RuntimeLatency = d
		return err
	})
	fs.Float64Var(&o.LatencySigma, "latency-sigma", 0.3, "shape of the log-normal start latency")
	fs.DurationVar(&o.StatusInterval, "status-interval", time.Millisecond,
		"the agents' StatusInterval (least time between two status publishes); the agent's default, 1s, holds every converged status back up to 1s")
	fs.IntVar(&o.Changes, "changes", 1000, "single-change phase: how many changes")
	fs.DurationVar(&o.MemorySettle, "memory-settle", defaultMemorySettle, fmt.Sprintf("hub-memory phase: how long after convergence the hub's RSS is read (the hub gives back the heap a burst left behind once it is quiet; default %v below %d agents, where there is nothing to give back)", smallFleetMemorySettle, smallFleet))
	fs.DurationVar(&o.IdleWindow, "idle-window", 10*time.Minute, "bytes phase: how long the converged fleet idles while the byte counter watches (the per-day figure is extrapolated from it; keep it several keepalives long)")
	fs.IntVar(&o.BytesSample, "bytes-sample", 100, "bytes phase: how many agents connect through the byte-counting proxy (the single-change probe is never one of them)")
	fs.DurationVar(&o.AgentHeartbeat, "agent-heartbeat", 0, "the hollow agents' --status-heartbeat (0: none, the agent's default; 30s is what agents did before issue 31)")
	fs.DurationVar(&o.AgentKeepAlive, "agent-keepalive", 0, "the hollow agents' MQTT keepalive (0: the agent's default, session.DefaultKeepAlive)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to report, comma-separated (converge always runs: the others need it); restore (opt-in, last) restores the hub from an online backup under the converged fleet; flood (opt-in, embedded broker, after single-change) has one extra device publish at 10× its limit beside the single-change probe")
	fs.DurationVar(&o.FloodWindow, "flood-window", 15*time.Second, "flood phase: how long the extra device floods (the broker should cut it off after burst / (rate − limit), 3.3 s with the default limit, and again after each reconnect)")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object per phase")
	fs.StringVar(&o.JSONFile, "json-file", "", "also write the JSON objects (as -json prints them) into this file, whatever is printed; make bench keeps each run's in dist/bench for its headline table (go run ./test/scale summary)")
	fs.StringVar(&o.Markdown, "markdown", "", "also write the results into this file's \"## Scale suite\" section (BENCHMARKS.md)")
	fs.StringVar(&o.WorkDir, "workdir", os.TempDir(), "where the run's directory (hub data, logs) is created")
	fs.StringVar(&o.StateRoot, "state-root", defaultStateRoot(), "where the agents' state directories go (tmpfs keeps their fsyncs cheap)")
	fs.StringVar(&o.HubBin, "hub-bin", "", "fleet-hub binary (default: go build ./cmd/fleet-hub)")
	fs.StringVar(&o.Profile, "profile", "", "run the hub in-process with pprof and write into this directory CPU profiles of each phase (hub, simulator, suite), the hub's allocations over each phase (NAME.allocs-start.pprof, NAME.allocs.pprof: go tool pprof -base) and a heap profile")
	fs.IntVar(&o.ConnectRate, "connect-rate", 2500, "agents started per second when they first connect (0: all at once)")
	fs.BoolVar(&o.ReconnectAtOnce, "reconnect-at-once", false, "storm: the agents reconnect without the jitter of their backoff, every one at the same instants (default: as agents do, jittered)")
	fs.IntVar(&o.FloorInflight, "floor-inflight", 1000, "floor: most desired states awaiting the broker at once")
	fs.Float64Var(&o.DeadlineScale, "deadline-scale", 1, "multiply every phase deadline")
	fs.Func("hub-env", "KEY=VALUE for the hub's environment only (repeatable), e.g. GOGC=50", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q: want KEY=VALUE", v)
		}
		o.HubEnv = append(o.HubEnv, v)
		return nil
	})
	sig := fs.String("storm-signal", "TERM", "how the storm stops the hub: TERM or KILL")
	fs.StringVar(&o.HubLogLevel, "hub-log-level", "warn", "fleet-hub --log-level")
	fs.StringVar(&o.AgentLogLevel, "agent-log-level", "off", "log level of the hollow agents (their log is agents.log in the run's directory)")
	fs.StringVar(&o.FromJSON, "from-json", "", "run nothing: print (and with -markdown, record) the results saved by an earlier -json run; give the same -agents, -broker, -runtime-latency and -mosquitto-option flags as that run")
	fs.StringVar(&o.DumpDir, "dump", "", "write each phase's per-device latencies (ms, -1 = never) into this directory")
	fs.BoolVar(&o.Keep, "keep", false, "keep the run's directory")
	fs.BoolVar(&o.Verbose, "v", false, "log progress to stderr")
	topologyFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	settleSet, brokerSet, phasesSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		settleSet = settleSet || f.Name == "memory-settle"
		brokerSet = brokerSet || f.Name == "broker"
		phasesSet = phasesSet || f.Name == "phases"
	})
	if err := checkTopology(&o, brokerSet, phasesSet, phases); err != nil {
		return o, err
	}
	if !settleSet && o.Agents < smallFleet {
		o.MemorySettle = smallFleetMemorySettle
	}
	switch {
	case o.Agents < 1:
		return o, errors.New("-agents must be at least 1")
	case o.Broker != "embedded" && o.Broker != "mosquitto":
		return o, fmt.Errorf("-broker %q: want embedded or mosquitto", o.Broker)
	case o.RuntimeLatency < 0 || o.StatusInterval < 0 || o.Changes < 0 || o.DeadlineScale <= 0 || o.MemorySettle < 0:
		return o, errors.New("-runtime-latency, -status-interval, -changes, -memory-settle and -deadline-scale must not be negative")
	case o.IdleWindow <= 0 || o.BytesSample < 1 || o.AgentKeepAlive < 0:
		return o, errors.New("-idle-window and -bytes-sample must be positive, -agent-keepalive not negative")
	case o.Store != "badger" && o.Store != "etcd":
		return o, fmt.Errorf("-store %q: want badger or etcd", o.Store)
	case o.Store == "etcd" && o.Profile != "":
		return o, errors.New("-store etcd runs the fleet-hub binary: it does not combine with -profile (the in-process hub)")
	}
	switch strings.ToUpper(*sig) {
	case "TERM", "SIGTERM":
		o.StormSignal = syscall.SIGTERM
	case "KILL", "SIGKILL":
		o.StormSignal = syscall.SIGKILL
	default:
		return o, fmt.Errorf("-storm-signal %q: want TERM or KILL", *sig)
	}
	return o, parsePhases(&o, *phases)
}

// parsePhases fills o.Phases from -phases' comma-separated list.
func parsePhases(o *options, list string) error {
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(allPhases, p) && p != phaseRestore && p != phaseFlood {
			return fmt.Errorf("-phases: unknown phase %q (have %s)", p, strings.Join(allPhases, ", "))
		}
		o.Phases = append(o.Phases, p)
	}
	if slices.Contains(o.Phases, phaseFlood) && (o.Broker != "embedded" || o.FloodWindow <= 0) {
		return errors.New("-phases flood: the publish limit is the embedded broker's (Mosquitto has none), and -flood-window must be positive")
	}
	return nil
}

// defaultLogNormalMedian is the containerd create+start median measured
// on the project's machine (BENCHMARKS.md), the hollow runtime's
// "lognormal" start latency.
const defaultLogNormalMedian = 65 * time.Millisecond

// parseRuntimeLatency reads -runtime-latency: a duration, "lognormal" or
// "lognormal:DURATION".
func parseRuntimeLatency(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if rest, ok := strings.CutPrefix(strings.ToLower(v), "lognormal"); ok {
		if rest == "" {
			return defaultLogNormalMedian, nil
		}
		if v, ok = strings.CutPrefix(rest, ":"); !ok {
			return 0, fmt.Errorf("%q: want a duration, lognormal or lognormal:DURATION", "lognormal"+rest)
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration (e.g. 65ms, 0), lognormal or lognormal:DURATION", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: must not be negative", v)
	}
	return d, nil
}

func defaultStateRoot() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// runSuite runs the suite for one size and broker and prints the results.
func runSuite(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseOptions(args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	load := loadAverage()
	var results []Result
	var runErr error
	if o.FromJSON != "" {
		load = ""
		if results, err = readResults(o); err != nil {
			return err
		}
	} else {
		results, runErr = runOnce(ctx, o, log)
		perChange(results, o)
		warnSteal(log, results)
	}
	if o.JSON {
		err = writeJSON(stdout, results)
	} else {
		err = writeTable(stdout, results)
	}
	if o.JSONFile != "" && o.FromJSON == "" {
		err = errors.Join(err, writeJSONLines(o.JSONFile, results))
	}
	if err == nil && o.Markdown != "" && len(results) > 0 {
		m := describeMachine()
		m.Load = load
		err = updateMarkdown(o.Markdown, o, m, results, time.Now())
	}
	return errors.Join(runErr, err)
}

// readResults reads a -json run's output and checks it is the run the
// flags describe.
func readResults(o options) ([]Result, error) {
	b, err := os.ReadFile(o.FromJSON)
	if err != nil {
		return nil, err
	}
	var rs []Result
	for line := range strings.Lines(string(b)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := Result{StealPct: -1} // older runs did not measure it
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", o.FromJSON, err)
		}
		want := Result{Agents: o.Agents, Broker: o.Broker, StatusInterval: o.StatusInterval.String()}
		if r.Agents != want.Agents || r.Broker != want.Broker || r.StatusInterval != want.StatusInterval {
			return nil, fmt.Errorf("%s: %s ran with %d agents, %s broker, status interval %s: give the same flags",
				o.FromJSON, r.Name, r.Agents, r.Broker, r.StatusInterval)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// suite is one run.
type suite struct {
	o      options
	log    *slog.Logger
	dir    string // the run's directory
	state  string // the agents' state root
	topics schema.Topics
	names  []string

	hubPassword string
	hubPwFile   string
	hubSpec     hubSpec
	hub         *hubProc
	etcd        *etcdtest.Cluster // -store etcd
	rssEmpty    int64
	mosq        *mosquittoProc
	bridged     *bridged // -topology bridged: the site brokers
	devices     []hollow.Device
	failing     []int // indexes of the devices that cannot pull rolloutBadImage
	monitorTok  string
	agents      *hollowGroup
	mon         *monitor

	convergeDep  *schema.Deployment
	floorWall    time.Duration
	floorUnclean bool // the floor could not clear what it left retained
	// wire counts the bytes of a sample of the agents (bytes phase);
	// wireChange is what it counted over the converge phase.
	wire       *wireProxy
	wireSample int
	wireChange *wireCount
	results    []Result
	selfProf   *os.File // this process's CPU profile, while one runs
	profPhase  string   // the phase being profiled
}

// runOnce sets up, runs the phases and tears down. It returns the results
// of the phases that ran, and the first failure.
func runOnce(ctx context.Context, o options, log *slog.Logger) (results []Result, err error) {
	s := &suite{o: o, log: log, topics: schema.Topics{}, names: deviceNames(o.Agents)}
	if s.dir, err = os.MkdirTemp(o.WorkDir, "fleet-scale-"); err != nil {
		return nil, err
	}
	if s.state, err = os.MkdirTemp(o.StateRoot, "fleet-scale-agents-"); err != nil {
		return nil, err
	}
	defer func() {
		s.teardown()
		if err == nil && !o.Keep {
			os.RemoveAll(s.dir)
		} else {
			fmt.Fprintf(os.Stderr, "scale: logs and data kept in %s\n", s.dir)
		}
		os.RemoveAll(s.state)
	}()
	checkHostLimits(o.Agents, log)
	s.convergeDep = deployment(convergeDeployment, map[string]string{scaleLabel: scaleLabelValue},
		schema.EnvVar{Name: "RUN", Value: filepath.Base(s.dir)})
	if err := s.setupHubSpec(ctx); err != nil {
		return nil, err
	}
	var failed []error
	if s.want(phaseFloor) {
		r := s.floor(ctx)
		r.settle()
		s.results = append(s.results, r)
		if r.Error != "" {
			// The hub's phases still say something (without a ratio),
			// unless the floor left its broker unusable.
			failed = append(failed, fmt.Errorf("floor: %s", r.Error))
			if s.floorUnclean || ctx.Err() != nil {
				return s.results, errors.Join(failed...)
			}
		}
	}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"start the hub", s.startServer},
		{"register devices", s.register},
		{"start the agents", s.startAgents},
	}
	for _, st := range steps {
		s.log.Info(st.name)
		if err := st.f(ctx); err != nil {
			return s.results, errors.Join(append(failed, fmt.Errorf("%s: %w", st.name, err))...)
		}
	}
	phases := []struct {
		name string
		f    func(context.Context) Result
	}{
		{phaseConverge, s.converge},
		{phaseMemory, s.memory},
		{phaseSingle, s.singleChange},
		{phaseFlood, s.flood}, // opt-in (flood.go)
		{phaseBytes, s.bytes},
		{phaseUplink, s.uplink},
		{phaseStorm, s.storm},
		{phaseRollout, s.rollout},
		{phaseRestore, s.restore}, // opt-in (restore.go)
	}
	for _, p := range phases {
		if p.name != phaseConverge && !s.want(p.name) {
			continue
		}
		if ctx.Err() != nil {
			return s.results, errors.Join(append(failed, ctx.Err())...)
		}
		s.log.Info("phase", "name", p.name)
		r := p.f(ctx)
		r.settle()
		if p.name != phaseConverge || s.want(p.name) {
			s.results = append(s.results, r)
		}
		if r.Error == "" {
			continue
		}
		failed = append(failed, fmt.Errorf("%s: %s", p.name, r.Error))
		if p.name == phaseConverge && (r.Lost > 0 || r.Samples == 0) || p.name == phaseStorm {
			// The agents are not all converged: later phases would
			// measure nothing meaningful.
			break
		}
	}
	return s.results, errors.Join(failed...)
}

func (s *suite) want(phase string) bool { return slices.Contains(s.o.Phases, phase) }

// deadline scales a phase's time budget: base plus per device.
func (s *suite) deadline(base, perDevice time.Duration) time.Duration {
	return time.Duration(float64(base+perDevice*time.Duration(s.o.Agents)) * s.o.DeadlineScale)
}

func (s *suite) result(name string) Result {
	lat := "0"
	if s.o.RuntimeLatency > 0 {
		lat = s.o.RuntimeLatency.String()
	}
	return Result{Name: name, Agents: s.o.Agents, Broker: s.o.Broker, Topology: s.topologyName(), AgentKind: s.agentKindName(),
		RuntimeLatency: lat, StatusInterval: s.o.StatusInterval.String(), StealPct: -1, LoadAvg: loadAverage()}
}

func (s *suite) teardown() {
	if s.mon != nil {
		s.mon.close()
	}
	if s.agents != nil {
		if err := s.agents.stop(30 * time.Second); err != nil {
			s.log.Warn("stop hollow agents", "err", err)
		}
	}
	if s.wire != nil {
		s.wire.close()
	}
	if s.hub != nil {
		if err := s.hub.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			s.log.Warn("stop hub", "err", err)
		}
	}
	s.stopBrokers(syscall.SIGTERM)
	s.closeUplinks()
	if s.etcd != nil {
		s.etcd.Close()
	}
}

// checkHostLimits warns about host limits too low for n agents: open files
// and the listen backlog.
func checkHostLimits(n int, log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(n)+1024 {
		log.Warn("the open-file limit is low for this many agents: the hub and the simulator each hold one socket per agent",
			"limit", lim.Cur, "agents", n)
	}
	if backlog, err := broker.ListenBacklog(); err == nil && backlog < n {
		log.Warn("net.core.somaxconn is shorter than the fleet: in the storm, agents that do not fit in the embedded broker's listen queue wait for TCP retransmissions (sysctl -w net.core.somaxconn=16384)",
			"somaxconn", backlog, "agents", n)
	}
}

// ---- setup ----------------------------------------------------------------------

// setupHubSpec builds fleet-hub (unless given or profiling) and picks the
// hub's ports, kept across restarts.
func (s *suite) setupHubSpec(ctx context.Context) error {
	spec := hubSpec{
		Bin: s.o.HubBin, DataDir: filepath.Join(s.dir, "hub"), LogLevel: s.o.HubLogLevel, Env: s.o.HubEnv,
		LogPath: filepath.Join(s.dir, "hub.log"),
	}
	var err error
	if spec.HTTPAddr, err = freeAddr(); err != nil {
		return err
	}
	if s.o.Profile != "" {
		spec.Bin = ""
		if err := os.MkdirAll(s.o.Profile, 0o755); err != nil {
			return err
		}
		if spec.PprofAddr, err = freeAddr(); err != nil {
			return err
		}
	} else if spec.Bin == "" {
		if spec.Bin, err = buildHub(ctx, s.dir); err != nil {
			return err
		}
	}
	if s.o.Broker == "mosquitto" {
		if s.hubPassword, err = newSecret(); err != nil {
			return err
		}
		s.hubPwFile = filepath.Join(s.dir, "hub-mqtt-password")
		if err := os.WriteFile(s.hubPwFile, []byte(s.hubPassword+"\n"), 0o600); err != nil {
			return err
		}
		spec.PasswordFile = s.hubPwFile
	} else if spec.MQTTAddr, err = freeAddr(); err != nil {
		return err
	}
	if spec.StoreArgs, err = s.startStore(); err != nil {
		return err
	}
	s.hubSpec = spec
	return nil
}

// buildHub builds ./cmd/fleet-hub of the module this runs in.
func buildHub(ctx context.Context, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fleet-hub")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/fleet-hub")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fleet-hub: %w\n%s", err, b)
	}
	return out, nil
}

// repoRoot is the directory of go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from the repository or give -hub-bin")
		}
		dir = parent
	}
}

// mosquittoAccounts are the Mosquitto accounts: the hub's, the monitor's
// (once issued) and every device's.
func (s *suite) mosquittoAccounts(devices []hollow.Device, extra ...broker.MosquittoAccount) []broker.MosquittoAccount {
	accts := []broker.MosquittoAccount{{Identity: broker.Identity{Name: hubUsername, Role: broker.RoleHub}, Password: s.hubPassword}}
	if s.monitorTok != "" {
		accts = append(accts, broker.MosquittoAccount{Identity: broker.Identity{Name: monitorName, Role: broker.RoleMonitor}, Password: s.monitorTok})
	}
	for _, d := range devices {
		accts = append(accts, broker.MosquittoAccount{Identity: broker.Identity{Name: d.Name, Role: broker.RoleDevice}, Password: d.Token})
	}
	return append(accts, extra...)
}

// startServer starts Mosquitto (if not yet running) and the hub, and
// measures the empty hub's memory.
func (s *suite) startServer(ctx context.Context) error {
	if s.o.Topology == topologyBridged && s.mosq == nil {
		if err := s.startBridged(ctx); err != nil {
			return err
		}
	}
	if s.o.Broker == "mosquitto" {
		if s.mosq == nil {
			m, err := startMosquitto(ctx, filepath.Join(s.dir, "mosquitto"), s.topics, s.o.MosquittoExtra, s.mosquittoAccounts(nil))
			if err != nil {
				return err
			}
			s.mosq = m
		}
		s.hubSpec.Broker = s.mosq.URL
	}
	h, err := startHub(ctx, s.hubSpec, s.deadline(30*time.Second, 0))
	if err != nil {
		return err
	}
	s.hub = h
	s.rssEmpty = rss(h.pid())
	return nil
}

// brokerURL is where devices connect.
func (s *suite) brokerURL() string {
	if s.mosq != nil {
		return s.mosq.URL
	}
	return "tcp://" + s.hubSpec.MQTTAddr
}

// register creates the devices, issues their tokens and the monitor's
// credential (and gives Mosquitto the accounts).
func (s *suite) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.deadline(60*time.Second, 20*time.Millisecond))
	defer cancel()
	api := s.hub.Client
	// The devices and their tokens in calls of 10,000 (POST
	// /v1/devices:batch, transactions of 500): one POST per device's
	// token, two fsynced writes each, took 8 minutes for 100,000.
	s.devices = make([]hollow.Device, 0, len(s.names))
	start := time.Now()
	for from := 0; from < len(s.names); from += schema.MaxDeviceBatch {
		names := s.names[from:min(len(s.names), from+schema.MaxDeviceBatch)]
		items := make([]schema.DeviceBatchItem, len(names))
		for i, n := range names {
			items[i] = schema.DeviceBatchItem{Name: n, Labels: map[string]string{scaleLabel: scaleLabelValue}}
		}
		res, err := api.RegisterDevices(ctx, items)
		if err != nil {
			return fmt.Errorf("register devices %s…: %w", names[0], err)
		}
		for _, it := range res.Items {
			s.devices = append(s.devices, hollow.Device{Name: it.Name, Token: it.Token})
		}
	}
	s.log.Info("devices registered", "devices", len(s.devices), "took", time.Since(start).Round(time.Millisecond))
	cred, err := api.CreateCredential(ctx, monitorName, schema.RoleMonitor)
	if err != nil {
		return fmt.Errorf("create monitor credential: %w", err)
	}
	s.monitorTok = cred.Token
	if s.bridged != nil {
		return s.setBridgedAccounts(ctx)
	}
	if s.mosq != nil {
		if err := s.mosq.setAccounts(ctx, s.mosquittoAccounts(s.devices)); err != nil {
			return err
		}
	}
	return nil
}

// startAgents starts the hollow agents, waits until every device is
// connected and converged on its empty first desired state, and connects
// the status monitor.
func (s *suite) startAgents(ctx context.Context) error {
	cfg := hollow.Config{
		Mode: hollow.ModeAgents, Broker: s.brokerURL(), Devices: s.devices, StateRoot: s.state,
		StartLatency: s.o.RuntimeLatency, StartSigma: s.o.LatencySigma, StatusInterval: s.o.StatusInterval,
		ConnectRate: s.o.ConnectRate, NoLatency: []string{s.names[0]}, Seed: 1, LogLevel: s.o.AgentLogLevel,
		ReconnectAtOnce: s.o.ReconnectAtOnce, KeepAlive: s.o.AgentKeepAlive,
		Heartbeat: s.o.AgentHeartbeat,
	}
	if s.o.AgentKind == agentLite {
		cfg.Mode, cfg.StateRoot = hollow.ModeLite, ""
	}
	if s.bridged != nil {
		cfg.Devices = s.siteDevices(s.devices)
	}
	if s.want(phaseBytes) {
		if err := s.startWire(&cfg); err != nil {
			return err
		}
	}
	if s.want(phaseRollout) {
		s.failing = rolloutFailing(len(s.names))
		cfg.FailImage = rolloutBadImage
		for _, i := range s.failing {
			cfg.FailDevices = append(cfg.FailDevices, s.names[i])
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.deadline(60*time.Second, 5*time.Millisecond))
	defer cancel()
	c, err := s.startHollow(ctx, "agents", cfg)
	if err != nil {
		return err
	}
	s.agents = c
	if err := s.awaitConnected(ctx, c); err != nil {
		return err
	}
	if _, _, err := s.awaitHub(ctx, func(d *schema.Device) bool {
		return d.Status != nil && d.Status.Online && d.Status.Converged
	}); err != nil {
		return fmt.Errorf("devices online and idle: %w", err)
	}
	m, err := dialMonitor(ctx, s.brokerURL(), monitorName, s.monitorTok, s.topics, s.names)
	if err != nil {
		return err
	}
	s.mon = m
	return nil
}

func hollowStats(ctx context.Context, g *hollowGroup) (hollow.Stats, error) { return g.stats(ctx) }

// awaitConnected polls the simulator until every device is connected.
func (s *suite) awaitConnected(ctx context.Context, c *hollowGroup) error {
	var last hollow.Stats
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		st, err := hollowStats(ctx, c)
		last = st
		return err == nil && st.Connected == st.Devices, err
	})
	if err != nil {
		return fmt.Errorf("%d of %d devices connected: %w", last.Connected, last.Devices, err)
	}
	return nil
}

// awaitHub lists the devices until ok holds for all of them, and returns
// when it first did. On failure it says how many did not and names one.
func (s *suite) awaitHub(ctx context.Context, ok func(*schema.Device) bool) (time.Time, int, error) {
	every := s.pollEvery()
	var bad int
	var example string
	var at time.Time
	err := poll(ctx, every, func() (bool, error) {
		list, err := s.hub.Client.ListDevices(ctx, scaleLabel+"="+scaleLabelValue)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("list devices: %w", err)
		}
		at = time.Now()
		bad, example = len(s.names)-len(list.Items), ""
		for i := range list.Items {
			d := &list.Items[i]
			if !ok(d) {
				bad++
				if example == "" {
					example = describeDevice(d)
				}
			}
		}
		return bad == 0, nil
	})
	if err != nil {
		return at, bad, fmt.Errorf("%d of %d devices not there (e.g. %s): %w", bad, len(s.names), example, err)
	}
	return at, 0, nil
}

// pollEvery is how often the device list is polled: lists cost the hub
// in proportion to N.
func (s *suite) pollEvery() time.Duration {
	return min(20*time.Millisecond+time.Duration(s.o.Agents)*20*time.Microsecond, time.Second)
}

func describeDevice(d *schema.Device) string {
	if d.Status == nil {
		return d.Metadata.Name + " without status"
	}
	st := d.Status
	return fmt.Sprintf("%s online=%v converged=%v desired=%d observed=%d stale=%v",
		d.Metadata.Name, st.Online, st.Converged, st.DesiredGeneration, st.ObservedGeneration, st.Stale)
}

// parallel runs f(i) for i < n on workers goroutines, stopping at the
// first error.
func parallel(ctx context.Context, workers, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// dump writes one phase's latencies, one line per device ("name ms").
func (s *suite) dump(phase string, lat []time.Duration) {
	if s.o.DumpDir == "" {
		return
	}
	var b strings.Builder
	for i, l := range lat {
		name := s.names[0]
		if len(lat) == len(s.names) {
			name = s.names[i]
		}
		v := -1.0
		if l >= 0 {
			v = ms(l)
		}
		fmt.Fprintf(&b, "%s %.3f\n", name, v)
	}
	err := os.MkdirAll(s.o.DumpDir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(s.o.DumpDir, phase+".txt"), []byte(b.String()), 0o644)
	}
	if err != nil {
		// -dump is for looking at a run afterwards: say so, but keep
		// measuring.
		fmt.Fprintf(os.Stderr, "scale: -dump %s: %v\n", phase, err)
	}
}

// ---- profiling --------------------------------------------------------------------

// profileStart begins a CPU profile of the hub (with -profile).
func (s *suite) profileStart(ctx context.Context, name string) {
	if s.o.Profile == "" {
		return
	}
	path, _ := filepath.Abs(filepath.Join(s.o.Profile, name+".cpu.pprof"))
	if err := s.pprofPost(ctx, "/scale/cpu/start?file="+path); err != nil {
		s.log.Warn("start cpu profile", "err", err)
	}
	// The hub's allocations over the phase: go tool pprof
	// -base NAME.allocs-start.pprof NAME.allocs.pprof.
	s.profPhase = name
	s.profileAllocs(ctx, name+".allocs-start.pprof")
	s.agentsProfile(ctx, name)
}

// profileAllocs saves the hub's allocation profile (cumulative since it
// started) into file.
func (s *suite) profileAllocs(ctx context.Context, file string) {
	if err := s.pprofGet(ctx, "/debug/pprof/allocs", filepath.Join(s.o.Profile, file)); err != nil {
		s.log.Warn("allocation profile", "err", err)
	}
}

// agentsProfile starts (name != "") or stops a CPU profile of the hollow
// agents, and one of this process (the monitor).
func (s *suite) agentsProfile(ctx context.Context, name string) {
	if s.agents == nil || s.o.Profile == "" {
		return
	}
	s.selfProfile(name)
	if err := s.agents.profile(ctx, s.o.Profile, name); err != nil {
		s.log.Warn("hollow agents' cpu profile", "err", err)
	}
}

// selfProfile starts (name != "") or stops a CPU profile of this process.
func (s *suite) selfProfile(name string) {
	if s.selfProf != nil {
		pprof.StopCPUProfile()
		if err := s.selfProf.Close(); err != nil {
			s.log.Warn("suite cpu profile", "err", err)
		}
		s.selfProf = nil
	}
	if name == "" {
		return
	}
	f, err := os.Create(filepath.Join(s.o.Profile, name+".suite.cpu.pprof"))
	if err != nil {
		s.log.Warn("suite cpu profile", "err", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		s.log.Warn("suite cpu profile", "err", err)
		_ = f.Close()
		return
	}
	s.selfProf = f
}

func (s *suite) profileStop(ctx context.Context) {
	if s.o.Profile == "" {
		return
	}
	if err := s.pprofPost(ctx, "/scale/cpu/stop"); err != nil {
		s.log.Warn("stop cpu profile", "err", err)
	}
	if s.profPhase != "" {
		s.profileAllocs(ctx, s.profPhase+".allocs.pprof")
		s.profPhase = ""
	}
	s.agentsProfile(ctx, "")
}

// profileHeap saves the hub's heap profile, and its runtime.MemStats
// (debug=1 text) beside it.
func (s *suite) profileHeap(ctx context.Context, name string) {
	if s.o.Profile == "" {
		return
	}
	for _, f := range []struct{ path, file string }{
		{"/debug/pprof/heap?gc=1", name + ".heap.pprof"},
		{"/debug/pprof/heap?debug=1", name + ".heap.txt"},
		// Goroutine stacks are a third of the hub's RSS at 10,000.
		{"/debug/pprof/goroutine?debug=1", name + ".goroutine.txt"},
	} {
		if err := s.pprofGet(ctx, f.path, filepath.Join(s.o.Profile, f.file)); err != nil {
			s.log.Warn("heap profile", "err", err)
		}
	}
}

func (s *suite) pprofGet(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.hubSpec.PprofAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

func (s *suite) pprofPost(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.hubSpec.PprofAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s %s", path, resp.Status, b)
	}
	return nil
}
