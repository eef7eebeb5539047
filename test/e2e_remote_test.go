package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/ptytest"
	"github.com/fleetmq/fleet/test/testimage"
)

// chattyScript prints a numbered line five times a second, forever.
const chattyScript = `i=0; while true; do i=$((i+1)); echo "line $i"; sleep 0.2; done`

// remoteManifest is the e2e-remote workload: chatty on every device
// (labelled e2e=remote; idx is the device number), with a memory limit for fleet top, and on dev-2
// only a container that crashes at once, again and again, after saying
// why.
func remoteManifest(image string) string {
	return `apiVersion: fleet/v1
kind: Deployment
metadata: {name: chatty}
spec:
  selector: {matchLabels: {e2e: remote}}
  template:
    spec:
      containers:
      - name: main
        image: ` + image + `
        command: [/bin/sh, -c, '` + chattyScript + `']
        resources: {limits: {memory: 48Mi}}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: crasher}
spec:
  selector: {matchLabels: {idx: "2"}}
  template:
    spec:
      containers:
      - name: app
        image: ` + image + `
        # The second before the exit: containerd's shim closes a log file
        # when stdout ends, so stderr written at the very instant of the
        # exit can be lost (containerd#3118; see the README).
        command: [/bin/sh, -c, 'echo "starting sensor loop"; echo "fatal: sensor /dev/i2c-1 missing" >&2; sleep 1; exit 3']
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: oneshot}
spec:
  selector: {matchLabels: {idx: "1"}}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: job
        image: ` + image + `
        command: [/bin/sh, -c, 'echo done']
`
}

