package containerd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// TestExec runs commands in a running container of the test image: exit
// code and output, the container's environment and working directory, a
// timeout that kills the command (and only it), output bounded to
// runtime.ExecOutputMax, and the errors for containers that do not run.
func TestExec(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()

	spec := e.spec("box", "sleep", "forever")
	spec.Env = []string{"GREETING=hello-exec"}
	spec.WorkingDir = "/tmp"
	mustCreateStart(t, rt, spec)
	await(t, "box running", func() (bool, error) {
		c, err := rt.List(ctx)
		return err == nil && len(c) == 1 && c[0].State == runtime.StateRunning, err
	})

	code, out, err := rt.Exec(ctx, "box", []string{"/app", "echo", "hi", "stderr", "oops", "exit", "3"}, 10*time.Second)
	if err != nil || code != 3 || !strings.Contains(string(out), "hi\n") || !strings.Contains(string(out), "oops\n") {
		t.Errorf("exec exit 3 = %d, %q, %v", code, out, err)
	}

	code, out, err = rt.Exec(ctx, "box", []string{"/app", "env", "GREETING", "pwd"}, 10*time.Second)
	if err != nil || code != 0 || string(out) != "GREETING=hello-exec\npwd: /tmp\n" {
		t.Errorf("exec env/pwd = %d, %q, %v", code, out, err)
	}

	start := time.Now()
	_, _, err = rt.Exec(ctx, "box", []string{"/app", "echo", "started", "sleep", "forever"}, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec past its timeout = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("timed-out exec took %v", d)
	}
	// The killed command took nothing else with it.
	await(t, "only the main process left", func() (bool, error) {
		c, err := e.client().LoadContainer(e.ctx, "box")
		if err != nil {
			return false, err
		}
		task, err := c.Task(e.ctx, nil)
		if err != nil {
			return false, err
		}
		pids, err := task.Pids(e.ctx)
		return err == nil && len(pids) == 1, err
	})
	if c, _ := rt.List(ctx); len(c) != 1 || c[0].State != runtime.StateRunning {
		t.Fatalf("container after a timed-out exec: %+v", c)
	}

	code, out, err = rt.Exec(ctx, "box", []string{"/app", "spam", "2000"}, 10*time.Second)
	if err != nil || code != 0 || len(out) != runtime.ExecOutputMax {
		t.Errorf("exec spam = %d, %d bytes, %v; want 0, %d bytes", code, len(out), err, runtime.ExecOutputMax)
	}

	if _, _, err := rt.Exec(ctx, "box", []string{"/no/such/binary"}, 10*time.Second); err == nil {
		t.Error("exec of a missing binary succeeded")
	}
	if _, _, err := rt.Exec(ctx, "nope", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("exec in an unknown container = %v, want ErrNotFound", err)
	}
	if err := rt.Create(ctx, e.spec("idle", "sleep", "forever")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.Exec(ctx, "idle", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("exec in a never-started container = %v, want ErrNotRunning", err)
	}
	if err := rt.Stop(ctx, "box", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.Exec(ctx, "box", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("exec in a stopped container = %v, want ErrNotRunning", err)
	}
}
