package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// Targets (2-core machine). They apply from the size given.
const (
	targetConvergeP99Small = 250 * time.Millisecond // 1,000 agents
	targetConvergeP99Large = 1500 * time.Millisecond
	targetRatio            = 1.5 // 10,000 agents
	// Issue 45's: storm at 10,000 ≤ 4 s, hub memory per device at
	// 10,000 ≤ 32 KiB, single change p99 ≤ 5 ms.
	targetStormWall = 4 * time.Second
	targetHubBytes  = 32 << 10
	targetSingleP99 = 5 * time.Millisecond
	// hubConfirmTimeout bounds how long after a single change the hub may
	// take to report the device converged.
	hubConfirmTimeout = 2 * time.Second
	// defaultMemorySettle: how long after convergence B6 reads the hub's
	// RSS: a little over two memory checks of the hub (it trims at the
	// first check that follows one without a collection).
	defaultMemorySettle = 2*hub.DefaultMemoryTrimInterval + 3*time.Second
	// Below smallFleet agents the hub's surplus after a converge is far
	// below what it gives back (hub.trimMinSurplus, 64 MiB: about 1,000
	// devices' worth), so there is no trim to wait for and the default
	// settle is smallFleetMemorySettle: a 100-agent run takes seconds,
	// not half a minute.
	smallFleet             = 500
	smallFleetMemorySettle = 3 * time.Second
)

// floor is B1: see floor.go. With Mosquitto it starts the Mosquitto the
// hub will use, with the floor's accounts, and clears what the floor left
// retained before the hub starts.
func (s *suite) floor(ctx context.Context) Result {
	r := s.result(phaseFloor)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	ctx, cancel := context.WithTimeout(ctx, s.deadline(60*time.Second, 8*time.Millisecond))
	defer cancel()

	devices, err := floorDevices(s.names)
	if err != nil {
		return fail(err)
	}
	cfg := floorConfig{
		Devices: devices, TopicPrefix: s.topics.Prefix, Inflight: s.o.FloorInflight,
		// Generation 2: what the converge phase's apply gives each device.
		Desired: desiredFor(s.convergeDep, 2),
	}
	if err := s.floorBroker(ctx, &cfg); err != nil {
		return fail(err)
	}
	fl, url, err := s.startFloor(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = fl.stop(10 * time.Second) }()
	clients, err := s.startHollow(ctx, "floor-clients", hollow.Config{
		Mode: hollow.ModeFloor, Broker: url, Devices: devices, ConnectRate: s.o.ConnectRate,
	})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = clients.stop(10 * time.Second) }()
	if err := s.awaitConnected(ctx, clients); err != nil {
		return fail(fmt.Errorf("floor clients: %w", err))
	}
	res, err := s.measureFloor(ctx, fl, clients, &r)
	if err != nil {
		return fail(err)
	}
	r.fill(res.Lat)
	s.dump(phaseFloor, res.Lat)
	r.WallMS = ms(res.Wall)
	if res.Error == "" {
		s.floorWall = res.Wall
	}
	if err := clients.stop(10 * time.Second); err != nil {
		s.log.Warn("stop floor clients", "err", err)
	}
	if cfg.Mode == "external" {
		if err := s.clearFloor(ctx, fl); err != nil {
			return fail(err)
		}
	}
	if res.Error != "" {
		return fail(fmt.Errorf("%s", res.Error))
	}
	return r
}

// floorDevices returns the floor clients' accounts: one per device name,
// each with a new token.
func floorDevices(names []string) ([]hollow.Device, error) {
	devices := make([]hollow.Device, len(names))
	for i, name := range names {
		tok, err := newSecret()
		if err != nil {
			return nil, err
		}
		devices[i] = hollow.Device{Name: name, Token: tok}
	}
	return devices, nil
}

// floorBroker sets cfg's broker: with Mosquitto, the Mosquitto the hub
// will use, started here with the floor's accounts (s.mosq); else the
// floor's own embedded broker.
func (s *suite) floorBroker(ctx context.Context, cfg *floorConfig) error {
	if s.o.Broker != "mosquitto" {
		cfg.Mode, cfg.Addr = "embedded", "127.0.0.1:0"
		return nil
	}
	pw, err := newSecret()
	if err != nil {
		return err
	}
	floorHub := broker.MosquittoAccount{Identity: broker.Identity{Name: floorHubUsername, Role: broker.RoleHub}, Password: pw}
	m, err := startMosquitto(ctx, filepath.Join(s.dir, "mosquitto"), s.topics, s.o.MosquittoExtra, s.mosquittoAccounts(cfg.Devices, floorHub))
	if err != nil {
		return err
	}
	s.mosq = m
	cfg.Mode, cfg.Broker, cfg.Username, cfg.Password = "external", m.URL, floorHubUsername, pw
	return nil
}

