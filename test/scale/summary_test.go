package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// headlineByLabel builds the headline of dir and indexes its rows by
// label.
func headlineByLabel(t *testing.T, dir string, sizes benchSizes) (map[string]headlineLine, *benchRuns) {
	t.Helper()
	bl, err := readBaseline("headline-before.json")
	if err != nil {
		t.Fatal(err)
	}
	b := loadBench(dir, sizes)
	rows := map[string]headlineLine{}
	for _, l := range buildHeadline(b, bl) {
		if !l.group {
			rows[l.label] = l
		}
	}
	return rows, b
}

// TestHeadlineFromSample reads the committed sample of a make bench
// (testdata/bench, hand-written) and checks each kind of figure: a
// target met, one missed, a ratio of two runs, a failed phase, a phase
// the run did not have, a line that does not parse, agent.json.
func TestHeadlineFromSample(t *testing.T) {
	rows, b := headlineByLabel(t, "testdata/bench", issueSizes)
	want := []struct{ label, now, met, steal string }{
		{"single change p99 (max), 1,000", "2.6 ms (max 7.0 ms)", metYes, "0.1 % (load 0.41)"},
		{"reconnects during single-change (msgs_online), 10,000", "2", metNo, ""},
		{"reconnect storm wall, 10,000", "5.23 s (p99 5.10 s, lost 0)", metNo, "? (load 0.41)"},
		{"hub restart in the storm (of which its stop), 10,000", "5.60 s (stop 786 ms)", metNo, ""},
		{"flood: a device at 10× its publish limit, 1,000", "cut off after 3.34 s (expected 3.33 s), 11 times in 15 s; 0 online messages from the fleet; probe p99 3.9 ms over 1000 changes", metYes, "0.3 % (load 0.41)"},
		{"flood: a device at 10× its publish limit, 10,000", "failed: probe change 3 during the flood: dev-00000 did not report it", metNo, ""},
		// The memory phase measures no steal: the converge's stands in.
		{"hub memory per device, settled, 10,000", "29.3 KiB (RSS 335 MB)", metYes, "1.5 % (load 2.10) (converge)"},
		{"hub RSS right after converging (settled, peak), 10,000", "1.13 GB (335 MB, 1.16 GB)", metNo, ""},
		{"hub CPU per change, 10,000 ÷ 1,000", "433 / 310 µs = 1.40×", metNo, "1.5 % (load 2.10) / 0.2 % (load 0.41)"},
		{"hollow agent CPU per change, 10,000 ÷ 1,000", "530 / 480 µs = 1.10×", metYes, ""},
		{"reconnect storm wall, 100,000", "52.2 s (p99 48.8 s, lost 3); hub restart 27.8 s", metNo, ""},
		{"idle bytes per device per day, 100,000", "92,159 B (90.0 KiB; over TLS 114.7 KiB)", metNA, ""},
		{"agent VmRSS, largest read (Pss)", "14.0 MiB (Pss 11.0 MiB)", metYes, "0.4 % (load 0.30)"},
		{"hub CPU per change ÷ bare broker's, 10,000", "433 ÷ 135 µs = 3.21×", metNA, ""},
		{"reconnect storm wall, every agent at once, 10,000", "4.06 s (p99 4.01 s, lost 0)", metNA, ""},
	}
	for _, w := range want {
		l, ok := rows[w.label]
		switch {
		case !ok:
			t.Errorf("no row %q", w.label)
		case l.now != w.now || l.met != w.met || (w.steal != "" && l.steal != w.steal):
			t.Errorf("%s: now %q, met %q, steal %q; want %q, %q, %q", w.label, l.now, l.met, l.steal, w.now, w.met, w.steal)
		}
	}
	if l := rows["single change p99 (max), 1,000"]; l.before != "112 ms (max 6.5 s)" || l.target != "≤ 5 ms" {
		t.Errorf("single change at 1,000: before %q, target %q: want the baseline's and the issue's", l.before, l.target)
	}
	if len(b.notes) != 1 || !strings.Contains(b.notes[0], "embedded-10000.json:7") {
		t.Errorf("notes %q: want the one line that does not parse", b.notes)
	}
	// The sample's other lines of that file are still read.
	if b.phase("embedded-10000", phaseStorm) == nil {
		t.Error("embedded-10000.json: the lines before the bad one were dropped")
	}
}

