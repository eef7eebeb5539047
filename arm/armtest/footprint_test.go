package armtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
)

const (
	mib = 1 << 20
	// sizeTarget and sizeStretch bound the stripped linux/arm64 agent.
	sizeTarget  = 20 * mib
	sizeStretch = 16 * mib
	// rssTarget bounds the idle armv6 agent's own resident memory.
	rssTarget = 20 * mib

	// guestBase is where qemu-arm-static maps the 32-bit guest's address
	// space (-B), so the agent's own pages can be told from qemu's.
	guestBase  = 0x100_0000_0000
	guestSpace = 1 << 32

	// updateFootprintEnv, set to 1, makes TestFootprint rewrite
	// arm/FOOTPRINT.md with the figures it measured.
	updateFootprintEnv = "FLEET_UPDATE_FOOTPRINT"
)

// TestFootprint measures the stripped binaries' sizes and the idle memory
// of the armv6 agent under qemu-arm-static -cpu arm1176, against the
// targets: arm64 agent ≤ 20 MiB (stretch 16 MiB), idle RSS ≤ 20 MiB. With
// FLEET_UPDATE_FOOTPRINT=1 it writes the figures to arm/FOOTPRINT.md.
//
// The RSS target applies to the agent's pages: qemu's own (its binary, the
// translated-code cache, its heap) are not on a Pi. They are told apart by
// mapping the guest at a fixed address (-B) and summing /proc/PID/smaps
// over the guest's 4 GiB; the qemu process's VmRSS is recorded beside it.
func TestFootprint(t *testing.T) {
	var sizes []sizeFigure
	var rss []rssFigure
	measured := t.Run("size", func(t *testing.T) { sizes = measureSizes(t) })
	for _, sc := range []struct {
		name, scenario string
		connected      bool
	}{
		{"rss-containerd-down", "containerd socket absent (agent retries containerd; MQTT not started)", false},
		{"rss-connected", "connected to containerd and MQTT, no pods", true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			f, ok := measureIdleRSS(t, sc.scenario, sc.connected)
			if ok {
				rss = append(rss, f)
			}
		})
	}
	if os.Getenv(updateFootprintEnv) != "1" {
		t.Logf("%s=1 would write these figures to arm/FOOTPRINT.md", updateFootprintEnv)
		return
	}
	// A failed SIGTERM check does not invalidate the figures.
	if !measured || len(rss) != 2 {
		t.Fatal("not writing arm/FOOTPRINT.md: a measurement failed or missed its target")
	}
	p := filepath.Join(repoRoot, "arm", "FOOTPRINT.md")
	if err := os.WriteFile(p, footprintDoc(sizes, rss), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", p)
}

type sizeFigure struct {
	name  string
	bytes int64
}

func measureSizes(t *testing.T) []sizeFigure {
	var figs []sizeFigure
	for _, tg := range targets {
		for _, cmd := range commands {
			fi, err := os.Stat(binPath(t, cmd, tg))
			if err != nil {
				t.Fatal(err)
			}
			figs = append(figs, sizeFigure{name: fi.Name(), bytes: fi.Size()})
			t.Logf("%-24s %10d bytes  %6.2f MiB", fi.Name(), fi.Size(), float64(fi.Size())/mib)
		}
	}
	fi, err := os.Stat(binPath(t, "fleet-agent", targetByArch(t, "arm64")))
	if err != nil {
		t.Fatal(err)
	}
	switch n := fi.Size(); {
	case n > sizeTarget:
		t.Errorf("linux/arm64 agent is %.2f MiB, target ≤ %d MiB", float64(n)/mib, sizeTarget/mib)
	case n > sizeStretch:
		t.Logf("linux/arm64 agent is %.2f MiB: within the %d MiB target, %.2f MiB over the %d MiB stretch goal",
			float64(n)/mib, sizeTarget/mib, float64(n-sizeStretch)/mib, sizeStretch/mib)
	default:
		t.Logf("linux/arm64 agent is %.2f MiB: within the %d MiB stretch goal", float64(n)/mib, sizeStretch/mib)
	}
	return figs
}

type rssFigure struct {
	scenario string
	sample   rssSample
	settled  time.Duration // from readiness to a stable reading
}

type rssSample struct {
	vmRSS     int64 // the qemu process, bytes
	guest     int64 // resident pages in the guest's address space
	guestAnon int64 // of which anonymous (heap, stacks, data)
}

