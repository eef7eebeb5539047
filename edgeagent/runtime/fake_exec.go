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
