package containerd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// execStreamIdle is how long ExecStream waits, once the process has
// exited, for output that no longer moves: a background child that
// keeps the output open must not hold the answer back, but output held
// up by a slow reader (a blocked Write) is waited for.
const execStreamIdle = 2 * time.Second

// ExecStream implements runtime.Runtime: like Exec, an exec process of
// the container's task with the container's process spec and o.Cmd as
// its arguments, but with its input and output streamed through FIFOs
// (cio.WithStreams), and with a pseudo-terminal when o.TTY
// (pspec.Terminal, cio.WithTerminal; o.Resize applied with the
// process's Resize). The process's input is closed when o.Stdin returns
// io.EOF (cio closes the FIFO and the shim the process's end).
func (r *Runtime) ExecStream(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
	ctx = r.nsCtx(ctx)
	if len(o.Cmd) == 0 {
		return -1, fmt.Errorf("exec in container %s: empty command", id)
	}
	task, base, err := r.execTarget(ctx, id)
	if err != nil {
		return -1, err
	}
	pspec := streamProcessSpec(base, o)
	execID, err := newExecID()
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	var watch ioWatch
	creator, stdinDone := execStreamIO(o, &watch)
	proc, err := task.Exec(ctx, execID, pspec, creator)
	if err != nil {
		return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, ctxErr(ctx, err))
	}
	defer r.deleteExec(proc, id)
	exited, err := proc.Wait(ctx)
	if err != nil {
		return -1, fmt.Errorf("exec %v in container %s: wait: %w", o.Cmd, id, ctxErr(ctx, err))
	}
	if err := proc.Start(ctx); err != nil {
		return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, ctxErr(ctx, err))
	}
	if o.Started != nil {
		o.Started()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if o.Stdin != nil {
		wg.Go(func() { r.closeInputAtEOF(bg, proc, stdinDone, id, execID) })
	}
	if o.TTY && o.Resize != nil {
		wg.Go(func() { r.forwardResizes(bg, proc, o.Resize, id, execID) })
	}
	select {
	case es := <-exited:
		code, _, err := es.Result()
		if err != nil {
			return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, err)
		}
		if !watch.wait(ctx, proc.IO(), execStreamIdle) {
			return -1, fmt.Errorf("exec %v in container %s: output: %w", o.Cmd, id, ctx.Err())
		}
		return int(code), nil
	case <-ctx.Done():
		return -1, fmt.Errorf("exec %v in container %s: %w", o.Cmd, id, ctx.Err())
	}
}

// ctxErr is err, or ctx's own error once ctx is done: a call that failed
// because its context ended says so, for errors.Is (containerd's gRPC
// turns a deadline that passes during the call into an Unknown error).
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	// The deadline travels to containerd and on to the shim, whose side
	// of it can end a moment before ours and comes back as an Unknown
	// error saying so: the same deadline, so the same error.
	if _, ok := ctx.Deadline(); ok && err != nil && strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// execTarget returns the running task of container id and the
// container's process spec, which an exec process starts from.
func (r *Runtime) execTarget(ctx context.Context, id string) (ctrd.Task, specs.Process, error) {
	c, _, err := r.load(ctx, "exec in", id)
	if err != nil {
		return nil, specs.Process{}, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: no task: %w", id, runtime.ErrNotRunning)
	}
	if err != nil {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: load task: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: task status: %w", id, err)
	}
	if st.Status != ctrd.Running {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: task is %s: %w", id, st.Status, runtime.ErrNotRunning)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: spec: %w", id, err)
	}
	if spec.Process == nil {
		return nil, specs.Process{}, fmt.Errorf("exec in container %s: spec has no process", id)
	}
	return task, *spec.Process, nil
}