// startFloor starts the floor process with cfg and returns it once ready,
// with the URL of the broker the floor clients connect to.
func (s *suite) startFloor(ctx context.Context, cfg floorConfig) (*child, string, error) {
	path := filepath.Join(s.dir, "floor.json")
	if err := writeJSONFile(path, cfg); err != nil {
		return nil, "", err
	}
	fl, err := startChild("floor", filepath.Join(s.dir, "floor.log"), "floor", "-config", path)
	if err != nil {
		return nil, "", err
	}
	var ready struct {
		Addr string `json:"addr"`
	}
	if err := fl.await(ctx, "ready", &ready); err != nil {
		_ = fl.stop(10 * time.Second)
		return nil, "", err
	}
	url := cfg.Broker
	if cfg.Mode == "embedded" {
		url = "tcp://" + ready.Addr
	}
	return fl, url, nil
}

// measureFloor runs the floor once, within what is left of ctx, and
// records in r the CPU it cost: the broker side's (the floor process, or
// Mosquitto) as the hub's, the clients' as the agents'.
func (s *suite) measureFloor(ctx context.Context, fl *child, clients *hollowGroup, r *Result) (floorResult, error) {
	left := time.Until(deadlineOf(ctx)) - 5*time.Second
	var res floorResult
	brokerPID := fl.cmd.Process.Pid
	if s.mosq != nil {
		brokerPID = s.mosq.cmd.Process.Pid
	}
	cpu := cpuStartOf(brokerPID, clients)
	if err := fl.call(ctx, floorRun{Op: "run", Timeout: max(left, time.Second)}, "result", &res); err != nil {
		return res, err
	}
	cpu.stopOf(r, brokerPID, clients)
	return res, nil
}

// cpuStartOf is cpuStart with the processes hubPID and agentsPID in the
// hub's and the agents' places.
func cpuStartOf(hubPID int, agents *hollowGroup) cpuMeter {
	return cpuMeter{hub: cpuTime(hubPID), agents: agents.cpu(), self: cpuTime(os.Getpid()), host: readHostCPU()}
}

// stopOf is cpuStop for the processes of cpuStartOf.
func (m cpuMeter) stopOf(r *Result, hubPID int, agents *hollowGroup) {
	if c := cpuTime(hubPID); c >= 0 && m.hub >= 0 {
		r.HubCPUMS = ms(c - m.hub)
	}
	if c := agents.cpu(); c >= 0 && m.agents >= 0 {
		r.AgentsCPUMS = ms(c - m.agents)
	}
	if c := cpuTime(os.Getpid()); c >= 0 && m.self >= 0 {
		r.SuiteCPUMS = ms(c - m.self)
	}
	r.StealPct = stealPercent(m.host, readHostCPU())
}

// clearFloor has the floor clear what it left retained on the hub's
// Mosquitto, whatever the run gave: none of it may reach the hub or its
// agents. On failure the suite is marked unclean.
func (s *suite) clearFloor(ctx context.Context, fl *child) error {
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.deadline(30*time.Second, time.Millisecond))
	defer ccancel()
	if err := fl.call(cctx, floorRun{Op: "clear"}, "cleared", nil); err != nil {
		s.floorUnclean = true
		return fmt.Errorf("clear the floor's retained messages: %w", err)
	}
	return nil
}

