package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmq/fleet/broker"
)

// Result is one phase's figures: one JSON object per line with -json.
// Fields that do not apply to a phase are zero.
type Result struct {
	Name   string `json:"name"`
	Agents int    `json:"agents"`
	Broker string `json:"broker"`
	// Topology (-topology bridged): "bridged, K sites"; empty: every
	// device on the hub's broker. AgentKind: "lite" for lite agents
	// (hollow/lite.go); empty: the real edge agent.
	Topology       string `json:"topology,omitempty"`
	AgentKind      string `json:"agent_kind,omitempty"`
	RuntimeLatency string `json:"runtime_latency"`
	StatusInterval string `json:"status_interval"`
	// Samples is how many latencies the percentiles are over.
	Samples int `json:"samples"`
	// WallMS: floor, converge and storm: until the last device reported;
	// single-change: the whole series of changes, one after the other;
	// rollout: from v2's apply until every device reported v1 ready
	// again (p50, p99 and max: from the rollback, of the devices that
	// ran v2).
	WallMS float64 `json:"wall_ms"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	// Ratio: converge wall / floor wall.
	Ratio float64 `json:"ratio"`
	// Lost: devices that never reported what the phase waits for.
	Lost int `json:"lost"`
	// RedundantRestarts: container starts beyond those the phase needs
	// (converge: N, single-change: one per change, storm: none).
	RedundantRestarts int `json:"redundant_restarts"`
	// HubBytesPerDevice (hub-memory): (RSS with N converged and idle −
	// RSS of the empty hub) / N. HubRSSBytes is read -memory-settle after
	// convergence; HubRSSConvergedBytes right after it; HubRSSPeakBytes
	// is the hub's VmHWM at the end of the phase.
	HubBytesPerDevice    float64 `json:"hub_bytes_per_device"`
	HubRSSBytes          int64   `json:"hub_rss_bytes,omitempty"`
	HubRSSEmptyBytes     int64   `json:"hub_rss_empty_bytes,omitempty"`
	HubRSSConvergedBytes int64   `json:"hub_rss_converged_bytes,omitempty"`
	HubRSSPeakBytes      int64   `json:"hub_rss_peak_bytes,omitempty"`
	// HubRSSFileBytes: the file-backed part of HubRSSBytes (the binary,
	// Badger's memory-mapped files), which the kernel can reclaim.
	HubRSSFileBytes int64 `json:"hub_rss_file_bytes,omitempty"`
	// AgentBytesPerDevice (hub-memory): the simulator's RSS / N, what one
	// hollow agent costs when N share a process.
	AgentBytesPerDevice float64 `json:"agent_bytes_per_device,omitempty"`
	// HubConfirmMS: when the hub's API (GET /v1/devices) first reported
	// all devices converged, from the same origin as WallMS (polled once
	// the monitor saw them all; single-change: the p99 over the changes).
	HubConfirmMS float64 `json:"hub_confirm_ms,omitempty"`
	// StartedP50MS, StartedP99MS (converge): from the same origin to the
	// agent's container start — the hub-to-agent half of the latency.
	StartedP50MS float64 `json:"started_p50_ms,omitempty"`
	StartedP99MS float64 `json:"started_p99_ms,omitempty"`
	// RestartMS (storm): from the stop until the new hub answered its API
	// (its broker then accepts devices).
	RestartMS float64 `json:"restart_ms,omitempty"`
	// StopMS (storm): the part of RestartMS the old hub (and Mosquitto)
	// took to stop; the rest is the new hub's start, load and republish.
	StopMS float64 `json:"stop_ms,omitempty"`
	// Reconnect (storm): how the agents came back, "jittered" (their
	// default backoff) or "at-once" (-reconnect-jitter=false).
	Reconnect string `json:"reconnect,omitempty"`
	// HubCPUMS and AgentsCPUMS: CPU time the hub and the simulator used
	// during the phase (storm: the restarted hub's since its start).
	HubCPUMS float64 `json:"hub_cpu_ms,omitempty"`
	// BrokerCPUMS: CPU time every Mosquitto (the core and the sites)
	// used during the phase (storm: since their restart).
	BrokerCPUMS float64 `json:"broker_cpu_ms,omitempty"`
	// CoreCPUMS (-topology bridged): the core Mosquitto's part of it.
	CoreCPUMS float64 `json:"core_cpu_ms,omitempty"`
	// BrokerRSSBytes (hub-memory): every Mosquitto's RSS, summed, with
	// the fleet converged and idle.
	BrokerRSSBytes int64 `json:"broker_rss_bytes,omitempty"`
	// CoreRSSBytes (-topology bridged): the core Mosquitto's part of it.
	CoreRSSBytes int64   `json:"core_rss_bytes,omitempty"`
	AgentsCPUMS  float64 `json:"agents_cpu_ms,omitempty"`
	// HubCPUPerChangeUS and AgentCPUPerChangeUS: HubCPUMS and AgentsCPUMS
	// per device-change, in µs (converge and storm: one per device;
	// single-change: one per change; rollout: two per device given v2,
	// there and back; bytes: per device per idle hour).
	// On the floor line they are the bare broker's and the bare clients'
	// CPU per publish-and-echo. HubVsBroker: the hub's per change over
	// the floor broker's per message, same run (issue 31: ≤ 2).
	HubCPUPerChangeUS   float64 `json:"hub_cpu_per_change_us,omitempty"`
	AgentCPUPerChangeUS float64 `json:"agent_cpu_per_change_us,omitempty"`
	HubVsBroker         float64 `json:"hub_vs_broker,omitempty"`
	// BrokerCPUPerMessageUS and ClientCPUPerMessageUS (floor only): the
	// same two figures under the names they have there, the bare
	// broker's and the bare clients' CPU per publish-and-echo.
	BrokerCPUPerMessageUS float64 `json:"broker_cpu_per_message_us,omitempty"`
	ClientCPUPerMessageUS float64 `json:"client_cpu_per_message_us,omitempty"`
	// AgentVsClient (converge, single-change, rollout): the hollow agents' CPU per
	// change over the floor's bare clients' per publish-and-echo.
	AgentVsClient float64 `json:"agent_vs_client,omitempty"`
	// SuiteCPUMS: CPU time this process used meanwhile, mostly the
	// monitor decoding every report: the observer's share of the machine.
	SuiteCPUMS float64 `json:"suite_cpu_ms,omitempty"`
	// StealPct: the share of the machine's CPU time its hypervisor took
	// during the phase (/proc/stat "steal"; -1 when unknown). On a shared
	// virtual machine it is the noise in every other figure: a phase
	// with more than a few percent measured the host, not Fleet.
	StealPct float64 `json:"steal_pct"`
	// HubCounters: what the hub's /metrics counted during the phase
	// (messages received by kind, desired publishes, controller passes
	// and their time, status flushes).
	HubCounters map[string]float64 `json:"hub_counters,omitempty"`
	// ApplyMS: how long the apply request took (converge, single-change:
	// mean).
	ApplyMS float64 `json:"apply_ms,omitempty"`
	// Rollout: the rollout phase's own figures (rollout.go).
	Rollout *RolloutFigures `json:"rollout,omitempty"`
	// Bytes: the bytes phase's own figures (bytes.go).
	Bytes *BytesFigures `json:"bytes,omitempty"`
	// Uplink: the uplink phase's own figures (uplinkphase.go).
	Uplink *UplinkFigures `json:"uplink,omitempty"`
	// Flood: the flood phase's own figures (flood.go).
	Flood *FloodFigures `json:"flood,omitempty"`
	// LoadAvg: the machine's 1-minute load average when the phase
	// started (/proc/loadavg): beside steal, the other engineers' share.
	LoadAvg string `json:"load_avg,omitempty"`
	// Target is the suite's objective for this phase at this size ("" when
	// there is none: the floor, and the smaller sizes). OK says the phase
	// ran without error, lost nothing and met its target if it has one,
	// so a script can check every line's "ok" at any size.
	Target string `json:"target,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

// settle makes OK final: false on an error or a loss, whatever the
// target said; without a target, true when the phase ran cleanly.
func (r *Result) settle() {
	clean := r.Error == "" && r.Lost == 0 && r.RedundantRestarts == 0
	if r.Target == "" {
		r.OK = clean
		return
	}
	r.OK = r.OK && clean
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// fill sets Samples, P50, P99 and Max from latencies (negative = missing,
// counted as lost).
func (r *Result) fill(lat []time.Duration) {
	var ok []time.Duration
	for _, l := range lat {
		if l >= 0 {
			ok = append(ok, l)
		}
	}
	r.Lost = len(lat) - len(ok)
	r.Samples = len(ok)
	if len(ok) == 0 {
		return
	}
	slices.Sort(ok)
	r.P50MS = ms(percentile(ok, 50))
	r.P99MS = ms(percentile(ok, 99))
	r.MaxMS = ms(ok[len(ok)-1])
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// writeJSON writes one result per line.
func writeJSON(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// writeJSONLines writes the results into path, one per line, creating
// its directory.
func writeJSONLines(path string, rs []Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("-json-file: %w", err)
	}
	var b bytes.Buffer
	if err := writeJSON(&b, rs); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-json-file: %w", err)
	}
	return nil
}

// perChange fills in the per-change CPU figures of every result, and the
// hub's ratio to the floor broker's.
func perChange(rs []Result, o options) {
	var brokerPerMsg, clientPerMsg float64
	for i := range rs {
		r := &rs[i]
		var n float64
		switch r.Name {
		case phaseFloor, phaseConverge, phaseStorm:
			n = float64(r.Agents)
		case phaseSingle:
			n = float64(o.Changes)
		case phaseRollout:
			// Each device the hub gave v2 changed twice: to v2 and back.
			if r.Rollout != nil {
				n = 2 * float64(r.Rollout.MaxUpdated)
			}
		case phaseBytes:
			if r.Bytes != nil && r.Bytes.WindowS > 0 {
				n = float64(r.Agents) * r.Bytes.WindowS / 3600 // device-hours
			}
		}
		if n <= 0 {
			continue
		}
		r.HubCPUPerChangeUS = math.Round(r.HubCPUMS*1e3/n*10) / 10
		r.AgentCPUPerChangeUS = math.Round(r.AgentsCPUMS*1e3/n*10) / 10
		if r.Name == phaseFloor {
			brokerPerMsg, clientPerMsg = r.HubCPUPerChangeUS, r.AgentCPUPerChangeUS
			r.BrokerCPUPerMessageUS, r.ClientCPUPerMessageUS = brokerPerMsg, clientPerMsg
		}
	}
	for i := range rs {
		if r := &rs[i]; r.Name == phaseConverge || r.Name == phaseSingle || r.Name == phaseRollout {
			if brokerPerMsg > 0 {
				r.HubVsBroker = math.Round(r.HubCPUPerChangeUS/brokerPerMsg*100) / 100
			}
			if clientPerMsg > 0 {
				r.AgentVsClient = math.Round(r.AgentCPUPerChangeUS/clientPerMsg*100) / 100
			}
		}
	}
}

// writeTable writes the results for a human.
func writeTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tagents\tbroker\twall\tp50\tp99\tmax\thub says\tratio\tlost\tredundant\thub/device\thub cpu\tagents cpu\thub µs/chg\tagent µs/chg\thub/broker\tsteal\ttarget\tresult")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Name, r.Agents, r.Broker, msCell(r.WallMS), msCell(r.P50MS), msCell(r.P99MS), msCell(r.MaxMS), msCell(r.HubConfirmMS),
			ratioCell(r.Ratio), r.Lost, r.RedundantRestarts, bytesCell(r.HubBytesPerDevice),
			msCell(r.HubCPUMS), msCell(r.AgentsCPUMS), usCell(r.HubCPUPerChangeUS), usCell(r.AgentCPUPerChangeUS), ratioCell(r.HubVsBroker),
			stealCell(r.StealPct), dash(r.Target), verdict(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if f := r.Rollout; f != nil {
			if _, err := fmt.Fprintf(w, "%s: %s\n", r.Name, f.summary()); err != nil {
				return err
			}
		}
		if f := r.Uplink; f != nil {
			if _, err := fmt.Fprintf(w, "%s: %s\n", r.Name, f.summary()); err != nil {
				return err
			}
		}
		if f := r.Bytes; f != nil {
			if _, err := fmt.Fprintf(w, "%s: %s\n", r.Name, f.summary()); err != nil {
				return err
			}
		}
		if f := r.Flood; f != nil {
			if _, err := fmt.Fprintf(w, "%s: %s\n", r.Name, f.summary()); err != nil {
				return err
			}
		}
	}
	return nil
}

func usCell(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs", v)
}

func msCell(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 10000:
		return fmt.Sprintf("%.1f s", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func ratioCell(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func bytesCell(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f KiB", v/1024)
}

func stealCell(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v)
}

// noisyStealPct is the steal above which a phase's figures say more about
// the host than about Fleet. On a quiet machine steal stays under 1%.
const noisyStealPct = 5

// warnSteal tells the reader which phases ran on a machine whose
// hypervisor took a noticeable share of the CPU.
func warnSteal(log *slog.Logger, rs []Result) {
	for _, r := range rs {
		if r.StealPct > noisyStealPct {
			log.Warn("the hypervisor took CPU from this machine during the phase: its figures measure the host as much as Fleet; run it again when steal is low",
				"phase", r.Name, "steal_pct", r.StealPct)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func verdict(r Result) string {
	switch {
	case r.Error != "":
		return "FAIL: " + r.Error
	case r.Target == "":
		return "-"
	case r.OK:
		return "met"
	}
	return "MISSED"
}

// machine describes the host for BENCHMARKS.md.
type machine struct {
	CPUs      int
	Model     string
	RAM       string
	Kernel    string
	GoVersion string
	Mosquitto string
	// Somaxconn is the kernel's listen backlog limit (net.core.somaxconn),
	// the embedded broker's queue of connections not yet accepted: the
	// storm overflows it when it is shorter than the fleet.
	Somaxconn int
	// Load is /proc/loadavg's 1-minute figure when the run started: other
	// work on the machine skews every figure.
	Load string
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Model: "?", RAM: "?", Kernel: "?"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if total := memTotal(); total > 0 {
		m.RAM = fmt.Sprintf("%.1f GiB", float64(total)/(1<<30))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Somaxconn, _ = broker.ListenBacklog()
	if bin, err := mosquittoBinary(); err == nil {
		if out, err := exec.Command(bin, "-h").CombinedOutput(); err == nil || len(out) > 0 {
			if line, _, _ := strings.Cut(string(out), "\n"); strings.HasPrefix(line, "mosquitto version") {
				m.Mosquitto = strings.TrimPrefix(line, "mosquitto version ")
			}
		}
	}
	return m
}

// memTotal is the machine's memory in bytes (MemTotal), or 0 if unknown.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