// TestE2ERemoteOps: a real hub and three real agents on containerd, each
// behind its own proxy. Through the devices' MQTT sessions only:
// fleet logs (tail, follow, --previous from a crash report once the device
// is offline, -l over three devices), fleet exec (output and exit codes,
// -it through a pseudo-terminal with a resize), fleet top against the
// container's cgroup, events made while a device was offline delivered in
// order and once, and bad input that leaves nothing behind.
func TestE2ERemoteOps(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 3, Shell: true, Proxy: true, Labels: func(i int) map[string]string {
		return map[string]string{"e2e": "remote", "idx": strconv.Itoa(i + 1)}
	}})
	f.Apply(t, remoteManifest(f.ShellImage))
	f.AwaitRollout(t, "chatty", 3, e2eConverge)
	baseGoroutines := hubGoroutines(t, f)

	t.Run("logs_tail", func(t *testing.T) {
		awaitf(t, 30*time.Second, func() bool {
			out, _, err := f.RunCLI(t, "", "logs", "dev-1/chatty", "--tail", "3")
			return err == nil && len(consecutiveLines(out)) == 3
		}, "fleet logs dev-1/chatty --tail 3: three consecutive lines")
		out := f.CLI(t, "logs", "dev-1/chatty", "-c", "main", "--tail", "2", "--timestamps")
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			ts, rest, _ := strings.Cut(l, " ")
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasPrefix(rest, "line ") {
				t.Errorf("--timestamps line %q: want RFC 3339 time, space, the line", l)
			}
		}
	})

	t.Run("logs_follow_shows_new_lines_within_a_second", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		lines, wait := followCLI(ctx, t, f, "logs", "dev-1/chatty", "-f", "--tail", "1")
		<-lines // the stream is open
		var lat []time.Duration
		for i := range 3 {
			mark := fmt.Sprintf("MARK-%d-%s", i, randomHex(t, 4))
			// Written into the container's own stdout, which is its log.
			f.CLI(t, "exec", "dev-1/chatty", "--", "/bin/sh", "-c", "echo "+mark+" >> /proc/1/fd/1")
			sent := time.Now()
			if !awaitLine(lines, mark, 20*time.Second) {
				t.Fatalf("%s not followed within 20 s", mark)
			}
			lat = append(lat, time.Since(sent))
		}
		slices.Sort(lat)
		t.Logf("follow latency (exec returned → line on the CLI's stdout): %v", lat)
		if lat[1] > time.Second {
			t.Errorf("median follow latency %v, want ≤ 1 s", lat[1])
		}

		// A brief reconnect of the device: the same stream goes on, with
		// the lines written while it was cut off.
		c := f.AwaitContainerRunning(t, "dev-1", "chatty")
		p := f.Agent(t, "dev-1").Proxy
		p.Partition()
		f.AwaitDevices(t, time.Minute, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, "dev-1")
		gap := "GAP-" + randomHex(t, 4)
		// Written where the container's stdout points (its log), appending
		// as the container does.
		out, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", c.PID), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = out.WriteString(gap + "\n")
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			t.Fatalf("write into the container's stdout: %v", err)
		}
		p.Heal()
		if !awaitLine(lines, gap, time.Minute) {
			t.Fatalf("the line written while dev-1 was cut off never came through the same fleet logs -f")
		}
		f.AwaitDevices(t, time.Minute, "online", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, "dev-1")
		after := "AFTER-" + randomHex(t, 4)
		f.CLI(t, "exec", "dev-1/chatty", "--", "/bin/sh", "-c", "echo "+after+" >> /proc/1/fd/1")
		if !awaitLine(lines, after, 20*time.Second) {
			t.Fatalf("%s not followed after the reconnect", after)
		}
		cancel()
		if err := wait(); err != nil {
			t.Errorf("fleet logs -f after Ctrl-C: %v", err)
		}
	})

	t.Run("logs_selector_prefixes_each_device", func(t *testing.T) {
		out := f.CLI(t, "logs", "deployment/chatty", "-l", "e2e=remote", "--tail", "2")
		seen := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			// "line N", or one of the marks the follow test wrote.
			m := regexp.MustCompile(`^\[(dev-\d)/chatty/main\] (line \d+|[A-Z]+-[0-9a-f-]+)$`).FindStringSubmatch(l)
			if m == nil {
				t.Errorf("line %q: want [DEVICE/chatty/main] line N (or a mark)", l)
				continue
			}
			seen[m[1]]++
		}
		if seen["dev-1"] != 2 || seen["dev-2"] != 2 || seen["dev-3"] != 2 {
			t.Errorf("lines per device %v, want 2 from each of dev-1..3:\n%s", seen, out)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out := f.CLI(t, "exec", "dev-1/chatty", "--", "cat", "/etc/hostname")
		if out != testimage.ShellHostname+"\n" {
			t.Errorf("exec cat /etc/hostname = %q", out)
		}
		stdout, stderr, err := f.RunCLI(t, "", "exec", "dev-1/chatty", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
		if exitCode(err) != 3 || stdout != "out\n" || !strings.Contains(stderr, "err\n") {
			t.Errorf("exec exit 3: code %d, stdout %q, stderr %q", exitCode(err), stdout, stderr)
		}
		_, stderr, err = f.RunCLI(t, "", "exec", "dev-1/chatty", "--", "cat", "/no/such/file")
		if exitCode(err) != 1 || !strings.Contains(stderr, "/no/such/file") {
			t.Errorf("exec cat of a missing file: code %d, stderr %q", exitCode(err), stderr)
		}
		stdout, _, err = f.RunCLI(t, "piped input\n", "exec", "-i", "dev-1/chatty", "--", "cat")
		if err != nil || stdout != "piped input\n" {
			t.Errorf("exec -i cat: %q, %v", stdout, err)
		}
	})

	t.Run("exec_it_through_a_pty", func(t *testing.T) {
		execInteractive(t, f)
	})

	t.Run("top_matches_the_cgroup", func(t *testing.T) {
		topMatchesCgroup(t, f)
	})

	t.Run("previous_log_from_a_crash_report_when_offline", func(t *testing.T) {
		// The hub holds dev-2's crash report once an event carried it.
		awaitf(t, e2eConverge, func() bool {
			code, body, err := f.Request(t.Context(), http.MethodGet, "/v1/devices/dev-2/crashreports", nil)
			return err == nil && code == http.StatusOK && strings.Contains(string(body), "fatal: sensor /dev/i2c-1 missing")
		}, "dev-2's crash report at the hub")
		out := f.CLI(t, "logs", "dev-2/crasher", "--previous")
		if !strings.Contains(out, "fatal: sensor /dev/i2c-1 missing") {
			t.Errorf("logs --previous while online:\n%s", out)
		}
		f.Agent(t, "dev-2").Proxy.Partition()
		f.AwaitDevices(t, time.Minute, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, "dev-2")
		stdout, stderr, err := f.RunCLI(t, "", "logs", "dev-2/crasher", "--previous")
		if err != nil || !strings.Contains(stdout, "starting sensor loop") || !strings.Contains(stdout, "fatal: sensor /dev/i2c-1 missing") ||
			!strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "offline") {
			t.Errorf("logs --previous of an offline device: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		desc := f.CLI(t, "describe", "pod", "dev-2/crasher")
		if !strings.Contains(desc, "fatal: sensor /dev/i2c-1 missing") || !strings.Contains(desc, "exited 3") {
			t.Errorf("describe pod of the offline device shows no crash:\n%s", desc)
		}
		// The live log of an offline device: the crash report, or a
		// clear message; never a hang.
		start := time.Now()
		_, stderr, err = f.RunCLI(t, "", "logs", "dev-2/chatty")
		if err == nil || !strings.Contains(stderr, "offline") || time.Since(start) > 30*time.Second {
			t.Errorf("logs of an offline device without a crash report: %v after %v, stderr %q", err, time.Since(start), stderr)
		}
		f.Agent(t, "dev-2").Proxy.Heal()
		f.AwaitDevices(t, time.Minute, "online", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, "dev-2")
	})

	t.Run("offline_events_arrive_in_order_once", func(t *testing.T) {
		offlineEvents(t, f)
	})

	t.Run("bad_input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"logs", "dev-1/nope"}, "nope"},
			{[]string{"logs", "dev-1/chatty", "-c", "nope"}, "nope"},
			{[]string{"logs", "ghost/chatty"}, "ghost"},
			{[]string{"exec", "ghost/chatty", "--", "true"}, "ghost"},
			{[]string{"exec", "dev-1/oneshot", "--", "true"}, "not running"},
			{[]string{"exec", "dev-1/chatty", "--", "/no/such/binary"}, "/no/such/binary"},
		} {
			start := time.Now()
			_, stderr, err := f.RunCLI(t, "", tc.args...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("fleet %s: %v, stderr %q; want an error naming %q", strings.Join(tc.args, " "), err, stderr, tc.want)
			}
			t.Logf("fleet %s: %v", strings.Join(tc.args, " "), time.Since(start).Round(time.Millisecond))
		}
		// Nothing stuck: the hub's goroutines go back to where they were
		// (within a few of the HTTP server's idle connections).
		awaitf(t, 30*time.Second, func() bool { return hubGoroutines(t, f) <= baseGoroutines+5 }, "hub goroutines back to %d (now %d)", baseGoroutines, hubGoroutines(t, f))
		var open float64
		awaitf(t, 30*time.Second, func() bool {
			open = hubMetric(t, f, "fleet_remote_open_streams")
			return open == 0
		}, "fleet_remote_open_streams back to 0 (now %v)", open)
	})
}

