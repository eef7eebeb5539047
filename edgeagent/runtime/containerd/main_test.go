package containerd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// One private containerd serves the whole package; every test gets its own
// namespace in it.
var daemon *containerdtest.Daemon

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperAgent())
	}
	if len(os.Args) == 3 && os.Args[1] == "log-writer" {
		os.Exit(logWriterMain(os.Args[2])) // the shim runs this binary as the log writer
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if containerdtest.Available() != nil {
		return m.Run() // each test skips or fails through containerdtest.Require
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	d, err := containerdtest.StartDaemon(ctx, "")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start containerd:", err)
		return 1
	}
	daemon = d
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "containerd log (tail):\n%s\n", d.LogTail(40))
	}
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stop containerd:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

var nsCounter atomic.Int64

// env is one test's namespace with the test image imported.
type env struct {
	ns  string
	ref string
	ctx context.Context // carries ns, for the raw client
}

// newEnv returns a fresh namespace holding the test image, unpacked.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := newEmptyEnv(t)
	tarPath, ref := testimage.Build(t, testimage.Options{})
	if _, err := testimage.Import(e.ctx, daemon.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	e.ref = ref
	return e
}

// newEmptyEnv returns a fresh namespace with no image.
func newEmptyEnv(t *testing.T) *env {
	t.Helper()
	containerdtest.Require(t)
	ns := fmt.Sprintf("t%d", nsCounter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{ns: ns, ctx: namespaces.WithNamespace(ctx, ns)}
}

func (e *env) client() *ctrd.Client { return daemon.Client() }

// newRuntime opens a Runtime on the env's namespace, closed on cleanup.
func (e *env) newRuntime(t *testing.T, mod ...func(*containerd.Options)) *containerd.Runtime {
	t.Helper()
	opts := containerd.Options{
		Socket:    daemon.Socket(),
		Namespace: e.ns,
		// Not t.Log: background goroutines may log after the test ends.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// Registries that cannot answer: nothing here may need one.
		Registry: containerd.RegistryConfig{Mirrors: map[string][]string{
			"docker.io":  {"http://127.0.0.1:1"},
			"fleet.test": {"http://127.0.0.1:1"},
		}},
	}
	for _, m := range mod {
		m(&opts)
	}
	rt, err := containerd.New(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

// spec is a container of the test image running args.
func (e *env) spec(id string, args ...string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		ID:      id,
		Pod:     "pod",
		Name:    id,
		PodHash: "h1",
		Image:   e.ref,
		Args:    args,
	}
}

// mustCreateStart creates and starts spec.
func mustCreateStart(t *testing.T, rt runtime.Runtime, spec runtime.ContainerSpec) {
	t.Helper()
	ctx := context.Background()
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create(%s): %v", spec.ID, err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start(%s): %v", spec.ID, err)
	}
}

// subscribe returns the runtime's exit stream, ended on cleanup.
func subscribe(t *testing.T, rt runtime.Runtime) <-chan runtime.ExitEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := rt.Exits(ctx)
	if err != nil {
		t.Fatalf("Exits: %v", err)
	}
	return ch
}

const awaitTimeout = 30 * time.Second

// awaitExit returns the next exit event of id.
func awaitExit(t *testing.T, exits <-chan runtime.ExitEvent, id string) runtime.ExitEvent {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		select {
		case ev, ok := <-exits:
			if !ok {
				t.Fatalf("exit stream closed while waiting for %s", id)
			}
			if ev.ID == id {
				return ev
			}
		case <-timeout:
			t.Fatalf("no exit event for %s within %v", id, awaitTimeout)
		}
	}
}

// await polls cond until it holds or awaitTimeout passes.
func await(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last error: %v)", what, awaitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// awaitLog waits until the file at path contains every one of want.
func awaitLog(t *testing.T, path string, want ...string) string {
	t.Helper()
	var got string
	await(t, fmt.Sprintf("log %s contains %q", path, want), func() (bool, error) {
		b, err := os.ReadFile(path)
		got = string(b)
		for _, w := range want {
			if !strings.Contains(got, w) {
				return false, errors.Join(err, fmt.Errorf("log so far: %q", got))
			}
		}
		return true, nil
	})
	return got
}

// taskPID is the PID of id's task as containerd sees it (0 if none).
func (e *env) taskPID(t *testing.T, id string) uint32 {
	t.Helper()
	c, err := e.client().LoadContainer(e.ctx, id)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	task, err := c.Task(e.ctx, nil)
	if err != nil {
		return 0
	}
	return task.Pid()
}
