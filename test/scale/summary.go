package main

// The headline of `make bench` (issue 45): every figure the issue's
// targets name, from the JSON the bench's runs kept, beside the figure
// the issue measured before its levers, the target, whether it is met and
// the host steal of the phase it came from.
//
//	go run ./test/scale summary -dir dist/bench -markdown BENCHMARKS.md
//
// It reads, in -dir, the files make bench writes (each one JSON Result a
// line, as -json-file writes them; S, L and H are -small, -large, -huge):
//
//	embedded-S.json, embedded-L.json   the embedded broker's runs (floor …
//	                                   rollout, with the flood phase)
//	storm-at-once-L.json               the storm with every agent at once
//	bridged-H.json                     H devices, -topology bridged, lite
//	                                   agents (converge, hub-memory,
//	                                   single-change, bytes, uplink, storm)
//	agent.json                         the real agent on containerd
//	                                   (AgentFigures, one JSON object)
//
// Any other file is ignored; a file or figure that is missing prints
// "not measured".

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Markers of the headline table in BENCHMARKS.md's "## Headline (issue
// 45)" section: -markdown replaces what is between them.
const (
	headlineBegin = "<!-- bench:headline -->"
	headlineEnd   = "<!-- /bench:headline -->"
	notMeasured   = "not measured"
)

// AgentFigures is agent.json: the real edge agent on containerd with three
// pods (make bench-agent), one JSON object. Every field is optional: a
// missing one prints "not measured".
type AgentFigures struct {
	// IdleCPUSecondsPerHour: the agent's CPU seconds per hour, idle, at
	// the default --resync-interval.
	IdleCPUSecondsPerHour *float64 `json:"idle_cpu_s_per_hour"`
	// CPUMSPerChange: the agent's CPU per change that replaces a pod.
	CPUMSPerChange *float64 `json:"cpu_ms_per_change"`
	// VmRSSMaxBytes: the largest VmRSS read (converged, after idling,
	// after the changes); PssMaxBytes: the largest Pss.
	VmRSSMaxBytes *int64 `json:"vmrss_max_bytes"`
	PssMaxBytes   *int64 `json:"pss_max_bytes"`
	// StealPct: host steal over the measurement (/proc/stat); LoadAvg:
	// the 1-minute load average when it started.
	StealPct *float64 `json:"steal_pct"`
	LoadAvg  string   `json:"load_avg,omitempty"`
	// Note: how it was measured (window, changes), printed under the
	// table.
	Note string `json:"note,omitempty"`
}

// benchSizes are the fleet sizes of make bench's runs.
type benchSizes struct{ Small, Large, Huge int }

// issueSizes are issue 45's: other sizes test the plumbing.
var issueSizes = benchSizes{Small: 1000, Large: 10000, Huge: 100000}

// benchRuns is what one make bench left in its directory.
type benchRuns struct {
	sizes  benchSizes
	files  map[string][]Result // by file name without .json
	agent  *AgentFigures
	notes  []string // files that could not be read, said under the table
	newest time.Time
}

// loadBench reads dir. It never fails: what it cannot read is a note,
// and the figures it would have given are "not measured".
func loadBench(dir string, sizes benchSizes) *benchRuns {
	b := &benchRuns{sizes: sizes, files: map[string][]Result{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.notes = append(b.notes, fmt.Sprintf("%s: %v", dir, err))
		return b
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if info, err := e.Info(); err == nil && info.ModTime().After(b.newest) {
			b.newest = info.ModTime()
		}
		if name == "agent" {
			b.agent, err = readAgentFigures(path)
		} else {
			b.files[name], err = readResultLines(path)
		}
		if err != nil {
			b.notes = append(b.notes, err.Error())
		}
	}
	return b
}

func readAgentFigures(path string) (*AgentFigures, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a AgentFigures
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &a, nil
}

// readResultLines reads a -json-file; a line that does not parse is
// skipped and reported, the others kept.
func readResultLines(path string) ([]Result, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []Result
	var errs []error
	for i, line := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := Result{StealPct: -1}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, i+1, err))
			continue
		}
		rs = append(rs, r)
	}
	return rs, errors.Join(errs...)
}

