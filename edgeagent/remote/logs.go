package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/remote/logfile"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

var errEOF = io.EOF

// resolve finds the container a request names: the pod's containers are
// those of the desired state and those the runtime lists. container may
// be empty when the pod has one. It returns the container's name and
// its runtime record (nil when the runtime has none).
func (s *Server) resolve(ctx context.Context, pod, container string) (string, *runtime.Container, error) {
	names := map[string]bool{}
	if s.o.Pods != nil {
		for _, c := range s.o.Pods()[pod] {
			names[c] = true
		}
	}
	list, err := s.o.Runtime.List(ctx)
	if err != nil && len(names) == 0 {
		return "", nil, errorf(schema.CodeUnavailable, "list containers of pod %s: %v", pod, err)
	}
	byName := map[string]*runtime.Container{}
	for i := range list {
		c := &list[i]
		if c.Pod != pod {
			continue
		}
		names[c.Name] = true
		// Prefer a running record over an exited one of the same name
		// (a revision being replaced).
		if b := byName[c.Name]; b == nil || (b.State != runtime.StateRunning && c.State == runtime.StateRunning) {
			byName[c.Name] = c
		}
	}
	if len(names) == 0 {
		return "", nil, errorf(schema.CodeNotFound, "pod %s not found on device %s", pod, s.o.Device)
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	switch {
	case container == "" && len(sorted) == 1:
		container = sorted[0]
	case container == "":
		return "", nil, errorf(schema.CodeBadRequest, "pod %s has %d containers (%s): name one", pod, len(sorted), strings.Join(sorted, ", "))
	case !names[container]:
		return "", nil, errorf(schema.CodeNotFound, "pod %s has no container %s; it has: %s", pod, container, strings.Join(sorted, ", "))
	}
	return container, byName[container], nil
}

// logs answers a logs request: the selected part of the log, then, when
// following, what the container writes next (across rotations and
// restarts) until the hub cancels or the lease expires.
//
// Dates (sinceSeconds, timestamps): the log file has no per-line times,
// so a line is dated by the Server's index (logfile.Index): by the first
// sample of the file's size that saw it, taken every IndexInterval (5 s)
// and when a request reads the file. A date is thus late by up to one
// interval; a file never sampled (written while the agent was down) is
// dated by its modification time; lines read while following get the
// time they were read (within FollowInterval of their writing).
func (o *op) logs() error {
	lo := o.req.Logs
	if o.s.o.LogPath == nil {
		return errorf(schema.CodeUnavailable, "device %s keeps no container logs", o.s.o.Device)
	}
	name, _, err := o.s.resolve(o.ctx, lo.Pod, lo.Container)
	if err != nil {
		return err
	}
	path := o.s.o.LogPath(lo.Pod, name)
	now := o.s.o.Now()
	if !lo.Previous {
		o.s.index.Sample(path, now)
	}
	files := logfile.Files(path, lo.Previous)
	if lo.Previous && len(files) == 0 {
		return errorf(schema.CodeNotFound, "no previous log of %s/%s on device %s: the container has not restarted", lo.Pod, name, o.s.o.Device)
	}
	opts := logfile.Options{
		TailLines: lo.TailLines, LimitBytes: lo.LimitBytes, Timestamps: lo.Timestamps,
		Index: o.s.index, Now: o.s.o.Now,
	}
	if lo.SinceSeconds > 0 {
		opts.Since = now.Add(-time.Duration(lo.SinceSeconds) * time.Second)
	}
	out := &chunker{w: streamWriter{o: o, stream: schema.StreamLog}}
	w := logfile.NewWriter(opts, out.write)
	pos, err := logfile.Read(files, w)
	if err == nil || errors.Is(err, logfile.ErrLimit) {
		if ferr := out.flush(); ferr != nil {
			err = ferr
		}
	}
	if errors.Is(err, logfile.ErrLimit) {
		err = nil
		lo.Follow = false
	}
	if err != nil || !lo.Follow || lo.Previous {
		if pos.File != nil {
			pos.File.Close()
		}
		return o.logErr(err)
	}
	fl := logfile.NewFollower(path, pos, w)
	defer fl.Close()
	t := time.NewTicker(o.s.o.FollowInterval)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			if errors.Is(context.Cause(o.ctx), context.Canceled) {
				return nil // the hub cancelled: a follow's normal end
			}
			return o.ctx.Err()
		case <-t.C:
		}
		err := fl.Poll()
		if err == nil || errors.Is(err, logfile.ErrLimit) {
			if ferr := out.flush(); ferr != nil {
				return o.logErr(ferr)
			}
		}
		if errors.Is(err, logfile.ErrLimit) {
			return nil
		}
		if err != nil {
			return o.logErr(err)
		}
	}
}

func (o *op) logErr(err error) error {
	if err == nil || o.ctx.Err() != nil {
		if err != nil && errors.Is(context.Cause(o.ctx), context.Canceled) {
			return nil
		}
		return err
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	return errorf(schema.CodeInternal, "read log of %s/%s: %v", o.req.Logs.Pod, o.req.Logs.Container, err)
}

// chunker gathers small writes (a log line each) into chunks of up to
// MaxChunkBytes.
type chunker struct {
	w   io.Writer
	buf []byte
}

func (c *chunker) write(p []byte) error {
	c.buf = append(c.buf, p...)
	for len(c.buf) >= schema.MaxChunkBytes {
		if _, err := c.w.Write(c.buf[:schema.MaxChunkBytes]); err != nil {
			return err
		}
		c.buf = append(c.buf[:0], c.buf[schema.MaxChunkBytes:]...)
	}
	return nil
}

func (c *chunker) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		return fmt.Errorf("send log: %w", err)
	}
	return nil
}
