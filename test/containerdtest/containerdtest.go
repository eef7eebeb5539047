// Package containerdtest starts a private containerd daemon for tests and
// demos: its own root, state directory, socket and config, so it never
// touches the host's /run/containerd. Cleanup kills every task the daemon
// runs, stops it, unmounts what it left mounted and removes its directories.
//
// It needs root, containerd and runc (Debian: apt-get install -y containerd
// runc). Without them Start skips the test, or fails it when
// FLEET_REQUIRE_CONTAINERD=1.
package containerdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"
)

// RequireEnv, set to 1, turns a missing containerd into a test failure.
const RequireEnv = "FLEET_REQUIRE_CONTAINERD"

// Daemon is a running private containerd.
type Daemon struct {
	dir     string
	ownsDir bool // dir was created by StartDaemon and is removed entirely
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the daemon process has been reaped
	client  *containerd.Client
	logFile *os.File
}

// Available reports why a private containerd cannot run here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("containerd tests need root")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found in PATH (apt-get install -y containerd runc)", bin)
		}
	}
	return nil
}

// Require skips t (or fails it when FLEET_REQUIRE_CONTAINERD=1) if a
// private containerd cannot run here.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v; %s=1 requires containerd", err, RequireEnv)
		}
		t.Skipf("%v (set %s=1 to make this a failure)", err, RequireEnv)
	}
}

// Start starts a private daemon for the test and stops it on cleanup. On
// failure the daemon's log is written to the test log.
func Start(t testing.TB) *Daemon {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := StartDaemon(ctx, "")
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd log (tail):\n%s", d.LogTail(60))
		}
		if err := d.Close(); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
	})
	return d
}

// StartDaemon starts a private containerd in dir and waits until it answers.
// An empty dir means a new short temporary directory, removed by Close;
// otherwise Close removes what the daemon created in dir except its log
// (containerd.log). ctx bounds the start only: the daemon runs until Close.
func StartDaemon(ctx context.Context, dir string) (*Daemon, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	d := &Daemon{dir: dir, exited: make(chan struct{})}
	if dir == "" {
		// Unix socket paths are limited to 108 bytes: keep it short.
		base := os.TempDir()
		if len(base) > 40 {
			base = "/tmp"
		}
		var err error
		if d.dir, err = os.MkdirTemp(base, "ctd"); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
		d.ownsDir = true
	}
	if len(d.Socket())+len(".ttrpc") >= 108 {
		return nil, fmt.Errorf("start containerd: socket path %s too long", d.Socket())
	}
	if err := d.start(ctx); err != nil {
		// Close copes with a partly started daemon.
		if cerr := d.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	return d, nil
}

func (d *Daemon) start(ctx context.Context) error {
	for _, sub := range []string{"root", "state"} {
		if err := os.MkdirAll(filepath.Join(d.dir, sub), 0o711); err != nil {
			return err
		}
	}
	if err := os.WriteFile(d.ConfigPath(), []byte(d.config()), 0o644); err != nil {
		return err
	}
	lf, err := os.OpenFile(d.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	d.logFile = lf

	// Not CommandContext: the daemon outlives ctx.
	d.cmd = exec.Command("containerd", "--config", d.ConfigPath(),
		"--root", d.Root(), "--state", d.State(), "--address", d.Socket())
	d.cmd.Stdout = lf
	d.cmd.Stderr = lf
	// Own process group: a ^C to the demo or test reaches us, and we stop
	// the daemon in order, after its tasks.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		close(d.exited)
		return err
	}
	go func() {
		_ = d.cmd.Wait() // the exit status of a daemon we stop is not interesting
		close(d.exited)
	}()
	return d.awaitReady(ctx)
}

func (d *Daemon) config() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, d.Root(), d.State(), d.Socket(), d.Socket()+".ttrpc", filepath.Join(d.dir, "opt"))
}