// converge is B2: apply a Deployment targeting every device; per device,
// the time from the hub's answer to the first status that shows the pod
// ready at its new hash; wall = the last of them. The hub's API must then
// report every device converged (HubConfirmMS).
func (s *suite) converge(ctx context.Context) Result {
	r := s.result(phaseConverge)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	ctx, cancel := context.WithTimeout(ctx, s.deadline(60*time.Second, 5*time.Millisecond))
	defer cancel()
	before, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	hash := podHash(s.convergeDep)
	body, err := manifest(s.convergeDep)
	if err != nil {
		return fail(err)
	}
	s.profileStart(ctx, phaseConverge)
	counters, _ := s.hub.counters(ctx)
	cpu := s.cpuStart()
	wireBefore := s.wireSnapshot()
	w := s.mon.start(-1, false, func(st *statusLite) bool { return st.ready(convergeDeployment, hash) })
	sent := time.Now()
	if _, err := s.hub.Client.Apply(ctx, body, false); err != nil {
		s.profileStop(ctx)
		return fail(fmt.Errorf("apply: %w", err))
	}
	ack := time.Now()
	r.ApplyMS = ms(ack.Sub(sent))
	s.mon.setOrigin(w, ack)
	lat, _, werr := s.mon.wait(ctx, w)
	// The CPU of the convergence, not of the API lists that confirm it.
	s.cpuStop(cpu, &r, false)
	s.countersStop(ctx, counters, &r)
	s.wireChangeDone(ctx, wireBefore)
	r.fill(lat)
	s.dump(phaseConverge, lat)
	r.WallMS = r.MaxMS
	if werr != nil {
		s.profileStop(ctx)
		return fail(fmt.Errorf("%d of %d devices converged: %w", r.Samples, len(lat), werr))
	}
	// The hub's ingest sees each report when the monitor does; its API
	// must agree soon after (lists of N devices take their time).
	confirmWithin := s.hubConfirmSlack()
	cctx, ccancel := context.WithTimeout(ctx, confirmWithin)
	at, _, err := s.awaitHub(cctx, func(d *schema.Device) bool { return d.Status != nil && d.Status.Converged })
	ccancel()
	s.profileStop(ctx)
	if err != nil {
		return fail(fmt.Errorf("the hub did not report every device converged within %v of the last converged status: %w", confirmWithin, err))
	}
	r.HubConfirmMS = ms(at.Sub(ack))
	if s.floorWall > 0 {
		r.Ratio = math.Round(r.WallMS/ms(s.floorWall)*100) / 100
	}
	after, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	r.RedundantRestarts = after.Starts - before.Starts - len(s.names)
	starts, err := s.agents.starts(ctx)
	if err != nil {
		return fail(err)
	}
	started := make([]time.Duration, len(starts))
	for i, ns := range starts {
		started[i] = -1
		if ns > 0 {
			started[i] = max(time.Unix(0, ns).Sub(ack), 0)
		}
	}
	var sr Result
	sr.fill(started)
	r.StartedP50MS, r.StartedP99MS = sr.P50MS, sr.P99MS
	r.Target, r.OK = convergeTarget(s.o.Agents, r)
	return r
}

func convergeTarget(n int, r Result) (string, bool) {
	switch {
	case n >= 10000:
		ok := r.P99MS <= ms(targetConvergeP99Large) && r.Lost == 0
		t := fmt.Sprintf("p99 ≤ %v", targetConvergeP99Large)
		if r.Ratio > 0 {
			t += fmt.Sprintf(", ratio ≤ %.1f", targetRatio)
			ok = ok && r.Ratio <= targetRatio
		}
		return t, ok
	case n >= 1000:
		return fmt.Sprintf("p99 ≤ %v", targetConvergeP99Small), r.P99MS <= ms(targetConvergeP99Small) && r.Lost == 0
	}
	return "", false
}

// memory is B6: the hub's RSS with every device converged and idle, less
// the empty hub's, per device. The hub gives back the heap a burst left
// free at its next memory check (hub.DefaultMemoryTrimInterval), so the
// RSS is read once that has had time to happen (-memory-settle); the RSS
// right after convergence and the peak are reported beside it.
func (s *suite) memory(ctx context.Context) Result {
	r := s.result(phaseMemory)
	pid := s.hub.pid()
	r.HubRSSConvergedBytes = rss(pid)
	settle := time.NewTimer(s.o.MemorySettle)
	select {
	case <-ctx.Done():
		settle.Stop()
		r.Error = ctx.Err().Error()
		return r
	case <-settle.C:
	}
	now := rss(pid)
	if now < 0 || s.rssEmpty < 0 {
		r.Error = "cannot read the hub's /proc/PID/status"
		return r
	}
	r.HubRSSBytes, r.HubRSSEmptyBytes, r.HubRSSFileBytes = now, s.rssEmpty, hollow.RSSFile(pid)
	// VmHWM and VmRSS come from separate reads of counters the kernel
	// updates lazily: the peak is at least every RSS read.
	r.HubRSSPeakBytes = max(hollow.PeakRSS(pid), now, r.HubRSSConvergedBytes)
	r.HubBytesPerDevice = float64(now-s.rssEmpty) / float64(s.o.Agents)
	if len(s.brokers()) > 0 {
		r.BrokerRSSBytes = s.brokersRSS()
		if s.bridged != nil {
			r.CoreRSSBytes = rss(s.mosq.cmd.Process.Pid)
		}
	}
	// The simulator's live memory: it collects garbage only at its
	// memory limit.
	if err := s.agents.callAll(ctx, hollow.Command{Op: "free"}, "free"); err != nil {
		s.log.Warn("hollow agents: free memory", "err", err)
	} else if st, err := hollowStats(ctx, s.agents); err == nil && st.RSSBytes > 0 {
		r.AgentBytesPerDevice = float64(st.RSSBytes) / float64(s.o.Agents)
	}
	s.profileHeap(ctx, phaseMemory)
	if s.o.Agents >= 10000 {
		r.Target = fmt.Sprintf("≤ %d KiB/device", targetHubBytes>>10)
		r.OK = r.HubBytesPerDevice <= targetHubBytes
	}
	return r
}

