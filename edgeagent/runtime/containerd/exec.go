package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/errdefs"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// execCleanupTimeout bounds the clean-up of an exec process (kill, wait,
// delete), which runs on its own context: the caller's may be done.
const execCleanupTimeout = 10 * time.Second

// execIOGrace is how long Exec waits for the output of a process that has
// exited: a background child that keeps stdout open must not hold the
// answer back.
const execIOGrace = time.Second

// Exec implements runtime.Runtime: it runs cmd as an exec process of the
// container's task (containerd's task Exec), with the process spec of
// the container (user, groups, capabilities, environment, working
// directory, rlimits) and cmd as its arguments, no terminal and no stdin.
// Output goes through FIFOs into a buffer that keeps the first
// runtime.ExecOutputMax bytes. It does not take the container's lock: a
// Stop or Remove does not wait for a probe.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (code int, output []byte, err error) {
	ctx = r.nsCtx(ctx)
	// A deadline that expires inside a containerd call comes back as a
	// gRPC error; callers test for the context's error.
	defer func() {
		if ce := ctx.Err(); err != nil && ce != nil && !errors.Is(err, ce) {
			err = fmt.Errorf("%w (%w)", err, ce)
		}
	}()
	if len(cmd) == 0 {
		return -1, nil, fmt.Errorf("exec in container %s: empty command", id)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c, _, err := r.load(ctx, "exec in", id)
	if err != nil {
		return -1, nil, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return -1, nil, fmt.Errorf("exec in container %s: no task: %w", id, runtime.ErrNotRunning)
	}
	if err != nil {
		return -1, nil, fmt.Errorf("exec in container %s: load task: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return -1, nil, fmt.Errorf("exec in container %s: task status: %w", id, err)
	}
	if st.Status != ctrd.Running {
		return -1, nil, fmt.Errorf("exec in container %s: task is %s: %w", id, st.Status, runtime.ErrNotRunning)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return -1, nil, fmt.Errorf("exec in container %s: spec: %w", id, err)
	}
	if spec.Process == nil {
		return -1, nil, fmt.Errorf("exec in container %s: spec has no process", id)
	}
	pspec := *spec.Process
	pspec.Args = append([]string(nil), cmd...)
	pspec.Terminal = false
	pspec.ConsoleSize = nil

	execID, err := newExecID()
	if err != nil {
		return -1, nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	out := &runtime.BoundedBuffer{Max: runtime.ExecOutputMax}
	proc, err := task.Exec(ctx, execID, &pspec, cio.NewCreator(cio.WithStreams(nil, out, out)))
	if err != nil {
		return -1, nil, fmt.Errorf("exec %v in container %s: %w", cmd, id, err)
	}
	// From here the process exists in containerd and must be deleted,
	// whatever happens to ctx.
	defer r.deleteExec(proc, id)
	exited, err := proc.Wait(ctx) // before Start, so the exit cannot be missed
	if err != nil {
		return -1, nil, fmt.Errorf("exec %v in container %s: wait: %w", cmd, id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return -1, nil, fmt.Errorf("exec %v in container %s: %w", cmd, id, err)
	}
	select {
	case es := <-exited:
		code, _, err := es.Result()
		if err != nil {
			return -1, out.Bytes(), fmt.Errorf("exec %v in container %s: %w", cmd, id, err)
		}
		waitIO(proc.IO(), execIOGrace)
		return int(code), out.Bytes(), nil
	case <-ctx.Done():
		return -1, out.Bytes(), fmt.Errorf("exec %v in container %s: %w", cmd, id, ctx.Err())
	}
}

// deleteExec kills the exec process if it still runs (WithProcessKill
// waits for its exit) and deletes it, which closes its FIFOs.
func (r *Runtime) deleteExec(proc ctrd.Process, id string) {
	ctx, cancel := context.WithTimeout(r.nsCtx(context.Background()), execCleanupTimeout)
	defer cancel()
	if _, err := proc.Delete(ctx, ctrd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		r.log.Warn("delete exec process", "container", id, "exec", proc.ID(), "err", err)
	}
}

// waitIO waits up to grace for the output copies of an exited process.
func waitIO(io cio.IO, grace time.Duration) {
	if io == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		io.Cancel() // Delete waits for the copies to end
	}
}

// newExecID returns a fresh exec process ID (containerd allows 76
// characters of [A-Za-z0-9._-]).
func newExecID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("exec id: %w", err)
	}
	return "fleet-exec-" + hex.EncodeToString(b[:]), nil
}
