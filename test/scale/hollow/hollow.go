// Package hollow simulates many edge devices in one process, for the scale
// suite (test/scale). In ModeAgents every device runs the real edge agent
// (edgeagent.New: MQTT session, persisted state, reconciler, status
// reporter) over its own TCP connection with its own credentials; only the
// container runtime is replaced by runtime.Fake, optionally with a start
// latency. In ModeFloor every device is a bare paho client that answers
// each desired state with one status: the raw MQTT floor the agents are
// compared with.
//
// The simulator is driven over a line protocol (Serve): JSON commands on
// its input, JSON replies on its output, so that it runs in a process of its
// own, apart from the hub it is measured against.
package hollow

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/edgeagent"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/schema"
)

// Modes of a Simulator.
const (
	ModeAgents = "agents"
	ModeFloor  = "floor"
)

// Device is one simulated device's credentials.
type Device struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	// Broker, if set, is this device's MQTT URL instead of
	// Config.Broker (the suite's byte-counting proxy).
	Broker string `json:"broker,omitempty"`
}

// Config configures a Simulator. It is read from a file (it holds
// tokens): see LoadConfig.
type Config struct {
	// Mode is ModeAgents (default) or ModeFloor.
	Mode string `json:"mode"`
	// Broker is the MQTT URL every device connects to.
	Broker string `json:"broker"`
	// TopicPrefix is the Fleet topic prefix (default fleet/v1).
	TopicPrefix string   `json:"topicPrefix,omitempty"`
	Devices     []Device `json:"devices"`
	// StateRoot holds one state directory per agent (ModeAgents); a
	// tmpfs such as /dev/shm keeps the agents' fsyncs cheap.
	StateRoot string `json:"stateRoot,omitempty"`
	// StartLatency is the median time a container start takes in the fake
	// runtime (0: instant); StartSigma the log-normal shape (default 0.3).
	StartLatency time.Duration `json:"startLatency,omitempty"`
	StartSigma   float64       `json:"startSigma,omitempty"`
	// NoLatency names devices whose starts are instant whatever
	// StartLatency says (the suite's single-change probe).
	NoLatency []string `json:"noLatency,omitempty"`
	// StatusInterval is the agents' edgeagent.Options.StatusInterval (0:
	// the agent's default).
	StatusInterval time.Duration `json:"statusInterval,omitempty"`
	// KeepAlive and ResyncInterval are the agents' MQTT keepalive and
	// resync period (0: the agent's defaults, what devices run with).
	KeepAlive      time.Duration `json:"keepAlive,omitempty"`
	ResyncInterval time.Duration `json:"resyncInterval,omitempty"`
	// Heartbeat is the agents' status heartbeat (0: none, the default).
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	// ConnectRate is how many devices are started per second (0: all at
	// once). It spreads the first connections, not later reconnects.
	ConnectRate int `json:"connectRate,omitempty"`
	// ReconnectAtOnce takes the jitter out of the agents' reconnect
	// backoff (session.DefaultBackoff otherwise): after losing the broker
	// every agent retries at the same instants, the herd that jitter
	// exists to break up.
	ReconnectAtOnce bool `json:"reconnectAtOnce,omitempty"`
	// Seed feeds the agents' jitters and start latencies (agent i gets
	// Seed+i); 0 picks 1.
	Seed uint64 `json:"seed,omitempty"`
	// LogLevel of the agents' logs on stderr ("" or "off": none).
	LogLevel string `json:"logLevel,omitempty"`
	// FailImage is an image reference that cannot be pulled on the
	// devices named in FailDevices (ModeAgents): their fake runtime's
	// EnsureImage of it fails with runtime.ErrImage, as a registry
	// that refuses the pull would, so the real agent keeps what runs and
	// reports the new pod in ImagePullBackOff. Other devices pull it as
	// any image. Empty (the default): every image pulls.
	FailImage string `json:"failImage,omitempty"`
	// FailDevices names the devices FailImage fails on; each must be one
	// of Devices. Without FailImage it must be empty.
	FailDevices []string `json:"failDevices,omitempty"`
	// MemoryLimit, if positive, is the simulator process's memory limit
	// (its share of the whole simulator's, when that runs in several
	// processes); 0: sized from the number of devices.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
}

// ErrPullRefused is what EnsureImage of Config.FailImage fails with on
// the devices of Config.FailDevices (wrapped in runtime.ErrImage).
var ErrPullRefused = errors.New("hollow: pull refused (Config.FailImage)")

