package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// The scale suite owns the "## Scale suite" section of BENCHMARKS.md; other
// sections are left alone. Inside it, each run (size × broker × start
// latency) has a block between markers, replaced when that run is
// repeated, and the machine block is rewritten each time.
const (
	sectionHeading = "## Scale suite"
	machineBegin   = "<!-- scale:machine -->"
	machineEnd     = "<!-- /scale:machine -->"
	runsBegin      = "<!-- scale:runs -->"
	runsEnd        = "<!-- /scale:runs -->"
)

const sectionIntro = `Measured by ` + "`go run ./test/scale`" + ` (` + "`make bench-quick`" + `, ` + "`make bench`" + `): N hollow
agents — the real edge agent (` + "`edgeagent.New`" + `: MQTT session, persisted state
on tmpfs, reconciler, status reporter) with ` + "`runtime.Fake`" + ` — each a real MQTT
client over TCP with its own token, all in one simulator process apart from
the hub. The hub is ` + "`cmd/fleet-hub`" + ` built from the tree, with its store on disk.

| phase | what is measured |
|---|---|
| floor (B1) | a bare publisher sends N retained desired states of the hub's size (QoS 1, ≤ 1,000 in flight) through a broker set up like the hub's; N bare paho clients answer each with a status. Embedded: a ` + "`broker.Broker`" + ` with the hub's options in its own process, published to through its in-process client as the hub does (the hub's own broker lets only the hub publish desired state). Mosquitto: a hub-role paho client on the Mosquitto the hub then uses. Wall and per-device times are from the first publish. |
| converge (B2) | apply a Deployment targeting all N; per device, from the hub's answer to the first status showing the pod ready at the new hash (seen by monitor subscribers of the same broker, as the hub's ingest sees it); wall = the last; the API must then report all N converged ("hub says": when it first did, polled once the monitor saw all N). ratio = converge wall / floor wall. |
| hub-memory (B6) | (hub VmRSS with N converged and idle − VmRSS of the empty hub) / N, read 23 s after convergence (the hub gives back the heap a burst left behind at the first of its 10 s memory checks that follows one without a garbage collection); the JSON also has the RSS right after convergence (hub_rss_converged_bytes) and the peak (hub_rss_peak_bytes). |
| single-change (B7) | 1,000 changes of a Deployment pinned to one device (` + "`fleet/device`" + `), each from the apply's answer to the device's status; that device starts containers instantly. After each, the hub's API must report the device converged within 2 s ("hub says": p99 of when it did; lost: changes it did not). |
| storm (B4) | SIGTERM the hub (and Mosquitto in that mode) under N converged agents, start it again on the same data; per device, from the stop to the first post-restart status showing the pod ready; lost = devices that never report; redundant = container starts the storm caused. |
| rollout (issue 28) | a Staged deployment (steps 2 devices, 10 %, 50 %, 100 %; failureThreshold 5 %; autoRollback) rolls out v1 to all N, then v2 whose image one device in 10 (every 10th by name) cannot pull. It must stop at the step whose devices first hold 5 % of N failing, having given v2 to no more devices than that step's target (devices that ever reported v2, seen by the monitor; status.rollout.updated, polled), and roll back: wall = v2's apply until every device reports v1 ready again; p50/p99/max = from RolledBack to v1 ready, per device that ran v2; lost = devices not back on v1. A table below the run gives the rollout's own figures. |

"host steal" is the share of the machine's CPU time its hypervisor took
during the phase (` + "`/proc/stat`" + `'s steal). On a shared virtual machine it is the
noise in every other figure: two cores that lose half their time to a
neighbour halve the suite's machine. A phase with more than 5 % steal
measured the host as much as Fleet; the suite warns about it.

Agents run with ` + "`-status-interval 1ms`" + ` unless the table says otherwise: the
agent's default StatusInterval (1 s) holds the converged status back for up
to a second after the "Pending" one, which would dominate every latency
below (the number of status messages is the same either way).

Published figures for comparison: KubeEdge's 100,000-node test reports a pod
start p99 of 4.1 s; Kubernetes' pod-startup SLO is p99 ≤ 5 s; KubeEdge's
edgecore uses ≈ 70 MB and a k3s agent ≈ 270 MB per node (Fleet's
per-device cost on the hub is hub-memory; a hollow agent's share of the
simulator is in the JSON as agent_bytes_per_device, read after the
simulator has collected and returned its garbage; it understates a
standalone fleet-agent's RSS: the Go runtime is shared).
`

