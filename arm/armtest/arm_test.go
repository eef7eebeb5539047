package armtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/test/sysdeps"
)

// testVersion is stamped into the binaries the tests build; fixed, so the
// Go build cache is reused between runs.
const testVersion = "v0.0.0-armtest"

// target is one Raspberry Pi build of arm/build.sh.
type target struct {
	arch   string // suffix in dist/: arm64, armv7, armv6
	goarch string
	goarm  string // GOARM for goarch arm
	qemu   string // qemu-user-static binary
	cpu    string // qemu -cpu model: the oldest CPU the build must run on
	elf    elf.Machine
}

var targets = []target{
	{arch: "arm64", goarch: "arm64", qemu: "qemu-aarch64-static", cpu: "cortex-a53", elf: elf.EM_AARCH64},
	{arch: "armv7", goarch: "arm", goarm: "7", qemu: "qemu-arm-static", cpu: "cortex-a7", elf: elf.EM_ARM},
	{arch: "armv6", goarch: "arm", goarm: "6", qemu: "qemu-arm-static", cpu: "arm1176", elf: elf.EM_ARM},
}

// commands are the binaries arm/build.sh builds for every target.
var commands = []string{"fleet-agent", "fleet"}

var (
	repoRoot string // absolute path of the repository
	tmpRoot  string // removed after the tests

	distOnce sync.Once
	distDir  string
	distErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here cross-builds the release binaries or runs them
		// under qemu: integration tests, which `make test` runs.
		fmt.Println("armtest: skipped under -short (cross-builds and qemu; make test runs them)")
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err == nil {
		_, err = os.Stat(filepath.Join(root, "go.mod"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "armtest: repository root:", err)
		return 1
	}
	repoRoot = root
	tmpRoot, err = os.MkdirTemp("", "fleet-armtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "armtest:", err)
		return 1
	}
	defer os.RemoveAll(tmpRoot)
	return m.Run()
}

// dist runs arm/build.sh once for the whole package, with DIST pointing at
// a temporary directory, and returns that directory.
func dist(t testing.TB) string {
	t.Helper()
	distOnce.Do(func() {
		distDir = filepath.Join(tmpRoot, "dist")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "arm", "build.sh"))
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "DIST="+distDir, "VERSION="+testVersion)
		out, err := cmd.CombinedOutput()
		if err != nil {
			distErr = fmt.Errorf("arm/build.sh: %w\n%s", err, out)
			return
		}
		distLog = string(out)
	})
	if distErr != nil {
		t.Fatal(distErr)
	}
	return distDir
}

var distLog string

// binPath is the dist/ file of cmd for tg.
func binPath(t testing.TB, cmd string, tg target) string {
	return filepath.Join(dist(t), cmd+"-linux-"+tg.arch)
}

func targetByArch(t testing.TB, arch string) target {
	t.Helper()
	for _, tg := range targets {
		if tg.arch == arch {
			return tg
		}
	}
	t.Fatalf("no target %s", arch)
	return target{}
}

// lookTool finds a tool the tests cannot do without, or fails t with the
// package that provides it.
func lookTool(t testing.TB, name string) string {
	t.Helper()
	return sysdeps.Require(t, name)
}

// qemuCmd returns a command that runs bin under tg's qemu and CPU model.
func qemuCmd(ctx context.Context, t testing.TB, tg target, bin string, args ...string) *exec.Cmd {
	t.Helper()
	q := lookTool(t, tg.qemu)
	return exec.CommandContext(ctx, q, append([]string{"-cpu", tg.cpu, bin}, args...)...)
}

