package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// AgentOptions configure StartAgent. Device, Broker, Token (or
// BootstrapToken) and ContainerdSocket are required.
type AgentOptions struct {
	Device string
	// Broker is the MQTT URL the agent dials (the broker's, or a Proxy's).
	Broker string
	// Token is written to a 0600 token file (--token-file).
	Token string
	// BootstrapToken, instead of Token, is written to a 0600 file
	// (--bootstrap-token-file): the agent enrolls as Device, and keeps
	// the token it gets in its state directory.
	BootstrapToken string
	// ContainerdSocket and Namespace select the agent's containerd;
	// Namespace defaults to "fleet-<device>".
	ContainerdSocket string
	Namespace        string
	// StateDir defaults to a fresh temporary directory.
	StateDir string
	// ResyncInterval is --resync-interval; default 2 s.
	ResyncInterval time.Duration
	// KeepAlive is --keepalive; default 15 s, so that a partitioned
	// agent is offline within 23 s (the agent's default, 120 s, would
	// take 3 minutes).
	KeepAlive time.Duration
	// HubSigningKey, if set, is pinned (--hub-signing-key): without a
	// pinned key the agent runs nothing from the broker.
	HubSigningKey string
	// Join, instead of Broker, Token and HubSigningKey, is the join
	// string the agent starts with (--join): Device must be the one it
	// names.
	Join string
	// Args are extra flags, after the harness's own (so they win).
	Args []string
	// Env are extra environment variables (TZ=Asia/Kolkata, say).
	Env []string
}

// Agent is a fleet-agent process. Stopping or killing it leaves its
// containers running, as on a device.
type Agent struct {
	Device    string
	Namespace string
	StateDir  string
	TokenFile string
	// Proxy is set when the agent reaches the broker through one
	// (FleetOptions.Proxy).
	Proxy *Proxy

	bin  string
	opts AgentOptions
	logs *lockedBuffer

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, valid once exited is closed
	starts int
}

// StartAgent builds fleet-agent (once) and starts it. It does not wait for
// the agent to connect: use the Fleet's Await helpers. The process is
// stopped (SIGTERM) when the test ends and its output logged if the test
// failed.
func StartAgent(t testing.TB, opts AgentOptions) *Agent {
	t.Helper()
	bin, err := BuildBinary("fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Join == "" && (opts.Device == "" || opts.Broker == "" || (opts.Token == "") == (opts.BootstrapToken == "") || opts.ContainerdSocket == "") {
		t.Fatalf("StartAgent: Device, Broker, Token or BootstrapToken, and ContainerdSocket are required: %+v", opts)
	}
	if opts.Join != "" && (opts.Device == "" || opts.Broker != "" || opts.Token != "" || opts.BootstrapToken != "" || opts.ContainerdSocket == "") {
		t.Fatalf("StartAgent: Join goes with Device and ContainerdSocket alone: %+v", opts)
	}
	if opts.Namespace == "" {
		opts.Namespace = AgentNamespace(opts.Device)
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(t.TempDir(), "agent-"+opts.Device)
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 2 * time.Second
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	a := &Agent{
		Device: opts.Device, Namespace: opts.Namespace, StateDir: opts.StateDir,
		TokenFile: opts.StateDir + ".token",
		bin:       bin, opts: opts, logs: &lockedBuffer{},
	}
	if err := os.WriteFile(a.TokenFile, []byte(opts.Token+opts.BootstrapToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Errorf("stop fleet-agent %s: %v", a.Device, err)
		}
		if t.Failed() {
			t.Logf("fleet-agent %s output:\n%s", a.Device, a.logs.String())
		}
	})
	a.start(t)
	return a
}

// AgentNamespace is the containerd namespace the harness gives a device's
// agent.
func AgentNamespace(device string) string { return "fleet-" + device }

