package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// roleEnv marks a re-executed copy of this binary (or of its test binary)
// that must play a role (hollow, floor, hub) instead of running the suite.
const roleEnv = "FLEET_SCALE_ROLE"

// child is a re-executed copy of this program playing a role, driven by
// JSON lines: commands on its stdin, replies on its stdout. Its stderr goes
// to a log file.
type child struct {
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan []byte
	exited  chan struct{}
	err     error // of Wait, once exited is closed
	logPath string
	logf    *os.File
	inMu    sync.Mutex
}

// startChild starts `self role args...` with its stderr in logPath.
func startChild(name, logPath, role string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(self, append([]string{role}, args...)...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	cmd.Stderr = logf
	in, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, in: in, lines: make(chan []byte, 16), exited: make(chan struct{}), logPath: logPath, logf: logf}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 256<<20) // latency lists can be long
		for sc.Scan() {
			c.lines <- append([]byte(nil), sc.Bytes()...)
		}
		c.err = cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	return c, nil
}

// send writes one command.
func (c *child) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: send: %w (log: %s)", c.name, err, c.logPath)
	}
	return nil
}

// await reads replies until one whose "op" is op, and decodes it into v.
// A reply with op "error", the child's exit or ctx's end is an error.
func (c *child) await(ctx context.Context, op string, v any) error {
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %q: %w (log: %s)", c.name, op, context.Cause(ctx), c.logPath)
		case line := <-c.lines:
			var head struct {
				Op    string `json:"op"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(line, &head); err != nil {
				return fmt.Errorf("%s: bad reply %q: %w", c.name, schema.Truncate(string(line), 200, "..."), err)
			}
			switch head.Op {
			case op:
				if v == nil {
					return nil
				}
				return json.Unmarshal(line, v)
			case "error":
				return fmt.Errorf("%s: %s (log: %s)", c.name, head.Error, c.logPath)
			}
		case <-c.exited:
			return fmt.Errorf("%s exited (%v) while waiting for %q; log %s:\n%s", c.name, c.err, op, c.logPath, tail(c.logPath, 2000))
		}
	}
}

// call sends a command and awaits the reply op.
func (c *child) call(ctx context.Context, cmd any, op string, v any) error {
	if err := c.send(cmd); err != nil {
		return err
	}
	return c.await(ctx, op, v)
}

// stop asks the child to stop by closing its stdin, then SIGTERM and
// SIGKILL if it lingers.
func (c *child) stop(grace time.Duration) error {
	c.inMu.Lock()
	_ = c.in.Close()
	c.inMu.Unlock()
	for _, sig := range []os.Signal{nil, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != nil {
			_ = c.cmd.Process.Signal(sig)
		}
		t := time.NewTimer(grace)
		select {
		case <-c.exited:
			t.Stop()
			if sig == syscall.SIGKILL {
				return fmt.Errorf("%s had to be killed", c.name)
			}
			return nil
		case <-t.C:
		}
	}
	<-c.exited
	return errors.New(c.name + " did not exit")
}

// tail returns the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}
