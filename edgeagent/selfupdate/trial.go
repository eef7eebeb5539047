package selfupdate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TrialEnv names the descriptor on which an agent in trial reports its
// progress to the agent that started it; its presence makes the agent a
// trial (cmd/fleet-agent).
const TrialEnv = "FLEET_AGENT_TRIAL_FD"

// DefaultTrialDeadline is how long a new agent has to connect and report.
const DefaultTrialDeadline = 2 * time.Minute

// The progress lines of a trial, in order.
const (
	lineAdopted   = "adopted"
	lineConnected = "connected"
	lineReported  = "reported"
)

// TrialOptions configure Trial. Layout, StateDir and Staged are required.
type TrialOptions struct {
	Layout   Layout
	StateDir string
	Staged   Staged
	// Args are the agent's arguments (os.Args[1:]), given to the new one.
	Args []string
	// Env is the environment (default os.Environ()).
	Env []string
	// Deadline is the time the new agent has to report (default
	// DefaultTrialDeadline).
	Deadline time.Duration
	// Stdout and Stderr receive the new agent's output (default the
	// process's).
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// StopTimeout is how long the new agent has to stop after it passed,
	// before it is killed (default 15 s).
	StopTimeout time.Duration
}

// TrialResult says how a trial went.
type TrialResult struct {
	// Passed says the new agent reported within the deadline and next is
	// current now.
	Passed bool
	// Reason says why it failed.
	Reason string
	// Connected and Reported are the times from its start to its first
	// broker connection and its first status (zero: not reached); PID is
	// its process, MaxRSS its peak resident memory in bytes.
	Connected, Reported time.Duration
	PID                 int
	MaxRSS              int64
}

// Trial runs the staged binary (next) as a child with the agent's own
// arguments and waits for it to report, at most Deadline. On success it
// renames next over current, stops the child and returns Passed: the
// caller executes current (Exec). On failure it kills the child, removes
// next and records Failed with the reason: the caller executes current,
// the previous binary, which reports it. An error is returned only when
// ctx ended the trial (the record stays in Trial: the next start counts
// it as interrupted).
func Trial(ctx context.Context, o TrialOptions) (TrialResult, error) {
	o.defaults()
	log := o.Logger.With("part", "selfupdate", "version", o.Staged.Version)
	c, err := startChild(o)
	if err != nil {
		return o.failed(log, TrialResult{}, fmt.Sprintf("the new agent (%s) did not start: %v", o.Staged.Version, err))
	}
	res := TrialResult{PID: c.cmd.Process.Pid}
	log.Info("agent trial started", "pid", res.PID, "deadline", o.Deadline)
	deadline := time.NewTimer(o.Deadline)
	defer deadline.Stop()
	connected := false
	for {
		select {
		case <-ctx.Done():
			c.kill()
			_ = o.Layout.ClearNext()
			return res, fmt.Errorf("agent trial: %w", ctx.Err())
		case <-deadline.C:
			c.kill()
			res.MaxRSS = c.maxRSS()
			what := "did not connect to the broker"
			if connected {
				what = "connected but did not report its status"
			}
			return o.failed(log, res, fmt.Sprintf("the new agent (%s) %s within %v", o.Staged.Version, what, o.Deadline))
		case <-c.exited:
			res.MaxRSS = c.maxRSS()
			when := "at start"
			if connected {
				when = "during its trial"
			}
			return o.failed(log, res, fmt.Sprintf("the new agent (%s) exited %s (%v)%s", o.Staged.Version, when, c.waitErr, c.tail()))
		case line := <-c.lines:
			switch line {
			case lineConnected:
				connected, res.Connected = true, time.Since(c.start)
				log.Info("agent in trial connected", "after", res.Connected.Round(time.Millisecond))
			case lineReported:
				res.Reported = time.Since(c.start)
				return o.passed(log, c, res)
			}
		}
	}
}

func (o *TrialOptions) defaults() {
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultTrialDeadline
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 15 * time.Second
	}
}

func (o *TrialOptions) passed(log *slog.Logger, c *child, res TrialResult) (TrialResult, error) {
	if err := o.Layout.Commit(); err != nil {
		// current is still the previous binary: a failure, not a brick.
		c.kill()
		return o.failed(log, res, fmt.Sprintf("the new agent (%s) passed its trial, but %v", o.Staged.Version, err))
	}
	res.MaxRSS = c.maxRSS()
	log.Info("agent trial passed: the new agent is current", "reported_after", res.Reported.Round(time.Millisecond))
	c.stop(o.StopTimeout)
	res.Passed = true
	return res, nil
}

func (o *TrialOptions) failed(log *slog.Logger, res TrialResult, reason string) (TrialResult, error) {
	res.Reason = reason
	log.Error("agent trial failed; going back to the previous agent", "reason", reason)
	if err := o.Layout.ClearNext(); err != nil {
		log.Error("trial link not removed", "err", err)
	}
	if err := Fail(o.StateDir, o.Staged, reason, time.Now()); err != nil {
		log.Error("trial failure not recorded", "err", err)
	}
	return res, nil
}