// streamProcessSpec is the container's process spec pspec run as o.Cmd,
// with a terminal of o.Size when o.TTY. It shares no slice with pspec.
func streamProcessSpec(pspec specs.Process, o runtime.ExecStreamOptions) *specs.Process {
	pspec.Args = append([]string(nil), o.Cmd...)
	pspec.Terminal = o.TTY
	pspec.ConsoleSize = nil
	if o.TTY && o.Size != nil {
		pspec.ConsoleSize = &specs.Box{Width: uint(o.Size.Cols), Height: uint(o.Size.Rows)}
	}
	if o.TTY {
		// A shell wants to know it has a terminal it can draw on.
		pspec.Env = append(append([]string(nil), pspec.Env...), "TERM=xterm")
	}
	return &pspec
}

// execStreamIO returns the creator of the process's FIFOs, its output
// through watch, and a channel closed once o.Stdin reaches its end.
func execStreamIO(o runtime.ExecStreamOptions, watch *ioWatch) (cio.Creator, chan struct{}) {
	stdout, stderr := watch.writer(o.Stdout), watch.writer(o.Stderr)
	var stdin io.Reader
	stdinDone := make(chan struct{})
	if o.Stdin != nil {
		stdin = &eofReader{r: o.Stdin, done: stdinDone}
	}
	copts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr)}
	if o.TTY {
		copts = append(copts, cio.WithTerminal)
	}
	return cio.NewCreator(copts...), stdinDone
}

// closeInputAtEOF closes the process's input once stdinDone is closed,
// or returns when bg is done. The shim keeps a writer of the input FIFO
// open, so the process sees end of input only once it is told to close
// it.
func (r *Runtime) closeInputAtEOF(bg context.Context, proc ctrd.Process, stdinDone <-chan struct{}, id, execID string) {
	select {
	case <-bg.Done():
		return
	case <-stdinDone:
	}
	if err := proc.CloseIO(bg, ctrd.WithStdinCloser); err != nil && bg.Err() == nil {
		r.log.Debug("close exec input", "container", id, "exec", execID, "err", err)
	}
}

// forwardResizes applies each terminal size of resize to the process
// until bg is done.
func (r *Runtime) forwardResizes(bg context.Context, proc ctrd.Process, resize <-chan runtime.TermSize, id, execID string) {
	for {
		select {
		case <-bg.Done():
			return
		case sz := <-resize:
			if err := proc.Resize(bg, uint32(sz.Cols), uint32(sz.Rows)); err != nil && bg.Err() == nil {
				r.log.Debug("resize exec terminal", "container", id, "exec", execID, "err", err)
			}
		}
	}
}

// ioWatch tracks the output writes of an exec process: when the last
// one ended and whether one is blocked now.
type ioWatch struct {
	inflight atomic.Int32
	last     atomic.Int64 // unix nanoseconds of the last write's end
}

func (w *ioWatch) writer(dst io.Writer) io.Writer {
	if dst == nil {
		return io.Discard
	}
	return watchedWriter{w, dst}
}

type watchedWriter struct {
	w   *ioWatch
	dst io.Writer
}

func (ww watchedWriter) Write(p []byte) (int, error) {
	ww.w.inflight.Add(1)
	defer func() {
		ww.w.last.Store(time.Now().UnixNano())
		ww.w.inflight.Add(-1)
	}()
	return ww.dst.Write(p)
}

// wait waits for the output copies of an exited process to end. It
// cancels them when no write has moved for idle (and none is blocked),
// and reports false if ctx ended first.
func (w *ioWatch) wait(ctx context.Context, pio cio.IO, idle time.Duration) bool {
	if pio == nil {
		return true
	}
	done := make(chan struct{})
	go func() {
		pio.Wait()
		close(done)
	}()
	exitedAt := time.Now()
	t := time.NewTicker(idle / 8)
	defer t.Stop()
	for {
		select {
		case <-done:
			return true
		case <-ctx.Done():
			pio.Cancel() // the copies end at the latest when deleteExec closes the IO
			return false
		case now := <-t.C:
			last := max(exitedAt.UnixNano(), w.last.Load())
			if w.inflight.Load() == 0 && now.UnixNano()-last > int64(idle) {
				pio.Cancel()
				return true
			}
		}
	}
}

// eofReader closes done when its reader reaches the end of input.
type eofReader struct {
	r    io.Reader
	done chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.done) })
	}
	return n, err
}