// singleChange is B7: with every agent idle, change the deployment pinned
// to the first device, Changes times; each time, from the hub's answer to
// that device's status showing the new pod ready. The first device starts
// containers instantly whatever -runtime-latency says: this phase measures
// the control path, not a container start.
func (s *suite) singleChange(ctx context.Context) Result {
	r := s.result(phaseSingle)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	if s.o.Changes == 0 {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, s.deadline(30*time.Second+time.Duration(s.o.Changes)*300*time.Millisecond, 0))
	defer cancel()
	before, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	lat := make([]time.Duration, 0, s.o.Changes)
	var confirm []time.Duration
	var applyTotal time.Duration
	var lastBad string
	misses := 0
	s.profileStart(ctx, phaseSingle)
	defer s.profileStop(ctx)
	counters, _ := s.hub.counters(ctx)
	cpu := s.cpuStart()
	began := time.Now()
	for i := range s.o.Changes {
		dep := deployment(probeDeployment, map[string]string{schema.LabelDevice: s.names[0]},
			schema.EnvVar{Name: "CHANGE", Value: strconv.Itoa(i)})
		hash := podHash(dep)
		body, err := manifest(dep)
		if err != nil {
			return fail(err)
		}
		w := s.mon.start(0, false, func(st *statusLite) bool { return st.ready(probeDeployment, hash) })
		sent := time.Now()
		_, err = s.hub.Client.Apply(ctx, body, false)
		if err != nil {
			return fail(fmt.Errorf("change %d: apply: %w", i, err))
		}
		ack := time.Now()
		applyTotal += ack.Sub(sent)
		s.mon.setOrigin(w, ack)
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second*time.Duration(s.o.DeadlineScale))
		l, _, err := s.mon.wait(wctx, w)
		wcancel()
		if err != nil {
			r.fill(lat)
			return fail(fmt.Errorf("change %d: %s did not report it: %w", i, s.names[0], err))
		}
		lat = append(lat, l[0])
		// Then the hub must say so: its ingest may see the report a moment
		// after the monitor (with Mosquitto they are other connections).
		c, bad := s.awaitDeviceConverged(ctx, s.names[0], ack, hubConfirmTimeout)
		if bad != "" {
			lastBad = fmt.Sprintf("change %d: %s", i, bad)
			c = -1
			misses++
		}
		confirm = append(confirm, c)
		if misses == 3 {
			break // enough evidence; do not spend the deadline on it
		}
	}
	s.cpuStop(cpu, &r, false)
	s.countersStop(ctx, counters, &r)
	r.fill(lat)
	r.WallMS = ms(time.Since(began))
	s.dump(phaseSingle, lat)
	var hub Result
	hub.fill(confirm)
	r.HubConfirmMS = hub.P99MS
	r.ApplyMS = ms(applyTotal / time.Duration(len(lat)))
	if hub.Lost > 0 {
		r.Lost = hub.Lost
		return fail(fmt.Errorf("%d of %d changes: the hub did not report %s converged within %v of the status (last: %s)", hub.Lost, len(confirm), s.names[0], hubConfirmTimeout, lastBad))
	}
	after, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	r.RedundantRestarts = after.Starts - before.Starts - s.o.Changes
	r.Target = fmt.Sprintf("p99 ≤ %v", targetSingleP99)
	r.OK = r.P99MS <= ms(targetSingleP99)
	return r
}

// hubConfirmSlack is how long after the monitor saw every device the
// hub's API may take to agree: its ingest saw the same reports, but a list
// of N devices takes time.
func (s *suite) hubConfirmSlack() time.Duration {
	return time.Duration(float64(5*time.Second+time.Duration(s.o.Agents)*time.Millisecond) * s.o.DeadlineScale)
}

// countersStop records the hub's counters since before.
func (s *suite) countersStop(ctx context.Context, before map[string]float64, r *Result) {
	after, err := s.hub.counters(ctx)
	if err != nil {
		s.log.Warn("hub counters", "err", err)
		return
	}
	r.HubCounters = counterDelta(before, after)
}