// TestBuildScript checks what arm/build.sh produced: every binary, static,
// stripped, for the right machine, built with the flags and GOARM it
// promises, and a SHA256SUMS that matches.
func TestBuildScript(t *testing.T) {
	d := dist(t)
	t.Logf("arm/build.sh output:\n%s", distLog)

	sums := readSums(t, filepath.Join(d, "SHA256SUMS"))
	if len(sums) != len(targets)*len(commands) {
		t.Errorf("SHA256SUMS has %d entries, want %d: %v", len(sums), len(targets)*len(commands), sums)
	}
	for _, tg := range targets {
		for _, cmd := range commands {
			name := cmd + "-linux-" + tg.arch
			t.Run(name, func(t *testing.T) {
				p := filepath.Join(d, name)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(b)
				if got, want := sums[name], hex.EncodeToString(sum[:]); got != want {
					t.Errorf("SHA256SUMS says %q, file hashes to %s", got, want)
				}
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
					t.Errorf("not executable: %v %v", fi.Mode(), err)
				}
				checkELF(t, p, tg)
				checkBuildInfo(t, p, tg)
				// Function names stay in a stripped binary (pclntab).
				if bytes.Contains(b, []byte("golang.org/x/net/trace.")) || bytes.Contains(b, []byte("html/template.")) {
					t.Error("links golang.org/x/net/trace or html/template: built without -tags grpcnotrace, or gRPC older than 1.62?")
				}
			})
		}
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sha256sum text mode: 64 hex digits, two spaces, the name.
		hash, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(hash) != 64 || strings.Contains(name, "/") {
			t.Errorf("SHA256SUMS line %q: want '<sha256>  <relative name>'", sc.Text())
			continue
		}
		sums[name] = hash
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func checkELF(t *testing.T, path string, tg target) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != tg.elf {
		t.Errorf("ELF machine %v, want %v", f.Machine, tg.elf)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("dynamically linked (%v): want a static binary (CGO_ENABLED=0)", p.Type)
		}
	}
	for _, s := range f.Sections {
		switch {
		case s.Name == ".symtab":
			t.Error("has a .symtab: want a stripped binary (-ldflags -s)")
		case strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_"):
			t.Errorf("has DWARF section %s: want -ldflags -w", s.Name)
		}
	}
}

func checkBuildInfo(t *testing.T, path string, tg target) {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	// grpcnotrace keeps golang.org/x/net/trace, and with it the linker's
	// dead-method elimination, out of the agent: 3.7 MiB (see build.sh).
	want := map[string]string{"GOOS": "linux", "GOARCH": tg.goarch, "CGO_ENABLED": "0", "-trimpath": "true", "-tags": "grpcnotrace"}
	if tg.goarm != "" {
		want["GOARM"] = tg.goarm
	}
	for k, v := range want {
		if settings[k] != v {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], v)
		}
	}
	// With -trimpath the go command does not record -ldflags; -s and -w
	// are checked on the ELF sections, the version by running the binary.
	if _, ok := settings["-ldflags"]; ok {
		t.Errorf("-ldflags recorded (%q): built without -trimpath?", settings["-ldflags"])
	}
}

// TestVersionUnderQemu runs every binary's version command under qemu-user
// on the oldest CPU of its target (Pi Zero's ARM1176 for armv6, Cortex-A7
// for armv7, Cortex-A53 for arm64).
func TestVersionUnderQemu(t *testing.T) {
	for _, tg := range targets {
		for _, cmd := range commands {
			t.Run(cmd+"-"+tg.arch, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, err := qemuCmd(ctx, t, tg, binPath(t, cmd, tg), "version").CombinedOutput()
				if err != nil {
					t.Fatalf("%s version under %s -cpu %s: %v\n%s", cmd, tg.qemu, tg.cpu, err, out)
				}
				s := string(out)
				platform := "linux/" + tg.goarch
				if !strings.HasPrefix(s, cmd+" "+testVersion+" ") || !strings.Contains(s, platform) ||
					tg.goarch == "arm" && strings.Contains(s, "linux/arm64") {
					t.Errorf("output %q: want %q, version %s and platform %s", s, cmd, testVersion, platform)
				}
				t.Logf("%s -cpu %s: %s", tg.qemu, tg.cpu, strings.TrimSpace(s))
			})
		}
	}
}

// TestARMv7BuildTrapsOnARM1176 is the control for the ARMv6 runs: the ARMv7
// build must die on the Pi Zero's CPU model, or running under
// "-cpu arm1176" would prove nothing.
func TestARMv7BuildTrapsOnARM1176(t *testing.T) {
	v7 := targetByArch(t, "armv7")
	onV6 := v7
	onV6.cpu = targetByArch(t, "armv6").cpu
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := qemuCmd(ctx, t, onV6, binPath(t, "fleet-agent", v7), "version").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("armv7 agent on -cpu %s: err %v, want it to die of SIGILL\n%s", onV6.cpu, err, out)
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if !(ws.Signaled() && ws.Signal() == syscall.SIGILL) && !bytes.Contains(out, []byte("Illegal instruction")) {
		t.Fatalf("armv7 agent on -cpu %s: %v, want SIGILL\n%s", onV6.cpu, err, out)
	}
	t.Logf("armv7 agent on -cpu %s: %v (%s)", onV6.cpu, err, bytes.TrimSpace(out))
}