// consecutiveLines returns the "line N" lines of out if their numbers
// follow each other, nil otherwise.
func consecutiveLines(out string) []int {
	var ns []int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		n, err := strconv.Atoi(strings.TrimPrefix(l, "line "))
		if err != nil {
			return nil
		}
		if len(ns) > 0 && n != ns[len(ns)-1]+1 {
			return nil
		}
		ns = append(ns, n)
	}
	return ns
}

// followCLI starts the fleet CLI and sends every line of its stdout on the
// returned channel; wait waits for it to end after ctx was cancelled
// (SIGINT, as Ctrl-C) and returns its exit error, if any.
func followCLI(ctx context.Context, t *testing.T, f *Fleet, args ...string) (<-chan string, func() error) {
	t.Helper()
	cmd := exec.Command(f.cli, args...)
	cmd.Env = append(cleanEnv(f.cliHome), "FLEET_CONFIG="+f.Hub.AdminConfig())
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		_ = cmd.Process.Signal(os.Interrupt)
	}()
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return lines, func() error {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%w; stderr: %s", err, stderr.String())
			}
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("fleet %s did not end within 30 s of SIGINT", strings.Join(args, " "))
		}
	}
}

// awaitLine reads lines until one contains s.
func awaitLine(lines <-chan string, s string, within time.Duration) bool {
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return false
			}
			if strings.Contains(l, s) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// exitCode is the exit code of a finished command's error (0 for nil,