// awaitDeviceConverged polls the hub until it reports the device
// converged; it returns the time from origin, or why not.
func (s *suite) awaitDeviceConverged(ctx context.Context, name string, origin time.Time, timeout time.Duration) (time.Duration, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var dev *schema.Device
	var at time.Time
	err := poll(ctx, 2*time.Millisecond, func() (bool, error) {
		d, err := s.hub.Client.GetDevice(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, err
		}
		dev, at = d, time.Now()
		return d.Status != nil && d.Status.Converged, nil
	})
	if err == nil {
		return at.Sub(origin), ""
	}
	if dev != nil {
		return -1, fmt.Sprintf("%v (%s)", err, describeDevice(dev))
	}
	return -1, err.Error()
}

// storm is B4: stop the hub (and Mosquitto, which the agents are connected
// to in that mode) under N converged agents and start it again on the same
// data; per device, the time from the stop to the first status the agent
// published after the restart showing its pod ready (the status's own time
// stamp: the monitor reconnects too); lost = devices that never did; and
// every container start the storm caused.
func (s *suite) storm(ctx context.Context) Result {
	r := s.result(phaseStorm)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	ctx, cancel := context.WithTimeout(ctx, s.deadline(90*time.Second, 5*time.Millisecond))
	defer cancel()
	before, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	hash := podHash(s.convergeDep)
	cpu := s.cpuStart()
	var restartNS atomic.Int64 // when the new hub (and broker) started; 0 before
	w := s.mon.start(-1, true, func(st *statusLite) bool {
		at := restartNS.Load()
		return at != 0 && st.Time.UnixNano() > at && st.ready(convergeDeployment, hash)
	})
	// The agents' profile covers the whole storm: losing the hub costs
	// them as much as finding it again.
	s.agentsProfile(ctx, phaseStorm)
	if s.o.Profile != "" {
		// The old hub's stop, until it exits: part of the restart.
		path, _ := filepath.Abs(filepath.Join(s.o.Profile, phaseStorm+"-stop.cpu.pprof"))
		if err := s.pprofPost(ctx, "/scale/cpu/start?file="+path); err != nil {
			s.log.Warn("start cpu profile of the stop", "err", err)
		}
	}
	stop := time.Now()
	s.mon.setOrigin(w, stop)
	if err := s.hub.stop(s.o.StormSignal, 30*time.Second); err != nil {
		return fail(err)
	}
	s.stopBrokers(s.o.StormSignal)
	restart := time.Now()
	restartNS.Store(restart.UnixNano())
	r.StopMS = ms(restart.Sub(stop))
	if err := s.startBrokers(ctx); err != nil {
		return fail(fmt.Errorf("restart mosquitto: %w", err))
	}
	if s.o.Profile != "" {
		// Profiled from its first instruction: the restart is the storm.
		s.hub.spec.CPUProfile, _ = filepath.Abs(filepath.Join(s.o.Profile, phaseStorm+".cpu.pprof"))
	}
	err = s.hub.start(ctx, s.deadline(60*time.Second, time.Millisecond))
	s.hub.spec.CPUProfile = ""
	if err != nil {
		return fail(fmt.Errorf("restart hub: %w", err))
	}
	r.RestartMS = ms(time.Since(stop))
	r.Reconnect = "jittered"
	if s.o.ReconnectAtOnce {
		r.Reconnect = "at-once"
	}
	defer s.profileStop(ctx)
	lat, _, werr := s.mon.wait(ctx, w)
	s.cpuStop(cpu, &r, true)
	s.countersStop(ctx, nil, &r) // a new process: its counters start at 0
	r.fill(lat)
	s.dump(phaseStorm, lat)
	r.WallMS = r.MaxMS
	if werr != nil {
		return fail(fmt.Errorf("%d of %d devices reported again: %w", r.Samples, len(lat), werr))
	}
	at, _, err := s.awaitHub(ctx, func(d *schema.Device) bool {
		return d.Status != nil && d.Status.Online && d.Status.Converged && d.Status.LastSeen != nil && d.Status.LastSeen.After(restart)
	})
	if err != nil {
		return fail(fmt.Errorf("hub confirmation: %w", err))
	}
	r.HubConfirmMS = ms(at.Sub(stop))
	after, err := hollowStats(ctx, s.agents)
	if err != nil {
		return fail(err)
	}
	r.RedundantRestarts = after.Starts - before.Starts
	if s.o.Agents >= 10000 {
		r.Target = fmt.Sprintf("wall ≤ %v, lost 0, redundant 0", targetStormWall)
	} else {
		r.Target = "lost 0, redundant 0"
	}
	r.OK = r.Lost == 0 && r.RedundantRestarts == 0 && (s.o.Agents < 10000 || r.WallMS <= ms(targetStormWall))
	return r
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}