// TestHeadlineMissingInputs: no directory, an empty one, agent.json
// with a field only: every figure "not measured", nothing fails.
func TestHeadlineMissingInputs(t *testing.T) {
	empty := t.TempDir()
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, "agent.json"), []byte(`{"cpu_ms_per_change": 9.5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(empty, "none"), empty, partial} {
		rows, _ := headlineByLabel(t, dir, issueSizes)
		if len(rows) < 20 {
			t.Fatalf("%s: %d rows", dir, len(rows))
		}
		for label, l := range rows {
			if dir == partial && label == "agent CPU per change that replaces a pod" {
				if l.now != "9.5 ms" || l.steal != "?" {
					t.Errorf("partial agent.json: %q, steal %q", l.now, l.steal)
				}
				continue
			}
			if l.now != notMeasured || l.met != notMeasured {
				t.Errorf("%s: %s: now %q, met %q: want not measured", dir, label, l.now, l.met)
			}
		}
	}
}

// TestHeadlineBaselineKeys: every "before" in the committed baseline
// names a row, and every row has one.
func TestHeadlineBaselineKeys(t *testing.T) {
	bl, err := readBaseline("headline-before.json")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range headlineRows(issueSizes) {
		if r.get != nil {
			ids = append(ids, r.id)
		}
	}
	for id := range bl.Before {
		if !slices.Contains(ids, id) {
			t.Errorf("baseline %q: no such row", id)
		}
	}
	for _, id := range ids {
		if bl.Before[id] == "" {
			t.Errorf("row %q: no baseline", id)
		}
	}
}

// TestHeadlineSmallSizes: other sizes read other files, and the table
// says it is no measurement of the targets.
func TestHeadlineSmallSizes(t *testing.T) {
	dir := t.TempDir()
	r := Result{Name: phaseSingle, Agents: 20, Broker: "embedded", P99MS: 3, MaxMS: 4, StealPct: 0}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(dir, "embedded-20.json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	sizes := benchSizes{Small: 20, Large: 50, Huge: 100}
	rows, runs := headlineByLabel(t, dir, sizes)
	if l := rows["single change p99 (max), 20"]; l.now != "3.0 ms (max 4.0 ms)" || l.met != metYes {
		t.Errorf("20 agents: %+v", l)
	}
	md := renderHeadlineMarkdown(buildHeadline(runs, baseline{}), runs, dir)
	if !strings.Contains(md, "Sizes 20 / 50 / 100, not the issue's") {
		t.Errorf("markdown does not say the sizes are not the issue's:\n%s", md)
	}
}

// TestHeadlineMarkdown replaces the table between the markers, again on
// a second run, and refuses a document without them.
func TestHeadlineMarkdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	doc := "# Benchmarks\n\nIntro.\n\n## Headline (issue 45)\n\nSentence.\n\n" + headlineBegin + "\nold\n" + headlineEnd + "\n\n## Next\n\nkept\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"| a | b |\n", "| c | d |\n"} {
		if err := updateHeadlineMarkdown(path, body); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	want := strings.Replace(doc, "\nold\n", "\n| c | d |\n", 1)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	bare := filepath.Join(t.TempDir(), "bare.md")
	if err := os.WriteFile(bare, []byte("# B\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateHeadlineMarkdown(bare, "x"); err == nil {
		t.Error("no markers: no error")
	}
	if b, _ := os.ReadFile(bare); string(b) != "# B\n" {
		t.Errorf("no markers: the file changed to %q", b)
	}
}

// TestSummaryCommand runs the command as make bench does, on the sample.
func TestSummaryCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(headlineBegin+"\n"+headlineEnd+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := runSummary([]string{"-dir", "testdata/bench", "-baseline", "headline-before.json", "-markdown", path}, &out); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(path)
	for _, s := range []string{out.String(), string(md)} {
		if !strings.Contains(s, "single change p99 (max), 1,000") || !strings.Contains(s, "112 ms (max 6.5 s)") {
			t.Errorf("no single-change row with its baseline in:\n%s", s)
		}
	}
}
