package main

import (
	"fmt"
	"strconv"
)

// Issue 45's targets, as the headline judges them (summary.go).
const (
	issueSingleP99MS     = 5
	issueStormWallMS     = 4000
	issueRestartMS       = 1500
	issueHubBytes        = 32 << 10
	issueHubRSSConverged = 400e6
	issueFlatRatio       = 1.2
	issueAgentRSS        = 15 << 20
)

// headlineRows are the rows of the headline, in order; the ids are the
// baseline file's keys (test/scale/headline-before.json).
func headlineRows(sz benchSizes) []headlineRow {
	small, large, huge := "embedded-"+strconv.Itoa(sz.Small), "embedded-"+strconv.Itoa(sz.Large), "bridged-"+strconv.Itoa(sz.Huge)
	n := func(v int) string { return thousands(v) }
	rows := []headlineRow{
		{label: "Regressions fixed"},
		singleRow("single_p99_small", small, n(sz.Small)),
		singleRow("single_p99_large", large, n(sz.Large)),
		onlineRow("single_online_small", small, n(sz.Small)),
		onlineRow("single_online_large", large, n(sz.Large)),
		{id: "storm_wall_large", label: "reconnect storm wall, " + n(sz.Large), target: "≤ 4 s, lost 0",
			get: func(b *benchRuns) cell { return stormCell(b.phase(large, phaseStorm), issueStormWallMS) }},
		{id: "storm_restart_large", label: "hub restart in the storm (of which its stop), " + n(sz.Large), target: "≤ 1.5 s",
			get: func(b *benchRuns) cell { return restartCell(b.phase(large, phaseStorm)) }},
		floodRow("flood_small", small, n(sz.Small)),
		floodRow("flood_large", large, n(sz.Large)),
		{label: "Hub memory (embedded broker)"},
		{id: "hub_memory_large", label: "hub memory per device, settled, " + n(sz.Large), target: fmt.Sprintf("≤ %d KiB", issueHubBytes>>10),
			get: func(b *benchRuns) cell {
				return withConvergeSteal(b, large, memoryCell(b.phase(large, phaseMemory), issueHubBytes))
			}},
		{id: "hub_rss_large", label: "hub RSS right after converging (settled, peak), " + n(sz.Large), target: fmt.Sprintf("≤ %.0f MB", issueHubRSSConverged/1e6),
			get: func(b *benchRuns) cell { return withConvergeSteal(b, large, rssCell(b.phase(large, phaseMemory))) }},
		{label: "Cost flat in fleet size (converge, same make bench)"},
		flatRow("hub_cpu_flat", "hub CPU per change", small, large, sz, func(r *Result) float64 { return r.HubCPUPerChangeUS }),
		flatRow("agent_cpu_flat", "hollow agent CPU per change", small, large, sz, func(r *Result) float64 { return r.AgentCPUPerChangeUS }),
	}
	rows = append(rows, hugeRows(huge, n(sz.Huge))...)
	rows = append(rows, agentRows()...)
	return append(rows, contextRows(small, large, sz)...)
}

func singleRow(id, file, size string) headlineRow {
	return headlineRow{id: id, label: "single change p99 (max), " + size, target: fmt.Sprintf("≤ %d ms", issueSingleP99MS),
		get: func(b *benchRuns) cell {
			r := b.phase(file, phaseSingle)
			if r == nil {
				return missing()
			}
			if c, bad := failedCell(r); bad {
				return c
			}
			return cell{now: fmt.Sprintf("%s (max %s)", durCell(r.P99MS), durCell(r.MaxMS)), met: atMost(r.P99MS, issueSingleP99MS), from: []*Result{r}}
		}}
}

// onlineRow: the hub's msgs_online counter over the single-change phase,
// every "online" and will message of the fleet: the probe's reconnects.
func onlineRow(id, file, size string) headlineRow {
	return headlineRow{id: id, label: "reconnects during single-change (msgs_online), " + size, target: "0",
		get: func(b *benchRuns) cell {
			r := b.phase(file, phaseSingle)
			if r == nil {
				return missing()
			}
			v, ok := r.HubCounters["msgs_online"]
			if !ok {
				return cell{now: notMeasured, met: notMeasured, from: []*Result{r}}
			}
			return cell{now: strconv.FormatFloat(v, 'f', -1, 64), met: atMost(v, 0), from: []*Result{r}}
		}}
}

