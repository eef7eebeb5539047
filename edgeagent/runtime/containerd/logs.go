package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"

	"github.com/fleetmq/fleet/edgeagent/logwriter"
)

// Log files. A task's log is PATH (labelLogPath), its rotated files
// PATH.1 (newest) to PATH.N, and the previous run's PATH.previous and
// PATH.previous.1 to .N (logs --previous). Something that outlives this
// process writes them, so that a task keeps logging while the agent is
// down:
//
//   - with Options.LogWriter, the program the shim starts for the task
//     (binary:// log URI; "fleet-agent log-writer", package logwriter)
//     rotates by rename as it writes, so the files never hold more than
//     max × (files + 1) bytes. This is the choice of issue 40: the
//     writer is the task's, not the agent's, and no copy or timer is
//     involved. Its cost is one small process per running container.
//   - without, the shim writes PATH itself (cio.LogFile, O_APPEND) and
//     cannot be made to reopen it, so rotateLive copies a file over the
//     cap to PATH.1 and truncates it in place every LogCheckInterval
//     ("copytruncate"). Lines written between the copy and the truncate
//     are lost, and a burst between two checks stays on disk whole. Tasks
//     started before an upgrade to a log writer stay in this mode until
//     they restart (no labelLogWriter).
//
// In both, keepPrevious moves the last run's files aside when a task
// starts, while nothing writes them.

// logLimits returns the log cap and the number of rotated files of a
// container, from its labels or the runtime's options. A cap ≤ 0 is none.
func (r *Runtime) logLimits(labels map[string]string) (int64, int) {
	limit, files := r.opts.LogMaxBytes, r.opts.LogMaxFiles
	if n, err := strconv.ParseInt(labels[labelLogMaxBytes], 10, 64); err == nil && n > 0 {
		limit = n
	}
	if n, err := strconv.Atoi(labels[labelLogMaxFiles]); err == nil && n > 0 {
		files = n
	}
	return limit, files
}

// newTask moves the last run's log aside and creates the container's task
// with its output going to the log. It returns the value of
// labelLogWriter for the task: "true" when Options.LogWriter writes the
// log. A log writer the shim cannot start (a path only this process
// sees, as for an agent in a container) is not fatal: the shim writes
// the file instead, with a warning.
func (r *Runtime) newTask(ctx context.Context, c ctrd.Container, labels map[string]string) (ctrd.Task, string, error) {
	id := c.ID()
	p := labels[labelLogPath]
	if p == "" {
		t, err := c.NewTask(ctx, cio.NullIO)
		return t, "", err
	}
	// No task writes the files now: plain renames are safe. The last
	// run's log becomes PATH.previous (logs --previous), so the file
	// holds only the run about to start.
	if err := keepPrevious(p); err != nil {
		r.log.Warn("keep previous log", "container", id, "err", err)
	}
	if r.opts.LogWriter != "" {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			// The writer drops what it cannot write and tries again.
			r.log.Warn("log directory", "container", id, "err", err)
		}
		limit, files := r.logLimits(labels)
		o := logwriter.Options{Path: p, MaxBytes: limit, MaxFiles: files}
		t, err := c.NewTask(ctx, cio.BinaryIO(r.opts.LogWriter, map[string]string{"log-writer": o.Encode()}))
		if err == nil {
			return t, "true", nil
		}
		r.log.Warn("log writer did not start; the shim writes the log, copy-truncated", "container", id, "log_writer", r.opts.LogWriter, "err", err)
	}
	t, err := c.NewTask(ctx, cio.LogFile(p))
	return t, "", err
}

// keepPrevious moves the log of a container's last run aside before its
// task starts again: PATH to PATH.previous and each PATH.K to
// PATH.previous.K, replacing the run before (whose extra rotated files
// are removed). It does nothing when all of them are empty or missing (a
// first start, or a run that wrote nothing), so the previous log stays
// that of the last run that wrote one.
func keepPrevious(path string) error {
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	rotated := logwriter.Files(path)
	empty := size(path) == 0
	for _, f := range rotated {
		empty = empty && size(f) == 0
	}
	if empty {
		return nil
	}
	prev := path + ".previous"
	if err := os.Rename(path, prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move log %s aside: %w", path, err)
	}
	moved := map[string]bool{}
	for _, f := range rotated {
		suffix := strings.TrimPrefix(f, path) // ".K"
		if err := os.Rename(f, prev+suffix); err != nil {
			return fmt.Errorf("move log %s aside: %w", f, err)
		}
		moved[prev+suffix] = true
	}
	for _, f := range logwriter.Files(prev) {
		if !moved[f] {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove old log %s: %w", f, err)
			}
		}
	}
	return nil
}

// rotateIdle renames path to path.1 if it is larger than max bytes. Start
// no longer needs it (keepPrevious empties the file); kept, with its
// test, for a log that must be capped while no task writes it.
func rotateIdle(path string, max int64) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Size() <= max {
		return nil
	}
	if err := os.Rename(path, path+".1"); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	return nil
}

// rotateLive copies path to path.1 and truncates it if it is larger than
// max bytes. It reports whether it rotated.
func rotateLive(path string, max int64) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Size() <= max {
		return false, nil
	}
	src, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("rotate log: %w", err)
	}
	defer src.Close()
	tmp := path + ".1.tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return false, fmt.Errorf("rotate log: %w", err)
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("rotate log: copy: %w", err)
	}
	if err := os.Truncate(path, 0); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("rotate log: truncate: %w", err)
	}
	if err := os.Rename(tmp, path+".1"); err != nil {
		return false, fmt.Errorf("rotate log: %w", err)
	}
	return true, nil
}

// rotateLogs runs rotateLive over every managed container's log file each
// LogCheckInterval until ctx is done.
func (r *Runtime) rotateLogs(ctx context.Context) {
	defer close(r.rotatorDone)
	t := time.NewTicker(r.opts.LogCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ctrs, err := r.client.ContainerService().List(r.nsCtx(ctx), managedFilter)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("log rotation: list containers", "err", err)
			}
			continue
		}
		for _, c := range ctrs {
			p := c.Labels[labelLogPath]
			if p == "" || c.Labels[labelLogWriter] != "" {
				continue // no log, or one its writer rotates
			}
			limit, _ := r.logLimits(c.Labels)
			if limit <= 0 {
				continue
			}
			// Under the container's lock: Start may rotate the same file.
			unlock := r.locks.lock(c.ID)
			rotated, err := rotateLive(p, limit)
			unlock()
			if err != nil {
				r.log.Warn("log rotation", "container", c.ID, "path", p, "err", err)
			} else if rotated {
				r.log.Debug("rotated log", "container", c.ID, "path", p)
			}
		}
	}
}
