package remote

import (
	"context"
	"errors"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// exec answers an exec request: a "started" response (Seq 1, no data)
// once the process runs, its output, and a Done with its exit code.
// Input comes from op stdin requests, terminal sizes from op resize; a
// cancel (or the lease) kills the process.
func (o *op) exec() schema.Response {
	eo := o.req.Exec
	name, ctr, err := o.s.resolve(o.ctx, eo.Pod, eo.Container)
	if err != nil {
		return o.result(err)
	}
	if ctr == nil || ctr.State != runtime.StateRunning {
		return o.result(errorf(schema.CodeNotRunning, "container %s/%s on device %s is not running", eo.Pod, name, o.s.o.Device))
	}
	started := false
	opts := runtime.ExecStreamOptions{
		Cmd:    eo.Command,
		TTY:    eo.TTY,
		Stdout: streamWriter{o: o, stream: schema.StreamStdout},
		Stderr: streamWriter{o: o, stream: schema.StreamStderr},
		Resize: o.resize,
		Started: func() {
			started = true
			if err := o.send(o.ctx, &schema.Response{}, false); err != nil {
				o.s.log.Debug("exec started response not sent", "id", o.req.ID, "err", err)
			}
		},
	}
	if eo.TTY && eo.Size != nil {
		opts.Size = &runtime.TermSize{Cols: eo.Size.Cols, Rows: eo.Size.Rows}
	}
	if eo.Stdin {
		opts.Stdin = stdinReader{o}
	}
	o.s.log.Info("exec", "id", o.req.ID, "pod", eo.Pod, "container", name, "command", eo.Command, "tty", eo.TTY)
	code, err := o.s.o.Runtime.ExecStream(o.ctx, ctr.ID, opts)
	switch {
	case err == nil:
		return schema.Response{ExitCode: &code}
	case errors.Is(err, runtime.ErrNotRunning):
		return o.result(errorf(schema.CodeNotRunning, "container %s/%s on device %s is not running", eo.Pod, name, o.s.o.Device))
	case errors.Is(err, runtime.ErrNotFound):
		return o.result(errorf(schema.CodeNotFound, "pod %s has no container %s on device %s", eo.Pod, name, o.s.o.Device))
	case o.ctx.Err() != nil:
		if errors.Is(context.Cause(o.ctx), context.Canceled) {
			return schema.Response{Code: schema.CodeInternal, Error: "exec cancelled: the process was killed"}
		}
		return o.result(err)
	case !started:
		return o.result(errorf(schema.CodeBadRequest, "exec %q in %s/%s: %v", eo.Command, eo.Pod, name, err))
	default:
		return o.result(errorf(schema.CodeInternal, "exec %q in %s/%s: %v", eo.Command, eo.Pod, name, err))
	}
}