// child is the agent in trial.
type child struct {
	cmd     *exec.Cmd
	start   time.Time
	lines   chan string
	exited  chan struct{}
	waitErr error
	rusage  *syscall.Rusage

	mu      sync.Mutex
	errTail []string // the last lines of its stderr
}

func startChild(o TrialOptions) (*child, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pw.Close()
	cmd := exec.Command(o.Layout.Next(), o.Args...)
	cmd.Env = append(withoutEnv(o.Env, TrialEnv), TrialEnv+"=3")
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stdout = o.Stdout
	// The child dies with this process: killing the agent kills the
	// trial, and the next start is current's.
	cmd.SysProcAttr = trialProcAttr()
	c := &child{cmd: cmd, lines: make(chan string, 4), exited: make(chan struct{})}
	errR, err := cmd.StderrPipe()
	if err != nil {
		pr.Close()
		return nil, err
	}
	started := make(chan error, 1)
	go c.run(started, errR, o.Stderr)
	if err := <-started; err != nil {
		pr.Close()
		return nil, err
	}
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case c.lines <- strings.TrimSpace(sc.Text()):
			case <-c.exited:
				return
			}
		}
	}()
	return c, nil
}

// run starts the child, says so on started, and waits for it. It holds
// its OS thread throughout: the kernel sends PR_SET_PDEATHSIG when the
// thread that forked the child ends, not the process, and the Go runtime
// may end an idle thread; locked, this one lives as long as the child.
func (c *child) run(started chan<- error, errR io.Reader, stderr io.Writer) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.start = time.Now()
	if err := c.cmd.Start(); err != nil {
		started <- err
		return
	}
	var copied sync.WaitGroup
	copied.Go(func() { c.copyErr(errR, stderr) })
	started <- nil
	copied.Wait() // Wait closes the stderr pipe: read it all first
	c.waitErr = c.cmd.Wait()
	if ps := c.cmd.ProcessState; ps != nil {
		c.rusage, _ = ps.SysUsage().(*syscall.Rusage)
	}
	close(c.exited)
}

// copyErr copies the child's stderr on and keeps its last lines.
func (c *child) copyErr(r io.Reader, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		c.mu.Lock()
		c.errTail = append(c.errTail, line)
		if len(c.errTail) > 3 {
			c.errTail = c.errTail[1:]
		}
		c.mu.Unlock()
	}
}

// tail is the child's last line of output, for a reason.
func (c *child) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range slices.Backward(c.errTail) {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			return ": " + l
		}
	}
	return ""
}

// kill kills the child's process group (what it started too), and waits.
func (c *child) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop asks the child to stop (SIGTERM), killing it after timeout.
func (c *child) stop(timeout time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		c.kill()
	}
}

// maxRSS is the child's peak resident memory, in bytes: from the kernel's
// accounting once it exited, else from /proc.
func (c *child) maxRSS() int64 {
	select {
	case <-c.exited:
		if c.rusage != nil {
			return int64(c.rusage.Maxrss) * 1024
		}
		return 0
	default:
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func withoutEnv(env []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// Exec replaces the process with current, given args and env (the trial
// variable removed): after a trial, the one way on. It returns only on
// failure.
func Exec(l Layout, args, env []string) error {
	argv := append([]string{l.Current()}, args...)
	err := syscall.Exec(l.Current(), argv, withoutEnv(env, TrialEnv))
	return fmt.Errorf("exec %s: %w", l.Current(), err)
}

// Reporter is the trial's side in the new agent: it tells the agent
// that started it how far it got. Its zero value (no trial) does nothing.
type Reporter struct {
	mu   sync.Mutex
	f    *os.File
	sent map[string]bool
}

// TrialReporter returns the Reporter of this process: nil unless it was
// started by Trial (TrialEnv).
func TrialReporter() (*Reporter, error) {
	v, ok := os.LookupEnv(TrialEnv)
	if !ok {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want a file descriptor", TrialEnv, v)
	}
	return &Reporter{f: os.NewFile(uintptr(fd), "trial"), sent: map[string]bool{}}, nil
}

// Adopted, Connected and Reported each tell it once: the first pass over
// the running containers is done, the broker session is up, a status
// with this version was published.
func (r *Reporter) Adopted()   { r.send(lineAdopted) }
func (r *Reporter) Connected() { r.send(lineConnected) }
func (r *Reporter) Reported()  { r.send(lineReported) }

func (r *Reporter) send(line string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent[line] {
		return
	}
	r.sent[line] = true
	if _, err := io.WriteString(r.f, line+"\n"); err != nil && !errors.Is(err, os.ErrClosed) {
		// The agent that started the trial is gone: this process dies
		// with it (PR_SET_PDEATHSIG).
		return
	}
}