// measureIdleRSS starts the armv6 agent under qemu -cpu arm1176 with a
// temporary state directory and waits until it is idle: with connected,
// against a private containerd and an embedded broker until it announces
// itself online; without, against a containerd socket that does not exist
// until it logs that it retries. Then it polls its memory until the
// reading is stable, and finally stops the agent with SIGTERM, which must
// end it with status 0 (subtest "sigterm"). ok reports a figure within
// the target.
func measureIdleRSS(t *testing.T, scenario string, connected bool) (fig rssFigure, ok bool) {
	tg := targetByArch(t, "armv6")
	bin := binPath(t, "fleet-agent", tg)
	q := lookTool(t, tg.qemu)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const device, token = "pi-footprint", "footprint-token"
	stateDir := t.TempDir()
	socket := filepath.Join(t.TempDir(), "no-containerd.sock")
	brokerURL := "tcp://127.0.0.1:9" // discard port; unused while containerd is down
	var online chan struct{}
	if connected {
		if err := containerdtest.Available(); err != nil {
			t.Fatalf("%v: the connected figure needs a private containerd", err)
		}
		d, err := containerdtest.StartDaemon(ctx, "")
		if err != nil {
			t.Fatalf("start containerd: %v", err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("stop containerd: %v", err)
			}
		})
		socket = d.Socket()
		var addr string
		addr, online = startBroker(t, device, token)
		brokerURL = "tcp://" + addr
	}

	logs := newLogWatcher()
	cmd := exec.Command(q, "-cpu", tg.cpu, "-B", fmt.Sprintf("%#x", guestBase), bin,
		"--device", device, "--token", token, "--broker", brokerURL,
		"--state-dir", stateDir, "--containerd-socket", socket, "--namespace", "fleet-footprint")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	// Ready.
	if connected {
		select {
		case <-online:
		case err := <-exited:
			stopped = true
			t.Fatalf("agent exited before going online: %v\n%s", err, logs)
		case <-ctx.Done():
			t.Fatalf("agent not online: %v\n%s", ctx.Err(), logs)
		}
	} else if err := logs.waitFor(ctx, exited, "containerd not reachable; retrying"); err != nil {
		stopped = true
		t.Fatalf("%v\n%s", err, logs)
	}
	ready := time.Now()

	s, err := awaitStableRSS(ctx, cmd.Process.Pid, exited)
	if err != nil {
		stopped = true
		t.Fatalf("%v\nagent log:\n%s", err, logs)
	}
	fig = rssFigure{scenario: scenario, sample: s, settled: time.Since(ready).Round(100 * time.Millisecond)}
	t.Logf("armv6 agent, %s: agent RSS %.1f MiB (anonymous %.1f MiB); qemu process VmRSS %.1f MiB; stable after %v",
		scenario, float64(s.guest)/mib, float64(s.guestAnon)/mib, float64(s.vmRSS)/mib, fig.settled)
	ok = s.guest <= rssTarget
	if !ok {
		t.Errorf("idle armv6 agent RSS %.1f MiB, target ≤ %d MiB", float64(s.guest)/mib, rssTarget/mib)
	}

	// SIGTERM, as systemd stops it: status 0, or systemd marks the unit
	// failed on every stop.
	t.Run("sigterm", func(t *testing.T) {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			stopped = true
			if err != nil {
				t.Errorf("agent exit on SIGTERM: %v, want status 0\n%s", err, logs)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent still running 30s after SIGTERM\n%s", logs)
		}
	})
	return fig, ok
}

// startBroker runs Fleet's embedded broker on a loopback port with one
// device account and returns its address and a channel closed when the
// device announces itself online.
func startBroker(t *testing.T, device, token string) (string, chan struct{}) {
	t.Helper()
	auth := broker.NewStaticAuth()
	auth.Set(broker.Identity{Name: device, Role: broker.RoleDevice}, token)
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	online := make(chan struct{})
	var once sync.Once
	unsub, err := b.Subscribe(schema.Topics{}.Device(device, schema.TopicOnline), func(_ string, payload []byte) {
		if string(payload) == schema.Online {
			once.Do(func() { close(online) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return b.Addr().String(), online
}

// awaitStableRSS polls the process's memory until the agent's resident
// size has varied by at most 2 % (and 512 KiB) over the last 6 seconds,
// and returns the last reading.
func awaitStableRSS(ctx context.Context, pid int, exited <-chan error) (rssSample, error) {
	const every, window = 500 * time.Millisecond, 12
	tick := time.NewTicker(every)
	defer tick.Stop()
	var series []rssSample
	for {
		s, err := readRSS(pid)
		if err != nil {
			return s, err
		}
		series = append(series, s)
		if n := len(series); n >= window {
			lo, hi := series[n-window].guest, series[n-window].guest
			for _, x := range series[n-window:] {
				lo, hi = min(lo, x.guest), max(hi, x.guest)
			}
			if hi-lo <= 512<<10 && float64(hi-lo) <= 0.02*float64(hi) {
				return s, nil
			}
		}
		select {
		case err := <-exited:
			return s, fmt.Errorf("agent exited while being measured: %v", err)
		case <-ctx.Done():
			var kib []string
			for _, x := range series {
				kib = append(kib, strconv.FormatInt(x.guest>>10, 10))
			}
			return s, fmt.Errorf("agent RSS did not settle (%v); guest RSS KiB every %v: %s", ctx.Err(), every, strings.Join(kib, " "))
		case <-tick.C:
		}
	}
}

// readRSS reads VmRSS from /proc/PID/status and sums Rss and Anonymous of
// the mappings in the guest's address space from /proc/PID/smaps.
func readRSS(pid int) (rssSample, error) {
	var s rssSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			s.vmRSS, err = parseKB(v)
			if err != nil {
				return s, err
			}
		}
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return s, err
	}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		if rng, _, ok := strings.Cut(line, " "); ok && strings.Contains(rng, "-") && !strings.HasSuffix(rng, ":") {
			lo, _, _ := strings.Cut(rng, "-")
			start, err := strconv.ParseUint(lo, 16, 64)
			if err != nil {
				return s, fmt.Errorf("smaps line %q: %w", line, err)
			}
			in = start >= guestBase && start < guestBase+guestSpace
			continue
		}
		if !in {
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok {
			n, err := parseKB(v)
			if err != nil {
				return s, err
			}
			s.guest += n
		} else if v, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			n, err := parseKB(v)
			if err != nil {
				return s, err
			}
			s.guestAnon += n
		}
	}
	if s.vmRSS == 0 || s.guest == 0 {
		return s, errors.New("no VmRSS, or no resident pages at the guest base: is qemu honouring -B?")
	}
	return s, sc.Err()
}

// parseKB parses "   1234 kB" into bytes.
func parseKB(v string) (int64, error) {
	f := strings.Fields(v)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("unexpected /proc value %q", v)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	return n << 10, err
}

// logWatcher collects a process's output and wakes waiters on each write.
type logWatcher struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{}
}

func newLogWatcher() *logWatcher { return &logWatcher{notify: make(chan struct{}, 1)} }

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() < 1<<20 {
		w.buf.Write(p)
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *logWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return tail(w.buf.String(), 60)
}

func (w *logWatcher) contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Contains(w.buf.Bytes(), []byte(s))
}