// updateMarkdown writes the machine and this run's table into path's
// scale section, creating the file or the section as needed.
func updateMarkdown(path string, o options, m machine, rs []Result, now time.Time) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	doc := string(old)
	if doc == "" {
		doc = "# Benchmarks\n"
	}
	before, section, after := splitSection(doc)
	if section == "" {
		section = sectionHeading + "\n\n" + sectionIntro + "\n" + machineBegin + "\n" + machineEnd + "\n\n" +
			"### Results\n\n" + runsBegin + "\n" + runsEnd + "\n"
	}
	section = replaceBlock(section, machineBegin, machineEnd, renderMachine(m))
	load := m.Load
	runs, ok := between(section, runsBegin, runsEnd)
	if !ok {
		section += "\n### Results\n\n" + runsBegin + "\n" + runsEnd + "\n"
		runs = ""
	}
	key := runKey(o)
	runs = replaceBlock(runs, "<!-- scale:run "+key+" -->", "<!-- /scale:run "+key+" -->", renderRun(o, rs, now, load))
	section = replaceBlock(section, runsBegin, runsEnd, sortRuns(runs))
	out := before + section + after
	return os.WriteFile(path, []byte(out), 0o644)
}

// splitSection cuts doc around the scale section: from its heading up to
// the next "## " heading. Without one, section is "" and before is doc.
func splitSection(doc string) (before, section, after string) {
	start := -1
	if strings.HasPrefix(doc, sectionHeading+"\n") {
		start = 0
	} else if i := strings.Index(doc, "\n"+sectionHeading+"\n"); i >= 0 {
		start = i + 1
	}
	if start < 0 {
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		return doc + "\n", "", ""
	}
	rest := doc[start:]
	j := strings.Index(rest[len(sectionHeading):], "\n## ")
	if j < 0 {
		return doc[:start], rest, ""
	}
	end := len(sectionHeading) + j + 1
	return doc[:start], rest[:end], rest[end:]
}

func between(s, begin, end string) (string, bool) {
	i := strings.Index(s, begin)
	if i < 0 {
		return "", false
	}
	j := strings.Index(s[i:], end)
	if j < 0 {
		return "", false
	}
	return s[i+len(begin) : i+j], true
}

// replaceBlock puts body between the markers, appending the block if it
// is not there.
func replaceBlock(s, begin, end, body string) string {
	block := begin + "\n" + strings.Trim(body, "\n") + "\n" + end
	i := strings.Index(s, begin)
	if i >= 0 {
		if j := strings.Index(s[i:], end); j >= 0 {
			return s[:i] + block + s[i+j+len(end):]
		}
	}
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	if s != "" {
		s += "\n"
	}
	return s + block + "\n"
}

// sortRuns orders the run blocks by size, then broker and the rest of
// their key; text outside blocks is dropped.
func sortRuns(runs string) string {
	type block struct {
		agents int
		key    string
		text   string
	}
	var blocks []block
	rest := runs
	for {
		i := strings.Index(rest, "<!-- scale:run ")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], " -->")
		if j < 0 {
			break
		}
		key := rest[i+len("<!-- scale:run ") : i+j]
		end := "<!-- /scale:run " + key + " -->"
		k := strings.Index(rest[i:], end)
		if k < 0 {
			break
		}
		b := block{key: key, text: rest[i : i+k+len(end)]}
		fmt.Sscanf(key, "agents=%d", &b.agents)
		blocks = append(blocks, b)
		rest = rest[i+k+len(end):]
	}
	slices.SortStableFunc(blocks, func(a, b block) int {
		if a.agents != b.agents {
			return a.agents - b.agents
		}
		return strings.Compare(a.key, b.key)
	})
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		texts[i] = b.text
	}
	return strings.Join(texts, "\n\n")
}

func renderMachine(m machine) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine of the last run: %d CPUs (%s), %s RAM, Linux %s, %s", m.CPUs, m.Model, m.RAM, m.Kernel, m.GoVersion)
	if m.Mosquitto != "" {
		fmt.Fprintf(&b, ", Mosquitto %s", m.Mosquitto)
	}
	if m.Somaxconn > 0 {
		fmt.Fprintf(&b, ", net.core.somaxconn %d", m.Somaxconn)
	}
	b.WriteString(".\n")
	return b.String()
}

func runKey(o options) string {
	lat := "0"
	if o.RuntimeLatency > 0 {
		lat = o.RuntimeLatency.String()
	}
	key := fmt.Sprintf("agents=%d broker=%s latency=%s status-interval=%s", o.Agents, o.Broker, lat, o.StatusInterval)
	for _, x := range o.MosquittoExtra {
		key += " mosquitto=" + strings.ReplaceAll(x, " ", "_")
	}
	for _, x := range o.HubEnv {
		key += " env=" + x
	}
	if o.ReconnectAtOnce {
		key += " reconnect=at-once"
	}
	if p := partialPhases(o); p != "" {
		key += " phases=" + p
	}
	return strings.ReplaceAll(key, "--", "-") // stays a valid HTML comment
}

