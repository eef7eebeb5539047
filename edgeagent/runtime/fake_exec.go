package runtime

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// ExecHandler answers the Fake's Exec for a running container: what the
// command would print and the code it would exit with. It runs in the
// caller's goroutine without the Fake's lock held (it may call Exit,
// say); ctx carries Exec's timeout.
type ExecHandler func(ctx context.Context, id string, cmd []string) (exitCode int, output []byte, err error)

// SetExecHandler makes h answer Exec (nil: every command exits 0 with no
// output, the default).
func (f *Fake) SetExecHandler(h ExecHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exec = h
}

// Exec implements Runtime: ErrNotFound for an unknown container,
// ErrNotRunning for one that does not run, else the handler's answer
// (its output cut to ExecOutputMax). A handler still running at the
// timeout is abandoned: Exec returns an error wrapping
// context.DeadlineExceeded, as the real runtime does.
func (f *Fake) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (int, []byte, error) {
	if len(cmd) == 0 {
		return -1, nil, fmt.Errorf("exec in container %s: empty command", id)
	}
	f.mu.Lock()
	f.calls.Exec++
	c, ok := f.containers[id]
	var st State
	if ok {
		st = c.state
	}
	h := f.exec
	f.mu.Unlock()
	switch {
	case !ok:
		return -1, nil, fmt.Errorf("exec in container %s: %w", id, ErrNotFound)
	case st != StateRunning:
		return -1, nil, fmt.Errorf("exec in container %s: task is %s: %w", id, st, ErrNotRunning)
	case h == nil:
		return 0, nil, nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	type answer struct {
		code int
		out  []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		code, out, err := h(ctx, id, slices.Clone(cmd))
		done <- answer{code, out, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			return -1, nil, fmt.Errorf("exec %v in container %s: %w", cmd, id, a.err)
		}
		if len(a.out) > ExecOutputMax {
			a.out = a.out[:ExecOutputMax]
		}
		return a.code, a.out, nil
	case <-ctx.Done():
		return -1, nil, fmt.Errorf("exec %v in container %s: %w", cmd, id, ctx.Err())
	}
}

// ExecStreamHandler answers the Fake's ExecStream for a running
// container, as the process would: it reads o.Stdin, writes o.Stdout and
// o.Stderr, reads o.Resize, and returns the exit code. It runs in the
// caller's goroutine without the Fake's lock held; it must return when
// ctx is done. o.Started has been called already.
type ExecStreamHandler func(ctx context.Context, id string, o ExecStreamOptions) (exitCode int, err error)

// SetExecStreamHandler makes h answer ExecStream (nil: the ExecHandler
// answers, its output written to Stdout; the default).
func (f *Fake) SetExecStreamHandler(h ExecStreamHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execStream = h
}

// ExecStream implements Runtime: ErrNotFound for an unknown container,
// ErrNotRunning for one that does not run; else the ExecStreamHandler
// runs, or, without one, the ExecHandler, whose output is written to
// Stdout.
func (f *Fake) ExecStream(ctx context.Context, id string, o ExecStreamOptions) (int, error) {
	if len(o.Cmd) == 0 {
		return -1, fmt.Errorf("exec in container %s: empty command", id)
	}
	f.mu.Lock()
	f.calls.ExecStream++
	c, ok := f.containers[id]
	var st State
	if ok {
		st = c.state
	}
	sh, h := f.execStream, f.exec
	f.mu.Unlock()
	switch {
	case !ok:
		return -1, fmt.Errorf("exec in container %s: %w", id, ErrNotFound)
	case st != StateRunning:
		return -1, fmt.Errorf("exec in container %s: task is %s: %w", id, st, ErrNotRunning)
	}
	if o.Started != nil {
		o.Started()
	}
	o.Cmd = slices.Clone(o.Cmd)
	if sh != nil {
		code, err := sh(ctx, id, o)
		if err != nil {
			return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, err)
		}
		return code, nil
	}
	if h == nil {
		return 0, nil
	}
	code, out, err := h(ctx, id, o.Cmd)
	if err != nil {
		return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, err)
	}
	if o.Stdout != nil && len(out) > 0 {
		if _, err := o.Stdout.Write(out); err != nil {
			return -1, fmt.Errorf("exec %v in container %s: output: %w", o.Cmd, id, err)
		}
	}
	return code, nil
}

// SetStats sets what Stats returns for container id (its Time is
// stamped by Stats).
func (f *Fake) SetStats(id string, s ContainerStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stats == nil {
		f.stats = map[string]ContainerStats{}
	}
	f.stats[id] = s
}

// Stats implements Runtime: the figures SetStats set (zero without),
// ErrNotFound for an unknown container, ErrNotRunning for one that does
// not run.
func (f *Fake) Stats(ctx context.Context, id string) (ContainerStats, error) {
	if err := ctx.Err(); err != nil {
		return ContainerStats{}, fmt.Errorf("stats of container %s: %w", id, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Stats++
	c, ok := f.containers[id]
	switch {
	case !ok:
		return ContainerStats{}, fmt.Errorf("stats of container %s: %w", id, ErrNotFound)
	case c.state != StateRunning:
		return ContainerStats{}, fmt.Errorf("stats of container %s: task is %s: %w", id, c.state, ErrNotRunning)
	}
	s := f.stats[id]
	s.Time = f.now()
	return s, nil
}