// waitFor waits until the output contains s.
func (w *logWatcher) waitFor(ctx context.Context, exited <-chan error, s string) error {
	for !w.contains(s) {
		select {
		case <-w.notify:
		case err := <-exited:
			return fmt.Errorf("exited (%v) before logging %q", err, s)
		case <-ctx.Done():
			return fmt.Errorf("no %q in the log: %w", s, ctx.Err())
		}
	}
	return nil
}

var _ io.Writer = (*logWatcher)(nil)

func footprintDoc(sizes []sizeFigure, rss []rssFigure) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Fleet on ARM: footprint

Measured by `+"`go test ./arm/armtest -run TestFootprint`"+`
(%s=1 rewrites this file). Binaries built by arm/build.sh
with %s (stripped, -trimpath, CGO_ENABLED=0), version %s.

## Binary sizes

| binary | bytes | MiB |
|---|---:|---:|
`, updateFootprintEnv, runtime.Version(), testVersion)
	for _, s := range sizes {
		fmt.Fprintf(&b, "| %s | %d | %.2f |\n", s.name, s.bytes, float64(s.bytes)/mib)
	}
	fmt.Fprintf(&b, `
Target for fleet-agent-linux-arm64: ≤ %d MiB (stretch %d MiB). The agent
links the containerd client (gRPC, protobuf, OCI specs), paho MQTT and
cobra; the fleet CLI links none of them.

## Idle memory of the armv6 agent

fleet-agent-linux-armv6 under `+"`qemu-arm-static -cpu arm1176`"+` (the Pi Zero's
CPU), empty state directory, after the reading is stable for 6 s. "Agent
RSS" is the resident memory in the emulated 32-bit address space, which is
what the agent would use on a Pi (anonymous = heap, stacks, data; the rest
is the binary's pages, shared and reclaimable). "qemu VmRSS" adds the
emulator itself: its binary, heap and translated-code cache. Target: agent
RSS ≤ %d MiB.

| scenario | agent RSS MiB | of which anonymous MiB | qemu VmRSS MiB |
|---|---:|---:|---:|
`, sizeTarget/mib, sizeStretch/mib, rssTarget/mib)
	for _, r := range rss {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f |\n", r.scenario, float64(r.sample.guest)/mib,
			float64(r.sample.guestAnon)/mib, float64(r.sample.vmRSS)/mib)
	}
	// The binary's pages: how much of the armv6 agent is resident in the
	// last scenario, and the bound a Pi gives (anonymous + binary size).
	var binSize int64
	for _, sz := range sizes {
		if sz.name == "fleet-agent-linux-armv6" {
			binSize = sz.bytes
		}
	}
	var fileRSS, anon float64
	if len(rss) > 0 {
		last := rss[len(rss)-1].sample
		fileRSS, anon = float64(last.guest-last.guestAnon)/mib, float64(last.guestAnon)/mib
	}
	fmt.Fprintf(&b, `
The anonymous part is what the agent really costs. The rest is the
binary's own pages: under qemu about %.0f MiB of the %.0f MiB armv6 binary
are resident; on a Pi it is bounded by the binary's size, so the agent RSS
stays at or below about anonymous + binary size (≈ %.0f MiB) however the
kernel faults the binary in, and the page cache gives those pages back
under memory pressure.

Without containerd the agent stays up and retries the containerd socket
with capped, jittered backoff; it connects to MQTT only once containerd
answers, so a device whose containerd is down does not show as online.
`, fileRSS, float64(binSize)/mib, anon+float64(binSize)/mib)
	return b.Bytes()
}