// partialPhases names the phases of a partial run, so that its block
// does not replace the full run's of the same size; "" for a full run:
// every phase, every phase but the 10-minute bytes phase (make bench), or
// the five phases runs had before the rollout and bytes phases existed
// (their blocks keep the keys they had).
func partialPhases(o options) string {
	without := func(skip ...string) []string {
		var out []string
		for _, p := range allPhases {
			if !slices.Contains(skip, p) && p != phaseUplink {
				out = append(out, p)
			}
		}
		return out
	}
	// The uplink phase exists only on the bridged topology: a run has it
	// or not by its topology, which does not make it partial.
	// The opt-in flood phase adds a line to a run (make bench's embedded
	// runs have it) without making it another run.
	phases := slices.DeleteFunc(slices.Clone(o.Phases), func(p string) bool { return p == phaseUplink || p == phaseFlood })
	for _, full := range [][]string{without(), without(phaseBytes), without(phaseBytes, phaseRollout)} {
		if slices.Equal(phases, full) {
			return ""
		}
	}
	return strings.Join(o.Phases, ",")
}

func renderRun(o options, rs []Result, now time.Time, load string) string {
	var b bytes.Buffer
	lat := "instant starts"
	if o.RuntimeLatency > 0 {
		lat = fmt.Sprintf("log-normal start latency, median %v (σ %.1f)", o.RuntimeLatency, o.LatencySigma)
	}
	fmt.Fprintf(&b, "#### %d agents, %s broker, %s", o.Agents, o.Broker, lat)
	for _, x := range o.MosquittoExtra {
		fmt.Fprintf(&b, ", mosquitto.conf + `%s`", x)
	}
	for _, x := range o.HubEnv {
		fmt.Fprintf(&b, ", hub with `%s`", x)
	}
	if o.ReconnectAtOnce {
		b.WriteString(", agents reconnecting without jitter")
	}
	if p := partialPhases(o); p != "" {
		fmt.Fprintf(&b, ", phases %s", p)
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "Run %s; status interval %v", now.UTC().Format("2006-01-02 15:04 MST"), o.StatusInterval)
	if load != "" {
		fmt.Fprintf(&b, "; load average %s when it started", load)
	}
	if o.FromJSON != "" {
		b.WriteString("; recorded from a saved -json run")
	}
	if len(o.MosquittoExtra) > 0 {
		fmt.Fprintf(&b, "; mosquitto.conf plus %q", o.MosquittoExtra)
	}
	if len(o.HubEnv) > 0 {
		fmt.Fprintf(&b, "; hub environment %q", o.HubEnv)
	}
	b.WriteString(".\n\n")
	b.WriteString("| phase | wall | p50 | p99 | max | hub says | ratio | lost | redundant restarts | hub bytes/device | hub µs/change | agent µs/change | hub/broker | host steal | target | result | vs published |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Name, msCell(r.WallMS), msCell(r.P50MS), msCell(r.P99MS), msCell(r.MaxMS), msCell(r.HubConfirmMS), ratioCell(r.Ratio),
			r.Lost, r.RedundantRestarts, bytesCell(r.HubBytesPerDevice), usCell(r.HubCPUPerChangeUS), usCell(r.AgentCPUPerChangeUS), ratioCell(r.HubVsBroker),
			stealCell(r.StealPct), dash(r.Target), verdictMD(r), published(r))
	}
	if t := rolloutTable(rs); t != "" {
		b.WriteString("\n" + t)
	}
	for _, r := range rs {
		if r.Bytes != nil {
			fmt.Fprintf(&b, "\n%s: %s.\n", r.Name, r.Bytes.summary())
		}
		if r.Flood != nil {
			fmt.Fprintf(&b, "\n%s: %s.\n", r.Name, r.Flood.summary())
		}
	}
	b.WriteString("\n<details><summary>JSON</summary>\n\n```json\n")
	for _, r := range rs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	b.WriteString("```\n\n</details>\n")
	return b.String()
}

func verdictMD(r Result) string {
	v := verdict(r)
	return strings.ReplaceAll(v, "|", "\\|")
}

// published compares a phase with the published figures.
func published(r Result) string {
	switch r.Name {
	case phaseConverge, phaseStorm:
		if r.P99MS == 0 {
			return "-"
		}
		return fmt.Sprintf("p99 %.2f× KubeEdge's 4.1 s, %.2f× the k8s SLO (5 s)", r.P99MS/4100, r.P99MS/5000)
	case phaseMemory:
		if r.HubBytesPerDevice == 0 {
			return "-"
		}
		s := fmt.Sprintf("hub: %.0f devices per 70 MB (edgecore's RSS)", 70e6/max(r.HubBytesPerDevice, 1))
		if r.AgentBytesPerDevice > 0 {
			s += fmt.Sprintf("; hollow agent %.0f KiB (edgecore ≈ 70 MB, k3s agent ≈ 270 MB)", r.AgentBytesPerDevice/1024)
		}
		return s
	}
	return "-"
}

// writeJSONFile writes v as JSON, mode 0600 (configs hold tokens).
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
