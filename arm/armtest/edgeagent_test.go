package armtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// suitePackages are the packages whose tests run on 32-bit ARM.
const suitePackages = "./edgeagent/..."

// TestEdgeagentSuiteUnderQemu cross-compiles the test binary of every
// package under edgeagent/ for armv7 and armv6 and runs it under
// qemu-arm-static on a Cortex-A7 and an ARM1176 (no race detector exists
// for GOARCH=arm). 32-bit ARM catches what amd64 cannot: misaligned 64-bit
// atomics, int overflow at 32 bits, ARMv7-only instructions.
//
// Tests that need containerd do not run here: containerd and its shims run
// natively while the test binary is emulated, so the containers they start
// would be amd64 images built by a test compiled for arm. Each such test
// goes through containerdtest.Require, so the binaries run with a PATH
// that holds no containerd and without FLEET_REQUIRE_CONTAINERD, and those
// tests skip (they are listed in the log); everything else in those
// packages, edgeagent/runtime/containerd's unit tests included, runs. The
// containerd tests run natively (amd64, -race) in `make test`, and arm64
// containers in containerd come with the end-to-end harness (EnsureBinfmt).
func TestEdgeagentSuiteUnderQemu(t *testing.T) {
	for _, arch := range []string{"armv7", "armv6"} {
		tg := targetByArch(t, arch)
		t.Run(arch, func(t *testing.T) {
			q := lookTool(t, tg.qemu)
			pkgs := testPackages(t, tg)
			if len(pkgs) == 0 {
				t.Fatalf("no packages with tests in %s", suitePackages)
			}
			bins := t.TempDir()
			compileTests(t, tg, bins, pkgs)
			noContainerd := t.TempDir() // the PATH of the test binaries
			for _, p := range pkgs {
				rel := strings.TrimPrefix(p.importPath, "github.com/fleetmq/fleet/")
				t.Run(rel, func(t *testing.T) {
					runTestBinary(t, q, tg, filepath.Join(bins, path.Base(p.importPath)+".test"), p.dir, noContainerd)
				})
			}
		})
	}
}

type testPackage struct {
	importPath, dir string
}

// testPackages lists the packages of suitePackages that have test files,
// as the go command sees them for tg.
func testPackages(t *testing.T, tg target) []testPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}", suitePackages)
	cmd.Dir = repoRoot
	cmd.Env = crossEnv(tg)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", suitePackages, err, stderrOf(err))
	}
	var pkgs []testPackage
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		if f[2] == "0" && f[3] == "0" {
			t.Logf("%s: no test files", f[0])
			continue
		}
		pkgs = append(pkgs, testPackage{importPath: f[0], dir: f[1]})
	}
	return pkgs
}

func compileTests(t *testing.T, tg target, dir string, pkgs []testPackage) {
	t.Helper()
	args := []string{"test", "-c", "-o", dir + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, p.importPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = crossEnv(tg)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c for %s (GOARM=%s): %v\n%s", tg.arch, tg.goarm, err, out)
	}
	t.Logf("compiled %d test binaries for %s in %v", len(pkgs), tg.arch, time.Since(start).Round(time.Second))
}

var skipLine = regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+)`)

func runTestBinary(t *testing.T, qemu string, tg target, bin, pkgDir, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-cpu", tg.cpu, bin, "-test.count=1", "-test.v", "-test.timeout=8m")
	cmd.Dir = pkgDir // tests read testdata/ relative to their package
	cmd.Env = append(envWithout("PATH", "FLEET_REQUIRE_CONTAINERD"), "PATH="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start).Round(10 * time.Millisecond)
	if err != nil {
		t.Fatalf("%s -cpu %s %s: %v after %v\n%s", filepath.Base(qemu), tg.cpu, filepath.Base(bin), err, elapsed, tail(out.String(), 200))
	}
	passed := bytes.Count(out.Bytes(), []byte("--- PASS: "))
	if passed == 0 {
		t.Fatalf("%s ran no passing test:\n%s", filepath.Base(bin), tail(out.String(), 50))
	}
	var skipped []string
	for _, m := range skipLine.FindAllStringSubmatch(out.String(), -1) {
		skipped = append(skipped, m[1])
	}
	t.Logf("%s -cpu %s: %d passed in %v", filepath.Base(bin), tg.cpu, passed, elapsed)
	if len(skipped) > 0 {
		t.Logf("skipped (need containerd): %s", strings.Join(skipped, ", "))
	}
}

// crossEnv is the environment of a go command building for tg.
func crossEnv(tg target) []string {
	return append(envWithout("GOOS", "GOARCH", "GOARM", "CGO_ENABLED"),
		"GOOS=linux", "GOARCH="+tg.goarch, "GOARM="+tg.goarm, "CGO_ENABLED=0")
}

// envWithout is os.Environ without the named variables.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

func stderrOf(err error) []byte {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.Stderr
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = append([]string{"... (" + strconv.Itoa(len(lines)-n) + " lines before)"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
