// Command fuzz runs every Go fuzz target of the module for a while, one
// after the other, and prints how fast each ran as a Markdown table.
//
//	go run ./test/fuzz -fuzztime 2s       # every target, 2s each (make test)
//	go run ./test/fuzz -fuzztime 60s      # longer (make fuzz, FUZZTIME)
//	go run ./test/fuzz -run 'Selector|Quantity'
//
// It finds the targets itself (func FuzzX(f *testing.F) in the module's
// _test.go files), so a new target is fuzzed in CI without being listed
// anywhere. `go test -fuzz` takes one target per run and instruments and
// links the test binary each time; this builds each package's fuzzing
// binary once (`go test -c -fuzz`) and runs it once per target, in the
// package's directory and with go test's fuzz cache, exactly as
// `go test -fuzz` would. A failing input is written by the fuzzer to the
// package's testdata/fuzz/FuzzX/, where every later `go test` runs it as
// a regression test; the run then fails.
//
// Go 1.26's fuzz coordinator can report a target failed at the very end
// of -fuzztime with only "context deadline exceeded" (go.dev/issue/75804,
// fixed in Go 1.27); such a run, which found and wrote nothing, is run
// again, at most twice.
//
// -fuzztime includes the fuzzer's first pass over the corpus it keeps in
// the Go cache, which grows from run to run: a short run of a slow target
// may spend all of it there (0 execs in the table) and still has run
// every input found before.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fuzz:", err)
		os.Exit(1)
	}
}

// target is one fuzz target: its package's directory (relative to the
// module root, slash-separated) and its name.
type target struct {
	dir, name string
}

// result is what one fuzzing run measured.
type result struct {
	target
	execs    int64
	elapsed  time.Duration
	failed   bool
	interest int64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	root, gocache, err := moduleDirs(ctx)
	if err != nil {
		return err
	}
	all, err := findTargets(root)
	if err != nil {
		return err
	}
	targets := matching(all, o.match)
	if o.list {
		for _, t := range targets {
			fmt.Fprintf(stdout, "./%s %s\n", t.dir, t.name)
		}
		return nil
	}
	if len(targets) == 0 {
		return fmt.Errorf("no fuzz target matches %q", o.match.String())
	}
	bin, err := os.MkdirTemp("", "fleet-fuzz-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)

	start := time.Now()
	f := &fuzzRun{o: o, root: root, gocache: gocache, bin: bin, stderr: stderr, built: map[string]string{}}
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.target(ctx, t); err != nil {
			return err
		}
	}
	printTable(stdout, f.results, o.fuzztime)
	fmt.Fprintf(stderr, "fuzz: %d targets in %s\n", len(f.results), time.Since(start).Round(time.Second))
	if len(f.failures) > 0 {
		return fmt.Errorf("failed (failing inputs are in each package's testdata/fuzz/):\n  %s", strings.Join(f.failures, "\n  "))
	}
	return nil
}

// options are the command's flags.
type options struct {
	fuzztime, minimize time.Duration
	match              *regexp.Regexp
	list, verbose      bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fl := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fuzztime := fl.Duration("fuzztime", 3*time.Second, "how long to fuzz each target")
	match := fl.String("run", "", "fuzz only the targets whose name or package directory matches this regular expression")
	minimize := fl.Duration("minimizetime", time.Second, "how long to minimize each new input (the fuzzer's default, 60s, would take the whole run of a short one)")
	list := fl.Bool("list", false, "list the targets and exit")
	verbose := fl.Bool("v", false, "print the fuzzer's output")
	if err := fl.Parse(args); err != nil {
		return options{}, err
	}
	re, err := regexp.Compile(*match)
	if err != nil {
		return options{}, fmt.Errorf("-run: %w", err)
	}
	return options{fuzztime: *fuzztime, minimize: *minimize, match: re, list: *list, verbose: *verbose}, nil
}

// moduleDirs returns the root of the module the command runs in and the
// go command's build cache.
func moduleDirs(ctx context.Context) (root, gocache string, err error) {
	root, err = goOutput(ctx, "", "env", "GOMOD")
	if err != nil {
		return "", "", err
	}
	if root == "" || root == os.DevNull {
		return "", "", errors.New("not inside a Go module")
	}
	root = filepath.Dir(root)
	gocache, err = goOutput(ctx, root, "env", "GOCACHE")
	if err != nil {
		return "", "", err
	}
	return root, gocache, nil
}

// matching returns the targets whose name or package directory re
// matches.
func matching(all []target, re *regexp.Regexp) []target {
	var targets []target
	for _, t := range all {
		if re.MatchString(t.name) || re.MatchString(t.dir) {
			targets = append(targets, t)
		}
	}
	return targets
}

// fuzzRun fuzzes targets one after the other, building each package's
// fuzzing binary once, and collects their results and failures.
type fuzzRun struct {
	o                  options
	root, gocache, bin string
	stderr             io.Writer

	built    map[string]string // dir → test binary, "" when it did not build
	results  []result
	failures []string
}