func (a *Agent) start(t testing.TB) {
	t.Helper()
	tokenFlag := "--token-file"
	if a.opts.BootstrapToken != "" {
		tokenFlag = "--bootstrap-token-file"
	}
	args := []string{"--broker", a.opts.Broker, "--device", a.Device, tokenFlag, a.TokenFile}
	if a.opts.Join != "" {
		args = []string{"--join", a.opts.Join}
	}
	if a.opts.HubSigningKey != "" {
		args = append(args, "--hub-signing-key", a.opts.HubSigningKey)
	}
	args = append(append(args,
		"--state-dir", a.StateDir,
		"--containerd-socket", a.opts.ContainerdSocket,
		"--namespace", a.Namespace,
		"--resync-interval", a.opts.ResyncInterval.String(),
		"--keepalive", a.opts.KeepAlive.String(),
		"--log-level", "debug",
	), a.opts.Args...)
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout, cmd.Stderr = a.logs, a.logs
	cmd.Env = append(cleanEnv(a.StateDir+".home"), a.opts.Env...)
	a.starts++
	fmt.Fprintf(a.logs, "--- harness: starting fleet-agent (#%d) %s\n", a.starts, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fleet-agent %s: %v", a.Device, err)
	}
	a.cmd, a.exited = cmd, make(chan struct{})
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()
}

// Running reports whether the process runs.
func (a *Agent) Running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// PID is the agent's process ID (0 if it does not run).
func (a *Agent) PID() int {
	if !a.Running() {
		return 0
	}
	return a.cmd.Process.Pid
}

// Logs returns everything this agent (and its predecessors) printed.
func (a *Agent) Logs() string { return a.logs.String() }

// LogMark is a position in the logs, for AwaitLog.
func (a *Agent) LogMark() int { return len(a.logs.String()) }

// AwaitLog waits until the agent has printed a line containing substr
// after mark (a LogMark) and returns that line.
func (a *Agent) AwaitLog(t testing.TB, mark int, substr string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		logs := a.logs.String()
		if mark > len(logs) {
			mark = len(logs)
		}
		if i := strings.Index(logs[mark:], substr); i >= 0 {
			start := strings.LastIndexByte(logs[:mark+i], '\n') + 1
			end := strings.IndexByte(logs[mark+i:], '\n')
			if end < 0 {
				return logs[start:]
			}
			return logs[start : mark+i+end]
		}
		if !a.Running() {
			t.Fatalf("fleet-agent %s exited (%v) before logging %q", a.Device, a.err, substr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet-agent %s did not log %q within %v", a.Device, substr, within)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
}

// Kill sends SIGKILL, as a power cut would (to the agent only: its
// containers live in containerd's shims), and waits for the process.
func (a *Agent) Kill(t testing.TB) {
	t.Helper()
	if !a.Running() {
		return
	}
	if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill fleet-agent %s: %v", a.Device, err)
	}
	<-a.exited
	fmt.Fprintln(a.logs, "--- harness: fleet-agent killed")
}

// Stop sends SIGTERM and waits (15 s at most, then SIGKILL). It returns
// the exit error: nil for a clean shutdown.
func (a *Agent) Stop() error {
	if !a.Running() {
		return nil
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal fleet-agent: %w", err)
	}
	select {
	case <-a.exited:
		fmt.Fprintln(a.logs, "--- harness: fleet-agent stopped")
		return a.err
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
		return errors.New("fleet-agent did not stop within 15s of SIGTERM")
	}
}

// Restart starts the agent again with the same state directory, killing
// it first if it still runs.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.Kill(t)
	a.start(t)
}

// Start starts an agent that was stopped or killed, with the same state
// directory; it fails if the agent runs.
func (a *Agent) Start(t testing.TB) {
	t.Helper()
	if a.Running() {
		t.Fatalf("fleet-agent %s already runs", a.Device)
	}
	a.start(t)
}

// SetBroker changes the broker URL the agent dials from its next Start or
// Restart on.
func (a *Agent) SetBroker(url string) { a.opts.Broker = url }