// -1 if it did not exit).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// execInteractive drives `fleet exec -it … -- sh` through a pseudo-terminal:
// the shell sees the terminal's size, and its new size after a resize;
// its exit code is fleet's.
func execInteractive(t *testing.T, f *Fleet) {
	master, slave := ptytest.Open(t)
	ptytest.SetSize(t, slave, 80, 24)
	cmd := exec.Command(f.cli, "exec", "-it", "dev-1/chatty", "--", "/bin/sh")
	cmd.Env = append(cleanEnv(f.cliHome), "FLEET_CONFIG="+f.Hub.AdminConfig(), "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var screen syncBuffer
	go func() { _, _ = io.Copy(&screen, master) }()
	send := func(s string) {
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatalf("write to the terminal: %v", err)
		}
	}
	// The shell's prompt, then its answer to stty size.
	awaitf(t, 30*time.Second, func() bool { return strings.Contains(screen.String(), "#") }, "a shell prompt; screen: %q", screen.String())
	send("stty size\r")
	awaitf(t, 20*time.Second, func() bool { return strings.Contains(screen.String(), "24 80") }, "stty size 24 80; screen: %q", screen.String())
	ptytest.SetSize(t, master, 100, 40)
	// The resize travels CLI → hub → device; ask until the shell sees it.
	awaitf(t, 20*time.Second, func() bool {
		send("stty size\r")
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
		return strings.Contains(screen.String(), "40 100")
	}, "stty size 40 100 after the resize; screen: %q", screen.String())
	send("exit 5\r")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 5 {
			t.Errorf("fleet exec -it: exit code %d (%v), want 5; screen: %q", code, err, screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fleet exec -it did not end after exit 5; screen: %q", screen.String())
	}
}

// topMatchesCgroup: fleet top pods shows the memory limit of chatty's
// container on dev-1 as its cgroup has it, and a working set within the
// usage the cgroup reports; the hub's /metrics exports the same.
func topMatchesCgroup(t *testing.T, f *Fleet) {
	c := f.AwaitContainerRunning(t, "dev-1", "chatty")
	limit := cgroupValue(t, c.PID, "memory", "memory.limit_in_bytes", "memory.max")
	if limit != 48<<20 {
		t.Fatalf("cgroup memory limit of chatty on dev-1 = %d, want %d", limit, 48<<20)
	}
	out := f.CLI(t, "top", "pods", "dev-1/chatty", "-o", "json")
	var list struct{ Items []schema.TopReport }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("fleet top pods dev-1/chatty -o json: %v, want one report:\n%s", err, out)
	}
	rep := list.Items[0]
	var cm *schema.ContainerMetrics
	for i := range rep.Containers {
		if rep.Containers[i].Pod == "chatty" && rep.Containers[i].Container == "main" {
			cm = &rep.Containers[i]
		}
	}
	if cm == nil {
		t.Fatalf("fleet top: no chatty/main in %+v", rep)
	}
	usage := cgroupValue(t, c.PID, "memory", "memory.usage_in_bytes", "memory.current")
	if cm.MemoryLimitBytes != uint64(limit) || cm.MemoryBytes == 0 || cm.MemoryWorkingSetBytes > cm.MemoryBytes || cm.MemoryBytes > 4*uint64(usage)+1<<20 {
		t.Errorf("fleet top chatty/main: limit %d (cgroup %d), usage %d (cgroup now %d), working set %d", cm.MemoryLimitBytes, limit, cm.MemoryBytes, usage, cm.MemoryWorkingSetBytes)
	}
	if rep.Node.MemoryTotalBytes == 0 || rep.Node.StateDisk == nil || rep.Node.StateDisk.TotalBytes == 0 || rep.Node.UptimeSeconds <= 0 {
		t.Errorf("fleet top: node figures %+v", rep.Node)
	}
	table := f.CLI(t, "top", "devices")
	for _, d := range []string{"dev-1", "dev-2", "dev-3"} {
		if !strings.Contains(table, d) {
			t.Errorf("fleet top devices has no %s:\n%s", d, table)
		}
	}
	got := hubMetric(t, f, `fleet_container_memory_limit_bytes{container="main",device="dev-1",pod="chatty"}`)
	if got != float64(limit) {
		t.Errorf("/metrics fleet_container_memory_limit_bytes for dev-1/chatty/main = %v, want %d", got, limit)
	}
}