// target fuzzes t and reports it; a package that does not build is a
// failure, not an error.
func (f *fuzzRun) target(ctx context.Context, t target) error {
	exe := f.build(ctx, t.dir)
	if exe == "" {
		return nil
	}
	importPath, err := goOutput(ctx, f.root, "list", "./"+t.dir)
	if err != nil {
		return err
	}
	runTarget := func() (result, []byte, error) {
		return fuzz(ctx, exe, filepath.Join(f.root, filepath.FromSlash(t.dir)), filepath.Join(f.gocache, "fuzz", importPath), t, f.o.fuzztime, f.o.minimize)
	}
	r, out, err := runTarget()
	for retry := 0; err == nil && r.failed && deadlineRace(out) && retry < maxDeadlineRetries; retry++ {
		fmt.Fprintf(f.stderr, "fuzz: ./%s %s: Go's fuzz coordinator raced its own -fuzztime deadline (go.dev/issue/75804: nothing found, no input written); running it again\n", t.dir, t.name)
		r, out, err = runTarget()
	}
	if err != nil {
		return err
	}
	f.results = append(f.results, r)
	status := "ok"
	if r.failed {
		status = "FAIL"
		f.failures = append(f.failures, fmt.Sprintf("./%s %s", t.dir, t.name))
	}
	fmt.Fprintf(f.stderr, "fuzz: %-4s ./%s %s: %d execs in %s (%s/s)\n", status, t.dir, t.name, r.execs, r.elapsed.Round(time.Millisecond), rate(r))
	if r.failed || f.o.verbose {
		f.stderr.Write(out)
	}
	return nil
}

// build returns the fuzzing test binary of the package in dir, building
// it the first time; "" when it does not build (a failure).
func (f *fuzzRun) build(ctx context.Context, dir string) string {
	if exe, ok := f.built[dir]; ok {
		return exe
	}
	fmt.Fprintf(f.stderr, "fuzz: building ./%s\n", dir)
	exe := filepath.Join(f.bin, strings.ReplaceAll(dir, "/", "_")+".test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-fuzz=.", "-o", exe, "./"+dir)
	cmd.Dir, cmd.Stdout, cmd.Stderr = f.root, f.stderr, f.stderr
	if err := cmd.Run(); err != nil {
		f.failures = append(f.failures, fmt.Sprintf("./%s: build: %v", dir, err))
		exe = ""
	}
	f.built[dir] = exe
	return exe
}

// fuzz runs one target with the package's test binary, as go test -fuzz
// would, and reads the fuzzer's figures from its output.
func fuzz(ctx context.Context, exe, dir, cacheDir string, t target, d, minimize time.Duration) (result, []byte, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, exe,
		"-test.run=^$", "-test.fuzz=^"+t.name+"$", "-test.fuzztime="+d.String(), "-test.fuzzminimizetime="+minimize.String(),
		"-test.fuzzcachedir="+cacheDir, "-test.paniconexit0", "-test.timeout=0")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	begin := time.Now()
	err := cmd.Run()
	r := result{target: t, elapsed: time.Since(begin)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		r.failed = true
	default:
		return r, out.Bytes(), fmt.Errorf("./%s %s: %w", t.dir, t.name, err)
	}
	r.execs, r.interest = progress(out.Bytes())
	// The fuzzer's own clock: the last progress line's elapsed time
	// would round to whole seconds.
	r.elapsed = min(r.elapsed, d)
	return r, out.Bytes(), nil
}

// maxDeadlineRetries bounds the runs again of a target that hit Go's
// deadline race (deadlineRace).
const maxDeadlineRetries = 2

// deadlineRace reports whether a failed run's output is Go 1.26's fuzz
// coordinator racing its own -fuzztime deadline (go.dev/issue/75804, fixed
// in Go 1.27): at the end of the window the target is reported failed
// with nothing but "context deadline exceeded", no failing input written
// and no panic. A real finding always writes its input
// (testdata/fuzz/FuzzX/), so this is never one.
func deadlineRace(out []byte) bool {
	return bytes.Contains(out, []byte("\n    context deadline exceeded\n")) &&
		!bytes.Contains(out, []byte("Failing input written to")) &&
		!bytes.Contains(out, []byte("panic:"))
}

// progressLine is the fuzzer's progress report:
// "fuzz: elapsed: 3s, execs: 32382 (10792/sec), new interesting: 56 (total: 62)".
var progressLine = regexp.MustCompile(`^fuzz: elapsed: \S+, execs: (\d+) \(\d+/sec\)(?:, new interesting: (\d+))?`)

// progress returns the execs and new interesting inputs of the last
// progress line in out.
func progress(out []byte) (execs, interesting int64) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := progressLine.FindStringSubmatch(sc.Text()); m != nil {
			execs, _ = strconv.ParseInt(m[1], 10, 64)
			interesting, _ = strconv.ParseInt(m[2], 10, 64)
		}
	}
	return execs, interesting
}

func rate(r result) string {
	if r.elapsed <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64(float64(r.execs)/r.elapsed.Seconds()), 10)
}

func printTable(w io.Writer, results []result, d time.Duration) {
	fmt.Fprintf(w, "| Package | Target | Execs in %s | Execs/s | New interesting | Result |\n", d)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|---|")
	for _, r := range results {
		status := "ok"
		if r.failed {
			status = "**FAIL**"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %d | %s |\n", r.dir, r.name, r.execs, rate(r), r.interest, status)
	}
}

// fuzzFunc finds fuzz targets in a test file.
var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)

// findTargets lists the fuzz targets of the module under root, by
// package directory and name.
func findTargets(root string) ([]target, error) {
	var targets []target
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllSubmatch(src, -1) {
			targets = append(targets, target{dir: filepath.ToSlash(rel), name: string(m[1])})
		}
		return nil
	})
	slices.SortFunc(targets, func(a, b target) int {
		return strings.Compare(a.dir+" "+a.name, b.dir+" "+b.name)
	})
	return targets, err
}

// goOutput runs the go command in dir and returns its trimmed output.
func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