func stormCell(r *Result, limitMS float64) cell {
	if r == nil {
		return missing()
	}
	if c, bad := failedCell(r); bad {
		return c
	}
	met := metNA
	if limitMS > 0 {
		met = atMost(r.WallMS, limitMS)
	}
	if r.Lost > 0 {
		met = metNo
	}
	return cell{now: fmt.Sprintf("%s (p99 %s, lost %d)", durCell(r.WallMS), durCell(r.P99MS), r.Lost), met: met, from: []*Result{r}}
}

func restartCell(r *Result) cell {
	if r == nil {
		return missing()
	}
	if r.RestartMS == 0 {
		if c, bad := failedCell(r); bad {
			return c
		}
		return cell{now: notMeasured, met: notMeasured, from: []*Result{r}}
	}
	return cell{now: fmt.Sprintf("%s (stop %s)", durCell(r.RestartMS), durCell(r.StopMS)), met: atMost(r.RestartMS, issueRestartMS), from: []*Result{r}}
}

func floodRow(id, file, size string) headlineRow {
	return headlineRow{id: id, label: fmt.Sprintf("flood: a device at %d× its publish limit, %s", floodFactor, size), target: "cut off, no other reconnect",
		get: func(b *benchRuns) cell {
			r := b.phase(file, phaseFlood)
			if r == nil {
				return missing()
			}
			if c, bad := failedCell(r); bad {
				return c
			}
			if r.Flood == nil {
				return missing()
			}
			f := r.Flood
			now := "never cut off"
			if f.CutOffs > 0 {
				now = fmt.Sprintf("cut off after %.2f s (expected %.2f s), %d times in %.0f s", f.FirstCutOffMS/1000, f.ExpectedCutOffMS/1000, f.CutOffs, f.WindowS)
			}
			now += fmt.Sprintf("; %.0f online messages from the fleet; probe p99 %s over %d changes", f.FleetOnlineMsgs, durCell(r.P99MS), f.ProbeChanges)
			met := metNo
			if floodOK(f) {
				met = metYes
			}
			return cell{now: now, met: met, from: []*Result{r}}
		}}
}

func memoryCell(r *Result, limit float64) cell {
	if r == nil {
		return missing()
	}
	if c, bad := failedCell(r); bad {
		return c
	}
	met := metNA
	if limit > 0 {
		met = atMost(r.HubBytesPerDevice, limit)
	}
	return cell{now: fmt.Sprintf("%s (RSS %s)", bytesCell(r.HubBytesPerDevice), mbCell(r.HubRSSBytes)), met: met, from: []*Result{r}}
}

// withConvergeSteal gives a hub-memory figure the steal of the converge
// before it: the memory phase runs no CPU meter, and the RSS it reads is
// the converge's.
func withConvergeSteal(b *benchRuns, file string, c cell) cell {
	conv := b.phase(file, phaseConverge)
	if len(c.from) != 1 || c.from[0].StealPct >= 0 || conv == nil {
		return c
	}
	c.from = []*Result{conv}
	c.stealSuffix = " (converge)"
	return c
}

func rssCell(r *Result) cell {
	if r == nil {
		return missing()
	}
	if c, bad := failedCell(r); bad {
		return c
	}
	return cell{now: fmt.Sprintf("%s (%s, %s)", mbCell(r.HubRSSConvergedBytes), mbCell(r.HubRSSBytes), mbCell(r.HubRSSPeakBytes)),
		met: atMost(float64(r.HubRSSConvergedBytes), issueHubRSSConverged), from: []*Result{r}}
}

