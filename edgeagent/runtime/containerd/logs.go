package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Log rotation. The shim, not this process, writes a task's log file (it
// opens it O_APPEND, see cio.LogFile), so the task keeps logging while the
// agent is down and we cannot make the shim reopen the file. Hence:
//
//   - keepPrevious, when a task starts: nothing writes the file, so the
//     last run's log is renamed to PATH.previous (and PATH.1 to
//     PATH.previous.1), so the new run starts with an empty file;
//   - rotateLive, every LogCheckInterval while the agent runs: a file over
//     the cap is copied to PATH.1 and truncated in place ("copytruncate",
//     as logrotate does). Thanks to O_APPEND the shim's next write lands at
//     the new end of file. Lines written between the copy and the truncate
//     are lost; that window is one file copy long.

// keepPrevious moves the log of a container's last run aside before its
// task starts again: PATH to PATH.previous and PATH.1 to
// PATH.previous.1, replacing the run before. It does nothing when both
// are empty or missing (a first start, or a run that wrote nothing), so
// the previous log stays that of the last run that wrote one. With
// rotation, a container's logs take at most about 4*LogMaxBytes: two
// files for the current run and two for the previous one.
func keepPrevious(path string) error {
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	if size(path) == 0 && size(path+".1") == 0 {
		return nil
	}
	if err := os.Rename(path, path+".previous"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move log %s aside: %w", path, err)
	}
	err := os.Rename(path+".1", path+".previous.1")
	if errors.Is(err, fs.ErrNotExist) {
		err = os.Remove(path + ".previous.1")
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("move log %s.1 aside: %w", path, err)
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
	if r.opts.LogMaxBytes < 0 {
		return
	}
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
			if p == "" {
				continue
			}
			// Under the container's lock: Start may rotate the same file.
			unlock := r.locks.lock(c.ID)
			rotated, err := rotateLive(p, r.opts.LogMaxBytes)
			unlock()
			if err != nil {
				r.log.Warn("log rotation", "container", c.ID, "path", p, "err", err)
			} else if rotated {
				r.log.Debug("rotated log", "container", c.ID, "path", p)
			}
		}
	}
}