// cgroupValue reads a memory figure of the cgroup of pid: file1 under
// cgroup v1, file2 under v2 ("max" reads as -1).
func cgroupValue(t *testing.T, pid uint32, controller, file1, file2 string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var path string
		switch {
		case parts[0] == "0" && parts[1] == "":
			path = "/sys/fs/cgroup" + parts[2] + "/" + file2
		case slices.Contains(strings.Split(parts[1], ","), controller):
			path = "/sys/fs/cgroup/" + controller + parts[2] + "/" + file1
		default:
			continue
		}
		v, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(v))
		if s == "max" {
			return -1
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return n
	}
	t.Fatalf("no %s cgroup for pid %d in:\n%s", controller, pid, b)
	return 0
}

// offlineEvents: with dev-3 cut off, its chatty container is killed twice
// (the restarts wait out the agent's crash-loop back-off); each exit and
// restart is an event made offline. Once dev-3 is back, the hub
// has them all, in the order they happened, each once.
func offlineEvents(t *testing.T, f *Fleet) {
	a := f.Agent(t, "dev-3")
	a.Proxy.Partition()
	f.AwaitDevices(t, time.Minute, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, "dev-3")
	cut := time.Now()
	const kills = 2
	for i := range kills {
		c := f.AwaitContainerRunning(t, "dev-3", "chatty")
		if err := syscall.Kill(int(c.PID), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The agent restarts it (after its crash-loop delay) before the
		// next kill.
		awaitf(t, time.Minute, func() bool {
			for _, n := range f.Containers(t, "dev-3") {
				if n.Pod == "chatty" && n.PID != 0 && n.PID != c.PID {
					return true
				}
			}
			return false
		}, "chatty restarted on dev-3 after kill %d", i+1)
	}
	a.Proxy.Heal()
	var evs []schema.Event
	awaitf(t, time.Minute, func() bool {
		evs = nil
		var list schema.EventList
		f.Get(t, "/v1/devices/dev-3/events", &list)
		exits := 0
		for _, ev := range list.Items {
			if ev.Time.After(cut) && ev.Pod == "chatty" {
				evs = append(evs, ev)
				if ev.Reason == "Exited" {
					exits++
				}
			}
		}
		return exits >= kills
	}, "dev-3's %d offline Exited events at the hub (have %v)", kills, evs)
	ids := map[string]bool{}
	for i, ev := range evs {
		if ev.ID == "" || ids[ev.ID] {
			t.Errorf("event %d (%s at %v) has id %q: missing or repeated", i, ev.Reason, ev.Time, ev.ID)
		}
		ids[ev.ID] = true
		if i > 0 && ev.Time.Before(evs[i-1].Time) {
			t.Errorf("event %d (%s at %v) arrived after a later one (%s at %v)", i, ev.Reason, ev.Time, evs[i-1].Reason, evs[i-1].Time)
		}
	}
	if !sort.SliceIsSorted(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) }) {
		t.Errorf("offline events out of order: %+v", evs)
	}
}

// hubGoroutines is the hub's go_goroutines on /metrics.
func hubGoroutines(t *testing.T, f *Fleet) int {
	return int(metric(t, f.Hub, "go_goroutines"))
}

// hubMetric is one series of the hub's /metrics.
func hubMetric(t *testing.T, f *Fleet, series string) float64 {
	return metric(t, f.Hub, series)
}