// flatRow: a converge figure at the larger fleet over the same at the
// smaller, both from this make bench.
func flatRow(id, what, small, large string, sz benchSizes, f func(*Result) float64) headlineRow {
	return headlineRow{id: id, label: fmt.Sprintf("%s, %s ÷ %s", what, thousands(sz.Large), thousands(sz.Small)), target: fmt.Sprintf("≤ %.1f×", issueFlatRatio),
		get: func(b *benchRuns) cell {
			s, l := b.phase(small, phaseConverge), b.phase(large, phaseConverge)
			if s == nil || l == nil {
				c := missing()
				c.from = nonNil(s, l)
				return c
			}
			if c, bad := failedCell(s, l); bad {
				return c
			}
			if f(s) <= 0 || f(l) <= 0 {
				return cell{now: notMeasured, met: notMeasured, from: []*Result{s, l}}
			}
			ratio := f(l) / f(s)
			return cell{now: fmt.Sprintf("%.0f / %.0f µs = %.2f×", f(l), f(s), ratio), met: atMost(ratio, issueFlatRatio), from: []*Result{l, s}}
		}}
}

func nonNil(rs ...*Result) []*Result {
	var out []*Result
	for _, r := range rs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// hugeRows: the bridged fleet's figures; the issue sets no target for
// them, they are reported.
func hugeRows(file, size string) []headlineRow {
	lat := func(phase string) func(*benchRuns) cell {
		return func(b *benchRuns) cell {
			r := b.phase(file, phase)
			if r == nil {
				return missing()
			}
			if c, bad := failedCell(r); bad {
				return c
			}
			met := metNA
			if r.Lost > 0 {
				met = metNo
			}
			return cell{now: fmt.Sprintf("%s / %s (max %s, lost %d)", durCell(r.P50MS), durCell(r.P99MS), durCell(r.MaxMS), r.Lost), met: met, from: []*Result{r}}
		}
	}
	return []headlineRow{
		{label: size + " devices (bridged sites, lite agents)"},
		{id: "huge_converge", label: "converge, a change to all: p50 / p99, " + size, target: "reported", get: lat(phaseConverge)},
		{id: "huge_single", label: "single change p50 / p99, " + size, target: "reported", get: lat(phaseSingle)},
		{id: "huge_memory", label: "hub memory per device, settled, " + size, target: "reported",
			get: func(b *benchRuns) cell { return withConvergeSteal(b, file, memoryCell(b.phase(file, phaseMemory), 0)) }},
		{id: "huge_storm", label: "reconnect storm wall, " + size, target: "reported, lost 0",
			get: func(b *benchRuns) cell {
				c := stormCell(b.phase(file, phaseStorm), 0)
				if r := b.phase(file, phaseStorm); r != nil && r.Error == "" {
					c.now += fmt.Sprintf("; hub restart %s", durCell(r.RestartMS))
				}
				return c
			}},
		{id: "huge_idle_bytes", label: "idle bytes per device per day, " + size, target: "reported", get: func(b *benchRuns) cell { return idleBytesCell(b.phase(file, phaseBytes)) }},
	}
}

func idleBytesCell(r *Result) cell {
	if r == nil || r.Bytes == nil {
		if r != nil {
			if c, bad := failedCell(r); bad {
				return c
			}
		}
		return missing()
	}
	f := r.Bytes
	return cell{now: fmt.Sprintf("%s B (%.1f KiB; over TLS %.1f KiB)", thousands(int(f.IdleWirePerDay)), f.IdleWirePerDay/1024, f.TLSPerDayBytes/1024), met: metNA, from: []*Result{r}}
}

// agentRows: agent.json, the real agent on containerd.
func agentRows() []headlineRow {
	get := func(f func(*AgentFigures) (string, string)) func(*benchRuns) cell {
		return func(b *benchRuns) cell {
			if b.agent == nil {
				return missing()
			}
			now, met := f(b.agent)
			steal := "?"
			if b.agent.StealPct != nil {
				steal = fmt.Sprintf("%.1f %%", *b.agent.StealPct)
			}
			if b.agent.LoadAvg != "" {
				steal += " (load " + b.agent.LoadAvg + ")"
			}
			return cell{now: now, met: met, steal: steal}
		}
	}
	return []headlineRow{
		{label: "The real agent on containerd, three pods (make bench-agent)"},
		{id: "agent_idle_cpu", label: "agent idle CPU per hour", target: "reported", get: get(func(a *AgentFigures) (string, string) {
			if a.IdleCPUSecondsPerHour == nil {
				return notMeasured, notMeasured
			}
			return fmt.Sprintf("%.2f CPU s/h", *a.IdleCPUSecondsPerHour), metNA
		})},
		{id: "agent_cpu_change", label: "agent CPU per change that replaces a pod", target: "reported", get: get(func(a *AgentFigures) (string, string) {
			if a.CPUMSPerChange == nil {
				return notMeasured, notMeasured
			}
			return fmt.Sprintf("%.1f ms", *a.CPUMSPerChange), metNA
		})},
		{id: "agent_rss", label: "agent VmRSS, largest read (Pss)", target: fmt.Sprintf("≤ %d MiB", issueAgentRSS>>20), get: get(func(a *AgentFigures) (string, string) {
			if a.VmRSSMaxBytes == nil {
				return notMeasured, notMeasured
			}
			now := fmt.Sprintf("%.1f MiB", float64(*a.VmRSSMaxBytes)/(1<<20))
			if a.PssMaxBytes != nil {
				now += fmt.Sprintf(" (Pss %.1f MiB)", float64(*a.PssMaxBytes)/(1<<20))
			}
			return now, atMost(float64(*a.VmRSSMaxBytes), issueAgentRSS)
		})},
	}
}

// contextRows: the rest of the issue's first table, whose targets were
// retired (reported only), and the storm with every agent at once.
func contextRows(small, large string, sz benchSizes) []headlineRow {
	conv := func(file string, f func(r, floor *Result) string) func(*benchRuns) cell {
		return func(b *benchRuns) cell {
			r := b.phase(file, phaseConverge)
			if r == nil {
				return missing()
			}
			if c, bad := failedCell(r); bad {
				return c
			}
			return cell{now: f(r, b.phase(file, phaseFloor)), met: metNA, from: []*Result{r}}
		}
	}
	p99 := func(r, _ *Result) string { return fmt.Sprintf("%s (wall %s)", durCell(r.P99MS), durCell(r.WallMS)) }
	ratio := func(r, floor *Result) string {
		if floor == nil || r.HubVsBroker == 0 {
			return usCell(r.HubCPUPerChangeUS) + " (the floor's CPU not measured)"
		}
		return fmt.Sprintf("%.0f ÷ %.0f µs = %.2f×", r.HubCPUPerChangeUS, floor.HubCPUPerChangeUS, r.HubVsBroker)
	}
	agent := func(r, _ *Result) string { return usCell(r.AgentCPUPerChangeUS) }
	atOnce := "storm-at-once-" + strconv.Itoa(sz.Large)
	S, L := thousands(sz.Small), thousands(sz.Large)
	return []headlineRow{
		{label: "Context: the issue's first table (targets retired, reported)"},
		{id: "converge_p99_small", label: "converge p99, " + S, target: "reported", get: conv(small, p99)},
		{id: "converge_p99_large", label: "converge p99, " + L, target: "reported", get: conv(large, p99)},
		{id: "hub_vs_broker_small", label: "hub CPU per change ÷ bare broker's, " + S, target: "reported", get: conv(small, ratio)},
		{id: "hub_vs_broker_large", label: "hub CPU per change ÷ bare broker's, " + L, target: "reported", get: conv(large, ratio)},
		{id: "agent_cpu_small", label: "hollow agent CPU per change, " + S, target: "reported", get: conv(small, agent)},
		{id: "agent_cpu_large", label: "hollow agent CPU per change, " + L, target: "reported", get: conv(large, agent)},
		{id: "storm_at_once_large", label: "reconnect storm wall, every agent at once, " + L, target: "reported, lost 0",
			get: func(b *benchRuns) cell { return stormCell(b.phase(atOnce, phaseStorm), 0) }},
	}
}

// durCell is a duration in ms for the headline: seconds from 1 s.
func durCell(v float64) string {
	switch {
	case v == 0:
		return "0 ms" // a latency seen before its origin (suite.go's monitor)
	case v >= 10000:
		return fmt.Sprintf("%.1f s", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// mbCell is bytes in MB (10⁶), as the issue writes RSS.
func mbCell(v int64) string {
	if v <= 0 {
		return "-"
	}
	if v >= 1e9 {
		return fmt.Sprintf("%.2f GB", float64(v)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(v)/1e6)
}

// thousands writes n with commas: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