// ReconnectBackoff is the agents' edgeagent.Options.ReconnectBackoff:
// the zero Policy (the agent's default) or, with ReconnectAtOnce, the
// default less its jitter.
func (c Config) ReconnectBackoff() backoff.Policy {
	if !c.ReconnectAtOnce {
		return backoff.Policy{}
	}
	p := session.DefaultBackoff
	p.Jitter = 0
	return p
}

// LoadConfig reads a Config from a JSON file.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("hollow config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("hollow config %s: %w", path, err)
	}
	return c, nil
}

// WriteConfig writes c to path, mode 0600.
func WriteConfig(path string, c Config) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("hollow config: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("hollow config: %w", err)
	}
	return nil
}

func (c *Config) check() error {
	switch c.Mode {
	case "":
		c.Mode = ModeAgents
	case ModeAgents, ModeFloor, ModeLite:
	default:
		return fmt.Errorf("hollow: mode %q: want %q, %q or %q", c.Mode, ModeAgents, ModeLite, ModeFloor)
	}
	if c.Broker == "" {
		return errors.New("hollow: no broker URL")
	}
	if len(c.Devices) == 0 {
		return errors.New("hollow: no devices")
	}
	if c.Mode == ModeAgents && c.StateRoot == "" {
		return errors.New("hollow: no state root")
	}
	if c.Mode == ModeLite && c.FailImage != "" {
		return errors.New("hollow: failImage needs the real agents (mode agents): lite agents pull every image")
	}
	if len(c.FailDevices) > 0 && c.FailImage == "" {
		return errors.New("hollow: failDevices without failImage")
	}
	if len(c.FailDevices) > 0 {
		known := make(map[string]bool, len(c.Devices))
		for _, d := range c.Devices {
			known[d.Name] = true
		}
		for _, name := range c.FailDevices {
			if !known[name] {
				return fmt.Errorf("hollow: failDevices: %q is not one of the devices", name)
			}
		}
	}
	if c.StartSigma == 0 {
		c.StartSigma = 0.3
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return nil
}

// Stats is what the simulator reports.
type Stats struct {
	Devices   int `json:"devices"`
	Started   int `json:"started"`
	Connected int `json:"connected"`
	// Connects: sessions opened (lite agents; 0 from the others).
	Connects int64 `json:"connects,omitempty"`
	// Fake runtime calls, summed over the agents (ModeAgents).
	Starts  int `json:"starts"`
	Creates int `json:"creates"`
	Stops   int `json:"stops"`
	Removes int `json:"removes"`
	// Desired-state payloads the agents accepted, and duplicates/stale
	// ones they ignored.
	Accepted  int64 `json:"accepted"`
	Duplicate int64 `json:"duplicate"`
	Stale     int64 `json:"stale"`
	Invalid   int64 `json:"invalid"`
	// Floor: desired payloads received and statuses sent back.
	FloorReceived int64 `json:"floorReceived"`
	FloorEchoed   int64 `json:"floorEchoed"`
	FloorErrors   int64 `json:"floorErrors"`
	// The simulator process.
	Goroutines int   `json:"goroutines"`
	RSSBytes   int64 `json:"rssBytes"`
}

// device is one simulated device.
type device interface {
	run(ctx context.Context)
	connected() bool
	add(s *Stats)
	// lastStart is when a container last started (unix ns; 0: never).
	lastStart() int64
}

// Simulator runs the devices of a Config.
type Simulator struct {
	cfg    Config
	log    *slog.Logger
	topics schema.Topics

	failOn map[string]bool // Config.FailDevices

	mu      sync.Mutex
	devices []device
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	started chan struct{} // closed once every device has been started

	floorReceived, floorEchoed, floorErrors atomic.Int64
}

// New checks the config and returns a Simulator; Start runs it.
func New(cfg Config, log *slog.Logger) (*Simulator, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Simulator{
		cfg: cfg, log: log, topics: schema.Topics{Prefix: cfg.TopicPrefix},
		started: make(chan struct{}),
	}
	if len(cfg.FailDevices) > 0 {
		s.failOn = make(map[string]bool, len(cfg.FailDevices))
		for _, name := range cfg.FailDevices {
			s.failOn[name] = true
		}
	}
	return s, nil
}

// Start creates every device and starts them, at Config.ConnectRate per
// second, in the background. Stop ends them.
func (s *Simulator) Start(ctx context.Context) error {
	devs := make([]device, len(s.cfg.Devices))
	for i, d := range s.cfg.Devices {
		var err error
		switch s.cfg.Mode {
		case ModeFloor:
			devs[i] = s.newFloorClient(d)
		case ModeLite:
			devs[i], err = s.newLite(i, d)
		default:
			devs[i], err = s.newAgent(i, d)
		}
		if err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	s.wg.Go(func() {
		defer close(s.started)
		batch, every := len(devs), time.Duration(0)
		if r := s.cfg.ConnectRate; r > 0 {
			// Batches every 20 ms, so the rate is smooth at any size.
			batch, every = max(1, r/50), 20*time.Millisecond
		}
		tick := time.NewTicker(max(every, time.Millisecond))
		defer tick.Stop()
		for i := 0; i < len(devs); i += batch {
			end := min(len(devs), i+batch)
			s.mu.Lock()
			for _, d := range devs[i:end] {
				s.devices = append(s.devices, d)
				s.wg.Go(func() { d.run(ctx) })
			}
			s.mu.Unlock()
			if end == len(devs) || every == 0 {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return nil
}

// Started is closed once every device has been started.
func (s *Simulator) Started() <-chan struct{} { return s.started }

// Stop stops every device and waits for them.
func (s *Simulator) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Stats sums what the devices did.
func (s *Simulator) Stats() Stats {
	st := Stats{Devices: len(s.cfg.Devices)}
	s.mu.Lock()
	devs := s.devices
	s.mu.Unlock()
	st.Started = len(devs)
	for _, d := range devs {
		if d.connected() {
			st.Connected++
		}
		d.add(&st)
	}
	st.FloorReceived = s.floorReceived.Load()
	st.FloorEchoed = s.floorEchoed.Load()
	st.FloorErrors = s.floorErrors.Load()
	st.Goroutines = goruntime.NumGoroutine()
	st.RSSBytes = RSS(os.Getpid())
	return st
}

// LastStarts returns, per device in Config order, when a container last
// started (unix nanoseconds; 0: never or not yet started).
func (s *Simulator) LastStarts() []int64 {
	out := make([]int64, len(s.cfg.Devices))
	s.mu.Lock()
	devs := s.devices
	s.mu.Unlock()
	for i, d := range devs {
		out[i] = d.lastStart()
	}
	return out
}

// ---- agents -------------------------------------------------------------------

// nodeInfo is every hollow agent's node facts: a constant, so a status
// costs no /proc reads.
var nodeInfo = &schema.NodeInfo{
	Hostname: "hollow", MemoryTotalBytes: 1 << 30, MemoryAvailBytes: 512 << 20,
	DiskTotalBytes: 16 << 30, DiskFreeBytes: 8 << 30, UptimeSeconds: 3600,
}

type agent struct {
	a  *edgeagent.Agent
	rt *timedFake
}

// timedFake is the fake runtime, noting when a container last started.
type timedFake struct {
	*runtime.Fake
	lastStart atomic.Int64 // unix nanoseconds
}

// Start implements runtime.Runtime.
func (f *timedFake) Start(ctx context.Context, id string) error {
	err := f.Fake.Start(ctx, id)
	if err == nil {
		f.lastStart.Store(time.Now().UnixNano())
	}
	return err
}

func (s *Simulator) newAgent(i int, d Device) (*agent, error) {
	seed := s.cfg.Seed + uint64(i)
	var latency func() time.Duration
	if s.cfg.StartLatency > 0 && !slices.Contains(s.cfg.NoLatency, d.Name) {
		latency = runtime.LogNormalLatency(s.cfg.StartLatency, s.cfg.StartSigma, seed)
	}
	rt := &timedFake{Fake: runtime.NewFake(runtime.FakeOptions{StartLatency: latency})}
	if s.failOn[d.Name] {
		// The Fake's own image failure: EnsureImage wraps it in
		// runtime.ErrImage, as the containerd runtime does a failed pull.
		rt.SetImageError(s.cfg.FailImage, ErrPullRefused)
	}
	a, err := edgeagent.New(edgeagent.Options{
		Device:            d.Name,
		Broker:            cmp.Or(d.Broker, s.cfg.Broker),
		Token:             d.Token,
		Topics:            s.topics,
		StateDir:          filepath.Join(s.cfg.StateRoot, d.Name),
		Runtime:           rt,
		Logger:            s.log,
		Version:           "hollow",
		StatusInterval:    s.cfg.StatusInterval,
		KeepAlive:         s.cfg.KeepAlive,
		ResyncInterval:    s.cfg.ResyncInterval,
		HeartbeatInterval: s.cfg.Heartbeat,
		NodeInfo:          func() *schema.NodeInfo { return nodeInfo },
		Seed:              seed,

		ReconnectBackoff: s.cfg.ReconnectBackoff(),
		LogIndexInterval: -1, // the Fake writes no logs
		// A load simulation against its own hub: the hollow agents pin
		// the key of the first signed state, as agents did before they
		// required a pinned key (issue 39).
		InsecureTrustFirstKey: true,
	})
	if err != nil {
		return nil, fmt.Errorf("hollow agent %s: %w", d.Name, err)
	}
	return &agent{a: a, rt: rt}, nil
}

func (a *agent) run(ctx context.Context) { _ = a.a.Run(ctx) }

func (a *agent) connected() bool { return a.a.Connected() }

func (a *agent) lastStart() int64 { return a.rt.lastStart.Load() }

func (a *agent) add(s *Stats) {
	c := a.rt.Calls()
	s.Starts += c.Start
	s.Creates += c.Create
	s.Stops += c.Stop
	s.Removes += c.Remove
	st := a.a.Stats()
	s.Accepted += st.Accepted
	s.Duplicate += st.Duplicate
	s.Stale += st.Stale
	s.Invalid += st.Invalid
}

// ---- floor clients ------------------------------------------------------------

// floorClient is a bare paho client: it subscribes to its desired topic and
// answers every non-empty desired state with a status echoing its
// generation, of the size an agent's status has.
type floorClient struct {
	s      *Simulator
	dev    Device
	up     atomic.Bool
	status schema.DeviceStatus
}

func (s *Simulator) newFloorClient(d Device) *floorClient {
	now := time.Now().UTC()
	return &floorClient{s: s, dev: d, status: FloorStatus(d.Name, now)}
}

// FloorStatus is the status a floor client sends: the shape and size of a
// hollow agent's status with one running pod.
func FloorStatus(device string, now time.Time) schema.DeviceStatus {
	return schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   device, Time: now,
		Agent: schema.AgentInfo{Version: "hollow", OS: goruntime.GOOS, Arch: goruntime.GOARCH},
		Node:  nodeInfo,
		Pods: []schema.PodStatus{{
			Name: "scale", Hash: strings.Repeat("0", 16), Phase: schema.PhaseRunning, Ready: true,
			Containers: []schema.ContainerStatus{{
				Name: "app", Image: "registry.example.com/fleet/scale-app:1", State: schema.ContainerRunning, StartedAt: &now,
			}},
		}},
	}
}

func (f *floorClient) connected() bool  { return f.up.Load() }
func (f *floorClient) add(*Stats)       {}
func (f *floorClient) lastStart() int64 { return 0 }

func (f *floorClient) run(ctx context.Context) {
	desired := f.s.topics.Device(f.dev.Name, schema.TopicDesired)
	statusTopic := f.s.topics.Device(f.dev.Name, schema.TopicStatus)
	var mu sync.Mutex // one echo at a time, so generations go out in order
	handler := func(c mqtt.Client, m mqtt.Message) {
		if len(m.Payload()) == 0 {
			return
		}
		f.s.floorReceived.Add(1)
		var ds struct {
			Generation int64 `json:"generation"`
		}
		if err := json.Unmarshal(m.Payload(), &ds); err != nil {
			f.s.floorErrors.Add(1)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		st := f.status
		st.ObservedGeneration = ds.Generation
		st.Time = time.Now().UTC()
		b, err := json.Marshal(st)
		if err != nil {
			f.s.floorErrors.Add(1)
			return
		}
		// Fire and forget: the publisher counts the echoes it receives.
		c.Publish(statusTopic, 1, true, b)
		f.s.floorEchoed.Add(1)
	}
	opts := mqtt.NewClientOptions().
		AddBroker(f.s.cfg.Broker).
		SetClientID(f.dev.Name).
		SetUsername(f.dev.Name).
		SetPassword(f.dev.Token).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetOrderMatters(false).
		SetAutoReconnect(false).
		SetKeepAlive(60 * time.Second).
		SetConnectTimeout(30 * time.Second).
		SetConnectRetry(false).
		SetOnConnectHandler(func(c mqtt.Client) {
			t := c.Subscribe(desired, 1, handler)
			go func() {
				<-t.Done()
				if t.Error() != nil {
					f.s.floorErrors.Add(1)
					return
				}
				f.up.Store(true)
			}()
		}).
		SetConnectionLostHandler(func(mqtt.Client, error) {
			f.up.Store(false)
			f.s.floorErrors.Add(1)
		})
	c := mqtt.NewClient(opts)
	// A few attempts: a burst of connects can overflow the accept queue.
	for attempt := 0; ; attempt++ {
		t := c.Connect()
		select {
		case <-t.Done():
		case <-ctx.Done():
			<-t.Done()
			c.Disconnect(0)
			return
		}
		if t.Error() == nil {
			break
		}
		f.s.log.Warn("floor client connect failed", "device", f.dev.Name, "err", t.Error(), "attempt", attempt)
		if attempt >= 5 {
			f.s.floorErrors.Add(1)
			return
		}
		retry := time.NewTimer(time.Duration(attempt+1) * 200 * time.Millisecond)
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-retry.C:
		}
	}
	<-ctx.Done()
	f.up.Store(false)
	c.Disconnect(100)
}

// ---- the control protocol -----------------------------------------------------

// Command is one line of the simulator's input.
type Command struct {
	// Op is "stats", "starts" (when each device last started a
	// container), "free" (collect garbage and return it to the system:
	// the simulator collects only at its memory limit), "stop",
	// "cpu-start" (File: where to write a CPU profile of the simulator)
	// or "cpu-stop".
	Op   string `json:"op"`
	File string `json:"file,omitempty"`
}

// Reply is one line of the simulator's output.
type Reply struct {
	// Op is "ready" (every device started), "stats", "starts",
	// "stopped" or "error".
	Op    string `json:"op"`
	Stats *Stats `json:"stats,omitempty"`
	// Starts answers "starts": Simulator.LastStarts.
	Starts []int64 `json:"starts,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// Serve runs a simulator for cfg until in says "stop", in ends or ctx is
// done: it starts every device, replies "ready" once all are started, and
// answers each command with one line on out.
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer, log *slog.Logger) error {
	s, err := New(cfg, log)
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(r Reply) error {
		outMu.Lock()
		defer outMu.Unlock()
		return enc.Encode(r)
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Stop()
	go func() {
		select {
		case <-s.Started():
			_ = send(Reply{Op: "ready"})
		case <-ctx.Done():
		}
	}()
	cmds := make(chan Command)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			var c Command
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				_ = send(Reply{Op: "error", Error: "bad command: " + err.Error()})
				continue
			}
			select {
			case cmds <- c:
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			return err // input closed: the driver went away
		case c := <-cmds:
			switch c.Op {
			case "stats":
				st := s.Stats()
				if err := send(Reply{Op: "stats", Stats: &st}); err != nil {
					return err
				}
			case "starts":
				if err := send(Reply{Op: "starts", Starts: s.LastStarts()}); err != nil {
					return err
				}
			case "free":
				debug.FreeOSMemory()
				if err := send(Reply{Op: "free"}); err != nil {
					return err
				}
			case "cpu-start", "cpu-stop":
				r := Reply{Op: c.Op}
				if err := profile(c); err != nil {
					r = Reply{Op: "error", Error: err.Error()}
				}
				if err := send(r); err != nil {
					return err
				}
			case "stop":
				s.Stop()
				st := s.Stats()
				return send(Reply{Op: "stopped", Stats: &st})
			default:
				if err := send(Reply{Op: "error", Error: fmt.Sprintf("unknown op %q", c.Op)}); err != nil {
					return err
				}
			}
		}
	}
}

var profileFile *os.File

// profile starts or stops a CPU profile of the simulator process.
func profile(c Command) error {
	if c.Op == "cpu-stop" {
		if profileFile == nil {
			return errors.New("no profile is running")
		}
		pprof.StopCPUProfile()
		err := profileFile.Close()
		profileFile = nil
		return err
	}
	if profileFile != nil {
		return errors.New("a profile is running")
	}
	f, err := os.Create(c.File)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	profileFile = f
	return nil
}

// RSS is a process's VmRSS in bytes, or -1.
func RSS(pid int) int64 { return procStatusBytes(pid, "VmRSS:") }

// PeakRSS is a process's VmHWM (the highest its RSS has been) in bytes,
// or -1.
func PeakRSS(pid int) int64 { return procStatusBytes(pid, "VmHWM:") }

// RSSFile is the file-backed part of a process's RSS (RssFile: mapped
// files, such as the binary and Badger's memory-mapped tables) in bytes,
// or -1.
func RSSFile(pid int) int64 { return procStatusBytes(pid, "RssFile:") }

func procStatusBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb); err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