// awaitReady polls until the daemon answers a version request.
func (d *Daemon) awaitReady(ctx context.Context) error {
	var lastErr error
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("containerd exited during start-up: %s", d.LogTail(20))
		default:
		}
		if _, err := os.Stat(d.Socket()); err == nil {
			c, err := containerd.New(d.Socket(), containerd.WithTimeout(2*time.Second))
			if err == nil {
				if _, err = c.Version(ctx); err == nil {
					d.client = c
					return nil
				}
				c.Close()
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd not ready (last error: %v): %w\n%s", lastErr, ctx.Err(), d.LogTail(20))
		case <-d.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Socket is the daemon's gRPC address (a unix socket path).
func (d *Daemon) Socket() string { return filepath.Join(d.dir, "containerd.sock") }

// Dir is the directory holding everything the daemon uses.
func (d *Daemon) Dir() string { return d.dir }

// Root is the daemon's --root (content, snapshots, metadata).
func (d *Daemon) Root() string { return filepath.Join(d.dir, "root") }

// State is the daemon's --state (bundles, runtime state).
func (d *Daemon) State() string { return filepath.Join(d.dir, "state") }

// ConfigPath is the daemon's config.toml.
func (d *Daemon) ConfigPath() string { return filepath.Join(d.dir, "config.toml") }

// LogPath receives the daemon's stdout and stderr.
func (d *Daemon) LogPath() string { return filepath.Join(d.dir, "containerd.log") }

// Client is a client of the daemon owned by the harness, with no default
// namespace: pass one with namespaces.WithNamespace. Do not close it.
func (d *Daemon) Client() *containerd.Client { return d.client }

// LogTail returns the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string {
	b, err := os.ReadFile(d.LogPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close kills every task in every namespace, stops the daemon, kills any
// shim it left behind, unmounts what is still mounted under its directories
// and removes them. It is idempotent enough to call on a partly started
// daemon.
func (d *Daemon) Close() error {
	var errs []error
	if d.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, d.killTasks(ctx))
		cancel()
		errs = append(errs, d.client.Close())
		d.client = nil
	}
	if d.cmd != nil && d.cmd.Process != nil {
		errs = append(errs, d.stopDaemon())
	}
	if d.logFile != nil {
		errs = append(errs, d.logFile.Close())
		d.logFile = nil
	}
	errs = append(errs, d.killShims())
	errs = append(errs, unmountUnder(d.dir))
	if d.ownsDir {
		errs = append(errs, os.RemoveAll(d.dir))
	} else {
		for _, p := range []string{d.Root(), d.State(), filepath.Join(d.dir, "opt"), d.ConfigPath(), d.Socket(), d.Socket() + ".ttrpc"} {
			errs = append(errs, os.RemoveAll(p))
		}
	}
	return errors.Join(errs...)
}

// killTasks SIGKILLs and deletes every task in every namespace, and removes
// the (empty) cgroups runc made for each namespace.
func (d *Daemon) killTasks(ctx context.Context) error {
	nss, err := d.client.NamespaceService().List(ctx)
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := d.client.Containers(nctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list containers in %s: %w", ns, err))
			continue
		}
		for _, c := range ctrs {
			task, err := c.Task(nctx, nil)
			if errdefs.IsNotFound(err) {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("task %s/%s: %w", ns, c.ID(), err))
				continue
			}
			if _, err := task.Delete(nctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("kill task %s/%s: %w", ns, c.ID(), err))
			}
		}
		removeNamespaceCgroups(ns)
	}
	return errors.Join(errs...)
}

// removeNamespaceCgroups removes /sys/fs/cgroup/*/NS when empty (cgroups v1;
// rmdir of a cgroup fails while it has children or tasks, which is fine).
func removeNamespaceCgroups(ns string) {
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/" + ns)
	for _, p := range ctrls {
		_ = syscall.Rmdir(p) // best effort, see above
	}
}

func (d *Daemon) stopDaemon() error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal containerd: %w", err)
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err := d.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill containerd: %w", err)
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) did not exit", d.cmd.Process.Pid)
	}
}

// killShims SIGKILLs shim processes still serving this daemon (their
// command line names our socket), which only happens when a task could not
// be deleted.
func (d *Daemon) killShims() error {
	pids, err := shimPIDs(d.Socket())
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func shimPIDs(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		args := bytes.Split(cmdline, []byte{0})
		if len(args) == 0 || !strings.Contains(string(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if string(a) == "-address" && i+1 < len(args) && string(args[i+1]) == socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if strings.HasPrefix(mp, prefix) {
			points = append(points, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
