package containerd_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/edgeagent/runtime/runtimetest"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
)

func TestConformance(t *testing.T) {
	containerdtest.Require(t)
	runtimetest.RunConfig(t, runtimetest.Config{
		NewRuntime: func(t *testing.T) runtime.Runtime {
			e := newEnv(t)
			return e.newRuntime(t)
		},
		Image:            "fleet.test/app:v1",
		UnavailableImage: runtimetest.DefaultUnavailableImage,
		// The suite stops containers right after starting them, when a
		// SIGTERM can arrive before the program's handler exists (and PID 1
		// drops it): keep the SIGKILL fallback short.
		StopTimeout: 2 * time.Second,
	})
}

func TestCreateStartList(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()

	spec := e.spec("web")
	spec.Labels = map[string]string{"team": "edge"}
	mustCreateStart(t, rt, spec)

	c, ok := runtimetest.Find(t, rt, "web")
	if !ok {
		t.Fatal("not listed")
	}
	if c.State != runtime.StateRunning || c.StartedAt.IsZero() {
		t.Errorf("state %s started %v, want running", c.State, c.StartedAt)
	}
	want := map[string]string{
		runtime.LabelManaged: "true", runtime.LabelPod: "pod", runtime.LabelContainer: "web",
		runtime.LabelPodHash: "h1", "team": "edge",
	}
	if fmt.Sprint(c.Labels) != fmt.Sprint(want) {
		t.Errorf("labels %v, want %v", c.Labels, want)
	}
	if c.Image != e.ref || c.Pod != "pod" || c.Name != "web" || c.PodHash != "h1" {
		t.Errorf("listed %+v", c)
	}

	// Host network, host name, and the host's resolver files.
	s := e.ociSpec(t, "web")
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			t.Errorf("container has its own network namespace")
		}
	}
	if host, _ := os.Hostname(); s.Hostname != host {
		t.Errorf("hostname %q, want the host's %q", s.Hostname, host)
	}
	mounts := map[string]string{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m.Source
	}
	if mounts["/etc/resolv.conf"] != "/etc/resolv.conf" || mounts["/etc/hosts"] != "/etc/hosts" {
		t.Errorf("resolv.conf/hosts not bound from the host: %v", mounts)
	}

	if err := rt.Stop(ctx, "web", 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

func (e *env) ociSpec(t *testing.T, id string) *oci.Spec {
	t.Helper()
	c, err := e.client().LoadContainer(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Spec(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCommandArgsEnv(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	exits := subscribe(t, rt)
	host, _ := os.Hostname()
	logDir := t.TempDir()

	tests := []struct {
		name     string
		command  []string
		args     []string
		env      []string
		workdir  string
		wantCode int32
		wantLog  []string
	}{
		{
			name:    "args replace the image's cmd",
			args:    []string{"echo", "hello", "env", "FOO", "pwd", "hostname"},
			env:     []string{"FOO=bar"},
			workdir: "/tmp",
			wantLog: []string{"hello\n", "FOO=bar\n", "pwd: /tmp\n", "hostname: " + host + "\n"},
		},
		{
			name:     "command replaces the entrypoint, args follow",
			command:  []string{"/app", "echo", "from-command"},
			args:     []string{"exit", "4"},
			wantCode: 4,
			wantLog:  []string{"from-command\n"},
		},
		{
			name:    "command alone drops the image's cmd",
			command: []string{"/app", "args"},
			wantLog: []string{"args: args\n"},
		},
		{
			name:    "image env is kept and can be overridden",
			args:    []string{"env", "FLEET_TEST_IMAGE", "env", "PATH"},
			env:     []string{"FLEET_TEST_IMAGE=overridden"},
			wantLog: []string{"FLEET_TEST_IMAGE=overridden\n", "PATH=/usr/local/sbin:"},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("args-%d", i)
			spec := e.spec(id, tc.args...)
			spec.Command = tc.command
			spec.Env = tc.env
			spec.WorkingDir = tc.workdir
			spec.LogPath = filepath.Join(logDir, id+".log")
			mustCreateStart(t, rt, spec)
			ev := awaitExit(t, exits, id)
			if ev.ExitCode != tc.wantCode {
				t.Errorf("exit code %d, want %d", ev.ExitCode, tc.wantCode)
			}
			awaitLog(t, spec.LogPath, tc.wantLog...)
		})
	}
}

func TestMounts(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	exits := subscribe(t, rt)
	roDir, rwDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(roDir, "in"), []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("mounts",
		"read", "/ro/in",
		"write", "/rw/out", "from-container",
		"write-fail", "/ro/x",
		"exit", "0")
	spec.Mounts = []schema.Mount{
		{HostPath: roDir, MountPath: "/ro", ReadOnly: true},
		{HostPath: rwDir, MountPath: "/rw"},
	}
	spec.LogPath = filepath.Join(t.TempDir(), "mounts.log")
	mustCreateStart(t, rt, spec)
	if ev := awaitExit(t, exits, "mounts"); ev.ExitCode != 0 {
		t.Errorf("exit code %d, want 0; log:\n%s", ev.ExitCode, readFile(spec.LogPath))
	}
	awaitLog(t, spec.LogPath, "read: from-host", "write refused")
	if b, err := os.ReadFile(filepath.Join(rwDir, "out")); err != nil || string(b) != "from-container" {
		t.Errorf("rw mount: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(roDir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ro mount was written: %v", err)
	}

	// A missing host path fails Create clearly and leaves nothing behind.
	bad := e.spec("badmount")
	bad.Mounts = []schema.Mount{{HostPath: filepath.Join(rwDir, "missing"), MountPath: "/m"}}
	err := rt.Create(context.Background(), bad)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Create with a missing host path = %v", err)
	}
	if _, ok := runtimetest.Find(t, rt, "badmount"); ok {
		t.Error("failed Create left a container")
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestResourceLimits(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	spec := e.spec("limited")
	spec.MemoryLimitBytes = 64 << 20
	spec.CPUMillis = 250
	mustCreateStart(t, rt, spec)

	s := e.ociSpec(t, "limited")
	res := s.Linux.Resources
	if res == nil || res.Memory == nil || res.Memory.Limit == nil || *res.Memory.Limit != 64<<20 {
		t.Fatalf("spec memory limit: %+v", res)
	}
	if res.CPU == nil || res.CPU.Quota == nil || *res.CPU.Quota != 25000 || res.CPU.Period == nil || *res.CPU.Period != 100000 {
		t.Fatalf("spec CPU: %+v", res.CPU)
	}

	// And in the kernel: the task's cgroups (v1) carry the limits.
	pid := e.taskPID(t, "limited")
	for _, f := range []struct{ ctrl, file, want string }{
		{"memory", "memory.limit_in_bytes", strconv.Itoa(64 << 20)},
		{"cpu", "cpu.cfs_quota_us", "25000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
	} {
		path, ok := cgroupFile(t, pid, f.ctrl, f.file)
		if !ok {
			t.Logf("no cgroup v1 %s hierarchy here; the spec check above stands", f.ctrl)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != f.want {
			t.Errorf("%s = %s, want %s", path, got, f.want)
		}
	}
	if err := rt.Stop(context.Background(), "limited", 0); err != nil {
		t.Fatal(err)
	}
}

// cgroupFile finds file in pid's cgroup v1 hierarchy for controller ctrl.
func cgroupFile(t *testing.T, pid uint32, ctrl, file string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == ctrl {
				for _, mnt := range []string{ctrl, "cpu,cpuacct", "cpuacct,cpu"} {
					p := filepath.Join("/sys/fs/cgroup", mnt, parts[2], file)
					if _, err := os.Stat(p); err == nil {
						return p, true
					}
				}
			}
		}
	}
	return "", false
}

func TestExitCodeAndRestart(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	exits := subscribe(t, rt)
	ctx := context.Background()

	mustCreateStart(t, rt, e.spec("seven", "exit", "7"))
	ev := awaitExit(t, exits, "seven")
	if ev.ExitCode != 7 || ev.At.IsZero() {
		t.Errorf("exit event %+v, want code 7 with a time", ev)
	}
	c, _ := runtimetest.Find(t, rt, "seven")
	if c.State != runtime.StateExited || c.ExitCode != 7 || c.FinishedAt.IsZero() || c.FinishedAt.Before(c.StartedAt) {
		t.Errorf("after exit: %+v", c)
	}

	// Start deletes the exited task and runs a new one.
	if err := rt.Start(ctx, "seven"); err != nil {
		t.Fatalf("restart: %v", err)
	}
	ev2 := awaitExit(t, exits, "seven")
	if ev2.ExitCode != 7 || !ev2.At.After(ev.At) {
		t.Errorf("second exit %+v after first %+v", ev2, ev)
	}
	// Stop deletes the task; the exit code survives in the container.
	if err := rt.Stop(ctx, "seven", time.Second); err != nil {
		t.Fatal(err)
	}
	if e.taskPID(t, "seven") != 0 {
		t.Error("task not deleted by Stop")
	}
	c, _ = runtimetest.Find(t, rt, "seven")
	if c.State != runtime.StateExited || c.ExitCode != 7 || c.FinishedAt.IsZero() {
		t.Errorf("after Stop: %+v", c)
	}
}

func TestStopThenStartRestarts(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	// stderr goes to the same file. (Only checked while the process runs:
	// the containerd shim may drop stderr written just before an exit, see
	// the package doc.)
	spec := e.spec("svc", "stderr", "to-stderr", "echo", "started", "sleep", "forever")
	spec.LogPath = filepath.Join(t.TempDir(), "svc.log")
	mustCreateStart(t, rt, spec)
	pid1 := e.taskPID(t, "svc")
	awaitLog(t, spec.LogPath, "started\n", "to-stderr\n")

	if err := rt.Stop(ctx, "svc", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c, _ := runtimetest.Find(t, rt, "svc")
	if c.State != runtime.StateExited || c.ExitCode != 0 {
		t.Errorf("after graceful Stop: %+v, want exited 0", c)
	}
	if err := rt.Start(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	c, _ = runtimetest.Find(t, rt, "svc")
	if c.State != runtime.StateRunning || c.ExitCode != 0 || !c.FinishedAt.IsZero() {
		t.Errorf("after restart: %+v", c)
	}
	if pid2 := e.taskPID(t, "svc"); pid2 == 0 || pid2 == pid1 {
		t.Errorf("pid %d after restart, was %d", pid2, pid1)
	}
	// The first run's log moved to PATH.previous (fleet logs --previous);
	// the file holds the second run's.
	await(t, "each run in its own log", func() (bool, error) {
		prev, cur := readFile(spec.LogPath+".previous"), readFile(spec.LogPath)
		return strings.Count(prev, "started\n") == 1 && strings.Contains(prev, "term\n") &&
			strings.Count(cur, "started\n") == 1 && !strings.Contains(cur, "term\n"), nil
	})
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	spec := e.spec("stubborn", "ignore-term", "echo", "ready", "sleep", "forever")
	spec.LogPath = filepath.Join(t.TempDir(), "stubborn.log")
	mustCreateStart(t, rt, spec)
	awaitLog(t, spec.LogPath, "ready\n") // the handler is installed
	start := time.Now()
	if err := rt.Stop(context.Background(), "stubborn", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Stop returned after %v, before the grace period", d)
	}
	c, _ := runtimetest.Find(t, rt, "stubborn")
	if c.State != runtime.StateExited || c.ExitCode != 137 {
		t.Errorf("after SIGKILL: %+v, want exited 137", c)
	}
	awaitLog(t, spec.LogPath, "term ignored\n")
}

func TestRemoveDeletesTaskAndSnapshot(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	mustCreateStart(t, rt, e.spec("doomed"))
	sn := e.client().SnapshotService(containerd.DefaultSnapshotter)
	if _, err := sn.Stat(e.ctx, "doomed"); err != nil {
		t.Fatalf("snapshot before Remove: %v", err)
	}

	if err := rt.Remove(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client().LoadContainer(e.ctx, "doomed"); !errdefs.IsNotFound(err) {
		t.Errorf("container after Remove: %v", err)
	}
	tasks, err := e.client().TaskService().List(e.ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks.Tasks) != 0 {
		t.Errorf("tasks after Remove: %v", tasks.Tasks)
	}
	if _, err := sn.Stat(e.ctx, "doomed"); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot after Remove: %v", err)
	}
	var keys []string
	if err := sn.Walk(e.ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind == snapshots.KindActive {
			keys = append(keys, info.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("active snapshots left: %v", keys)
	}
}

// TestAdoptAfterAgentExit: an agent process creates and starts a container
// and exits; the container keeps running and a new Runtime reports it
// running, with the same process, without restarting it.
func TestAdoptAfterAgentExit(t *testing.T) {
	e := newEnv(t)
	logPath := filepath.Join(t.TempDir(), "adopt.log")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		"HELPER_SOCKET="+daemon.Socket(),
		"HELPER_NS="+e.ns,
		"HELPER_REF="+e.ref,
		"HELPER_LOG="+logPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agent process: %v\n%s", err, out)
	}
	pid := e.taskPID(t, "adopted")
	if pid == 0 {
		t.Fatal("no task after the agent exited")
	}

	rt := e.newRuntime(t)
	c, ok := runtimetest.Find(t, rt, "adopted")
	if !ok || c.State != runtime.StateRunning {
		t.Fatalf("restarted agent sees %+v (listed %v), want running", c, ok)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Fatalf("container process gone: %v", err)
	}
	// Output still flows to the log with no agent attached.
	awaitLog(t, logPath, "before-exit\n")

	// A second client closing does not disturb it either.
	rt2 := e.newRuntime(t)
	if err := rt2.Close(); err != nil {
		t.Fatal(err)
	}
	if c, _ := runtimetest.Find(t, rt, "adopted"); c.State != runtime.StateRunning || e.taskPID(t, "adopted") != pid {
		t.Fatalf("after another client closed: %+v", c)
	}
	// Start on the adopted container changes nothing; Stop works.
	if err := rt.Start(context.Background(), "adopted"); !errors.Is(err, runtime.ErrAlreadyExists) {
		t.Fatalf("Start of a running container = %v, want ErrAlreadyExists", err)
	}
	if got := e.taskPID(t, "adopted"); got != pid {
		t.Fatalf("Start restarted an adopted container: pid %d → %d", pid, got)
	}
	if err := rt.Stop(context.Background(), "adopted", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

const helperEnv = "FLEET_CONTAINERD_TEST_AGENT"

// helperAgent runs in a child process: it starts container "adopted" and
// exits, as an agent that is stopped or crashes would.
func helperAgent() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{
		Socket:    os.Getenv("HELPER_SOCKET"),
		Namespace: os.Getenv("HELPER_NS"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	spec := runtime.ContainerSpec{
		ID: "adopted", Pod: "p", Name: "adopted", PodHash: "h",
		Image:   os.Getenv("HELPER_REF"),
		Args:    []string{"sleep", "500ms", "echo", "before-exit", "sleep", "forever"},
		LogPath: os.Getenv("HELPER_LOG"),
	}
	if err := rt.Create(ctx, spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := rt.Start(ctx, "adopted"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// No Close, no cleanup: the process just ends.
	return 0
}

func TestRuntimeCloseKeepsTasks(t *testing.T) {
	e := newEnv(t)
	rt1 := e.newRuntime(t)
	mustCreateStart(t, rt1, e.spec("keep"))
	pid := e.taskPID(t, "keep")
	if err := rt1.Close(); err != nil {
		t.Fatal(err)
	}
	rt2 := e.newRuntime(t)
	c, ok := runtimetest.Find(t, rt2, "keep")
	if !ok || c.State != runtime.StateRunning || e.taskPID(t, "keep") != pid {
		t.Fatalf("after the first client closed: %+v", c)
	}
}

func TestUnmanagedContainersIgnored(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	exits := subscribe(t, rt)

	// A container someone else made in the same namespace, which exits.
	img, err := e.client().GetImage(e.ctx, e.ref)
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.client().NewContainer(e.ctx, "other",
		ctrd.WithNewSnapshot("other", img),
		ctrd.WithNewSpec(oci.WithImageConfigArgs(img, []string{"exit", "3"})))
	if err != nil {
		t.Fatal(err)
	}
	task, err := other.NewTask(e.ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := task.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	<-wait
	// Then one of ours, whose exit must be the first event we see.
	mustCreateStart(t, rt, e.spec("ours", "exit", "5"))
	select {
	case ev := <-exits:
		if ev.ID != "ours" || ev.ExitCode != 5 {
			t.Errorf("first event %+v, want ours/5", ev)
		}
	case <-time.After(awaitTimeout):
		t.Fatal("no exit event")
	}
	if _, ok := runtimetest.Find(t, rt, "other"); ok {
		t.Error("List shows an unmanaged container")
	}
	for name, err := range map[string]error{
		"Start":  rt.Start(context.Background(), "other"),
		"Remove": rt.Remove(context.Background(), "other"),
	} {
		if !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("%s of an unmanaged container = %v, want ErrNotFound", name, err)
		}
	}
	if _, err := task.Delete(e.ctx); err != nil {
		t.Fatal(err)
	}
}

func TestExitsClosedWhenRuntimeCloses(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	exits := subscribe(t, rt)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-exits:
		if ok {
			t.Fatal("unexpected event")
		}
	case <-time.After(awaitTimeout):
		t.Fatal("exit stream not closed after Close")
	}
}

func TestLogFile(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t, func(o *containerd.Options) {
		o.LogMaxBytes = 20000
		o.LogCheckInterval = 50 * time.Millisecond
	})
	dir := t.TempDir()
	spec := e.spec("chatty", "echo", "first", "spam", "1000", "echo", "spammed", "sleep", "forever")
	spec.LogPath = filepath.Join(dir, "sub", "chatty.log") // directory made on demand
	mustCreateStart(t, rt, spec)

	// 100 kB written with a 20 kB cap: copied to .1 and truncated while
	// the task runs.
	await(t, "live rotation", func() (bool, error) {
		fi, err := os.Stat(spec.LogPath + ".1")
		return err == nil && fi.Size() > 20000, err
	})
	// The shim keeps appending to the truncated file. Stop only once the
	// spam is over and the live file is under the cap: under load the
	// spam can outlast the first rotation, and a rotation after the stop
	// would move "term" to .1.
	await(t, "spam over, live file under the cap", func() (bool, error) {
		old, _ := os.ReadFile(spec.LogPath + ".1")
		live, err := os.ReadFile(spec.LogPath)
		return len(live) <= 20000 && strings.Contains(string(old)+string(live), "spammed\n"), err
	})
	if err := rt.Stop(context.Background(), "chatty", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, spec.LogPath, "term\n")
	if fi, err := os.Stat(spec.LogPath); err != nil || fi.Size() > 100000 {
		t.Fatalf("log after rotation: %v, %v", fi, err)
	}
	// An old log at Start: moved to .previous before the task writes (the
	// last run's log, for logs --previous). (A quiet container, so that
	// live rotation leaves the new file alone.)
	quiet := e.spec("quiet", "echo", "first", "sleep", "forever")
	quiet.LogPath = filepath.Join(dir, "quiet.log")
	big := strings.Repeat("old line\n", 3000)
	if err := os.WriteFile(quiet.LogPath, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCreateStart(t, rt, quiet)
	awaitLog(t, quiet.LogPath, "first\n")
	if strings.Contains(readFile(quiet.LogPath), "old line") {
		t.Error("old content not rotated away at Start")
	}
	if readFile(quiet.LogPath+".previous") != big {
		t.Error(".previous does not hold the previous log")
	}
	if err := rt.Stop(context.Background(), "quiet", 0); err != nil {
		t.Fatal(err)
	}
}

// TestCreateStartLatency measures Create+Start of a container from a
// present image, as the agent does it (see BENCHMARKS.md).
func TestCreateStartLatency(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	const n = 15
	var ensure, create, startOnly, createStart, stopRemove []time.Duration
	for i := range n {
		id := fmt.Sprintf("lat-%d", i)
		spec := e.spec(id, "echo", "ready", "sleep", "forever")
		spec.LogPath = filepath.Join(t.TempDir(), id+".log")
		start := time.Now()
		if err := rt.EnsureImage(ctx, spec.Image, schema.PullIfNotPresent); err != nil {
			t.Fatal(err)
		}
		ensure = append(ensure, time.Since(start))
		start = time.Now()
		if err := rt.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		create = append(create, created.Sub(start))
		startOnly = append(startOnly, time.Since(created))
		createStart = append(createStart, time.Since(start))
		// A SIGTERM that reaches PID 1 before its handler is installed is
		// dropped by the kernel; wait for the program to be up.
		awaitLog(t, spec.LogPath, "ready\n")
		start = time.Now()
		if err := rt.Stop(ctx, id, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		stopRemove = append(stopRemove, time.Since(start))
	}
	t.Logf("EnsureImage(IfNotPresent, present) over %d runs: %s", n, summary(ensure))
	t.Logf("create over %d runs: %s", n, summary(create))
	t.Logf("start over %d runs: %s", n, summary(startOnly))
	t.Logf("create+start over %d runs: %s", n, summary(createStart))
	t.Logf("stop(SIGTERM)+remove over %d runs: %s", n, summary(stopRemove))

	// And with others already running, as on a busy device.
	for i := range 5 {
		mustCreateStart(t, rt, e.spec(fmt.Sprintf("bg-%d", i)))
	}
	var busy []time.Duration
	for i := range 5 {
		start := time.Now()
		mustCreateStart(t, rt, e.spec(fmt.Sprintf("busy-%d", i)))
		busy = append(busy, time.Since(start))
	}
	t.Logf("create+start with 5-9 containers running: %s", summary(busy))
}

func summary(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("min %v median %v max %v",
		s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