// TestE2ERemoteLogFlood: a container writes 100 MiB of log at once and a
// user follows it with fleet logs -f over a slow link (256 KiB/s, an
// in-process proxy between the CLI and the hub). Flow control holds the
// device back instead of the hub buffering: the hub's resident memory
// stays flat (its peak is reported), and another device converges on a
// new deployment meanwhile. When the user stops, the stream ends on the
// device and at the hub.
func TestE2ERemoteLogFlood(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Shell: true, Labels: func(i int) map[string]string {
		return map[string]string{"idx": strconv.Itoa(i + 1)}
	}})
	const line = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq"
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: flood}
spec:
  selector: {matchLabels: {idx: "1"}}
  template:
    spec:
      containers:
      - name: main
        image: `+f.ShellImage+`
        command: [/bin/sh, -c, 'yes `+line+` | head -c 104857600; echo FLOOD-WRITTEN; sleep 100000']
`)
	f.AwaitRollout(t, "flood", 1, e2eConverge)
	baseGoroutines := hubGoroutines(t, f)
	pid := f.Hub.PID()
	base := procStatusBytes(t, pid, "VmRSS")

	hubAddr := strings.TrimPrefix(strings.TrimPrefix(f.Hub.URL, "http://"), "https://")
	slow := StartProxy(t, hubAddr)
	slow.Throttle(256 << 10)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lines, wait := followCLI(ctx, t, f, "--hub", "http://"+slow.Addr, "--token", f.Hub.Token, "logs", "dev-1/flood", "-f")

	// Stream for 20 s while dev-2 converges on a new deployment.
	var got, peak, peakFirst5s int64
	start := time.Now()
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: bystander}
spec:
  selector: {matchLabels: {idx: "2"}}
  template:
    spec:
      containers:
      - name: main
        image: `+f.Image+`
`)
	converged := make(chan time.Duration, 1)
	go func() {
		f.AwaitRollout(t, "bystander", 1, e2eConverge)
		converged <- time.Since(start)
	}()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < 20*time.Second {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fleet logs -f ended after %d bytes: %v", got, wait())
			}
			got += int64(len(l)) + 1
		case <-tick.C:
			peak = max(peak, procStatusBytes(t, pid, "VmRSS"))
			if time.Since(start) < 5*time.Second {
				peakFirst5s = peak
			}
		}
	}
	var conv time.Duration
	select {
	case conv = <-converged:
	case <-time.After(e2eConverge):
		t.Fatal("dev-2 did not converge on bystander while dev-1's log was followed")
	}
	hwm := procStatusBytes(t, pid, "VmHWM")
	t.Logf("followed %.1f MiB in %v over a 256 KiB/s link; hub VmRSS before %.1f MiB, peak in the first 5 s %.1f MiB, peak over 20 s %.1f MiB (+%.1f MiB), VmHWM %.1f MiB; dev-2 converged in %v meanwhile",
		float64(got)/(1<<20), time.Since(start).Round(time.Millisecond), mib(base), mib(peakFirst5s), mib(peak), mib(peak-base), mib(hwm), conv.Round(time.Millisecond))
	if got < 1<<20 {
		t.Errorf("only %d bytes followed in 20 s over a 256 KiB/s link", got)
	}
	// 100 MiB wait on the device; the hub may hold a few windows of
	// 16 KiB chunks, never the log.
	if peak-base > 48<<20 {
		t.Errorf("hub VmRSS grew by %.1f MiB while following a 100 MiB log over a slow link", mib(peak-base))
	}
	cancel()
	if err := wait(); err != nil {
		t.Errorf("fleet logs -f after Ctrl-C: %v", err)
	}
	var open float64
	awaitf(t, 30*time.Second, func() bool {
		open = hubMetric(t, f, "fleet_remote_open_streams")
		return open == 0
	}, "the followed stream closed at the hub (fleet_remote_open_streams %v)", open)
	awaitf(t, 30*time.Second, func() bool { return hubGoroutines(t, f) <= baseGoroutines+5 }, "hub goroutines back to %d (now %d)", baseGoroutines, hubGoroutines(t, f))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