// phase is the first result of that phase in the file, or nil.
func (b *benchRuns) phase(file, name string) *Result {
	for i, r := range b.files[file] {
		if r.Name == name {
			return &b.files[file][i]
		}
	}
	return nil
}

// cell is one figure's measurement.
type cell struct {
	now, met string
	from     []*Result // the phases it came from: their steal and load
	steal    string    // instead of from's (agent.json)
	// stealSuffix names the phase the steal is of, when it is not the
	// figure's own.
	stealSuffix string
}

const (
	metYes = "yes"
	metNo  = "**NO**"
	metNA  = "—" // reported, no target
)

// missing is a figure without its input.
func missing() cell { return cell{now: notMeasured, met: notMeasured} }

// failedCell is a figure whose phase ran and failed.
func failedCell(rs ...*Result) (cell, bool) {
	for _, r := range rs {
		if r.Error != "" {
			return cell{now: "failed: " + truncate(r.Error, 80), met: metNo, from: rs}, true
		}
	}
	return cell{}, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// atMost is the verdict on v ≤ limit.
func atMost(v, limit float64) string {
	if v <= limit {
		return metYes
	}
	return metNo
}

// stealOf is the cell's steal column: each phase's steal and load.
func (c cell) stealOf() string {
	if c.steal != "" {
		return c.steal
	}
	var parts []string
	for _, r := range c.from {
		s := "?"
		if r.StealPct >= 0 {
			s = fmt.Sprintf("%.1f %%", r.StealPct)
		}
		if r.LoadAvg != "" {
			s += " (load " + r.LoadAvg + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " / ") + c.stealSuffix
}

// headlineRow is one line of the table; a row without get is a group's
// heading.
type headlineRow struct {
	id, label, target string
	get               func(*benchRuns) cell
}

// baseline is the committed file of the issue's "before" figures, by row
// id.
type baseline struct {
	About  string            `json:"about"`
	Before map[string]string `json:"before"`
}

func readBaseline(path string) (baseline, error) {
	var bl baseline
	if path == "" {
		return bl, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return bl, err
	}
	if err := json.Unmarshal(raw, &bl); err != nil {
		return bl, fmt.Errorf("%s: %w", path, err)
	}
	return bl, nil
}

// summaryOptions are the summary's flags.
type summaryOptions struct {
	Dir, Baseline, Markdown string
	Sizes                   benchSizes
}

func parseSummaryOptions(args []string, stderr io.Writer) (summaryOptions, error) {
	var o summaryOptions
	fs := flag.NewFlagSet("scale summary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Dir, "dir", "dist/bench", "the directory make bench kept its runs' JSON in")
	fs.StringVar(&o.Baseline, "baseline", "test/scale/headline-before.json", "the figures before issue 45's levers, by row (\"\": none)")
	fs.StringVar(&o.Markdown, "markdown", "", "also write the table between "+headlineBegin+" and "+headlineEnd+" in this file (BENCHMARKS.md's \"## Headline (issue 45)\")")
	fs.IntVar(&o.Sizes.Small, "small", issueSizes.Small, "the smaller fleet of make bench's runs (files embedded-N.json)")
	fs.IntVar(&o.Sizes.Large, "large", issueSizes.Large, "the larger fleet (embedded-N.json, storm-at-once-N.json)")
	fs.IntVar(&o.Sizes.Huge, "huge", issueSizes.Huge, "the bridged fleet (bridged-N.json)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

// runSummary prints the headline table (and writes it into -markdown).
func runSummary(args []string, stdout io.Writer) error {
	o, err := parseSummaryOptions(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	bl, err := readBaseline(o.Baseline)
	if err != nil {
		// The "before" column is context: without it the table still says
		// what was measured.
		fmt.Fprintf(os.Stderr, "scale summary: baseline: %v\n", err)
	}
	b := loadBench(o.Dir, o.Sizes)
	table := buildHeadline(b, bl)
	if err := writeHeadlineText(stdout, table, b, o.Dir); err != nil {
		return err
	}
	if o.Markdown == "" {
		return nil
	}
	return updateHeadlineMarkdown(o.Markdown, renderHeadlineMarkdown(table, b, o.Dir))
}

// headlineLine is one rendered row.
type headlineLine struct {
	group                           bool
	label, before, now, target, met string
	steal                           string
}

func buildHeadline(b *benchRuns, bl baseline) []headlineLine {
	var out []headlineLine
	for _, row := range headlineRows(b.sizes) {
		if row.get == nil {
			out = append(out, headlineLine{group: true, label: row.label})
			continue
		}
		c := row.get(b)
		before := bl.Before[row.id]
		if before == "" {
			before = "-"
		}
		out = append(out, headlineLine{
			label: row.label, before: before, now: c.now, target: dash(row.target), met: c.met, steal: c.stealOf(),
		})
	}
	return out
}

// sizesNote says when the sizes are not the issue's: the table then tests
// the plumbing, its figures are no measurement of the targets.
func sizesNote(s benchSizes) string {
	if s == issueSizes {
		return ""
	}
	return fmt.Sprintf("Sizes %d / %d / %d, not the issue's 1,000 / 10,000 / 100,000: a test of make bench's plumbing, not a measurement of the targets.", s.Small, s.Large, s.Huge)
}

func writeHeadlineText(w io.Writer, table []headlineLine, b *benchRuns, dir string) error {
	fmt.Fprintf(w, "\nHeadline (issue 45), from %s\n\n", dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tbefore\tnow\ttarget\tmet?\thost steal (load)")
	for _, l := range table {
		if l.group {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\n", strings.ToUpper(l.label))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", l.label, l.before, l.now, l.target, strings.Trim(l.met, "*"), l.steal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range headlineNotes(b) {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// headlineNotes are the lines under the table.
func headlineNotes(b *benchRuns) []string {
	var notes []string
	if n := sizesNote(b.sizes); n != "" {
		notes = append(notes, n)
	}
	if b.agent != nil && b.agent.Note != "" {
		notes = append(notes, "The real agent: "+b.agent.Note)
	}
	for _, n := range b.notes {
		notes = append(notes, "Not read: "+n)
	}
	return notes
}

func renderHeadlineMarkdown(table []headlineLine, b *benchRuns, dir string) string {
	var s strings.Builder
	when := "no run found"
	if !b.newest.IsZero() {
		when = "last file written " + b.newest.UTC().Format("2006-01-02 15:04 MST")
	}
	fmt.Fprintf(&s, "Written by `make bench` (`go run ./test/scale summary -dir %s -markdown BENCHMARKS.md`), %s.\n\n", dir, when)
	s.WriteString("| figure | before | now | target | met? | host steal (load) |\n|---|---|---|---|---|---|\n")
	for _, l := range table {
		if l.group {
			fmt.Fprintf(&s, "| **%s** | | | | | |\n", l.label)
			continue
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", mdCell(l.label), mdCell(l.before), mdCell(l.now), mdCell(l.target), l.met, mdCell(l.steal))
	}
	for _, n := range headlineNotes(b) {
		s.WriteString("\n" + mdCell(n) + "\n")
	}
	return s.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// updateHeadlineMarkdown replaces what is between the headline markers in
// path. Without them it changes nothing and says where they go: the
// section is the document's, not the summary's.
func updateHeadlineMarkdown(path, body string) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no such file to write the headline into", path)
	}
	if err != nil {
		return err
	}
	doc := string(raw)
	i := strings.Index(doc, headlineBegin)
	j := strings.Index(doc, headlineEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s markers (they belong in its \"## Headline (issue 45)\" section)", path, headlineBegin, headlineEnd)
	}
	out := doc[:i+len(headlineBegin)] + "\n" + strings.Trim(body, "\n") + "\n" + doc[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}
