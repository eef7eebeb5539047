// Package test holds Fleet's end-to-end, fault and scale tests. They start
// real processes (fleet-hub, fleet, fleet-agent) on temporary directories
// and free loopback ports, through the helpers of this file.
package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// binaries are built once per test process into one temporary directory;
// TestMain removes it (RemoveBinaries).
var binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]error
}

// BuildBinary builds ./cmd/<name> once, static and stripped like a
// release, and returns the path of the binary.
func BuildBinary(name string) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "fleet-test-bin-")
		if err != nil {
			return "", fmt.Errorf("build %s: %w", name, err)
		}
		binaries.dir, binaries.built = dir, map[string]error{}
	}
	path := filepath.Join(binaries.dir, name)
	if err, done := binaries.built[name]; done {
		return path, err
	}
	root, err := repoRoot()
	if err == nil {
		// As `make build` and the release builds do (static, stripped):
		// the footprint test measures what a device runs. A dynamically
		// linked agent maps libc and the loader and resolves 70,000
		// dynamic symbols, 7 MiB more RSS. grpcnotrace: see arm/build.sh.
		cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags=-s -w -X github.com/fleetmq/fleet/schema.Version="+BinaryVersion, "-o", path, "./cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = root
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build ./cmd/%s: %w\n%s", name, berr, out)
		}
	}
	binaries.built[name] = err
	return path, err
}

// BinaryVersion is stamped into the binaries BuildBinary builds, as `make
// build` stamps the release version.
const BinaryVersion = "v0.0.0-e2e"

// RemoveBinaries deletes what BuildBinary built.
func RemoveBinaries() {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
		binaries.dir = ""
	}
}

// repoRoot finds the directory of go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// HubOptions configure StartHub. The zero value works.
type HubOptions struct {
	// DataDir is the hub's --data-dir; default a fresh temporary directory.
	DataDir string
	// Args are extra flags, after the harness's own (so they win).
	Args []string
	// Env are extra KEY=VALUE variables; FLEET_* variables of the test
	// process are never passed on.
	Env []string
	// Ready is how long to wait for the hub to come up; default 30 s.
	Ready time.Duration
	// Binary is the fleet-hub to run; default the one built from this
	// tree (BuildBinary). The version-skew tests run an older release's.
	Binary string
	// MQTTAddr is the embedded broker's --mqtt-addr; default
	// "127.0.0.1:0" (a free port, kept across Restart so that clients can
	// reconnect to the same address).
	MQTTAddr string
}

// Hub is a fleet-hub process. URL and Token come from the admin.conf it
// wrote; they change only across Restart (URL: new port).
type Hub struct {
	URL     string
	Token   string
	DataDir string
	// MQTTURL is the plain, loopback broker URL (GET /v1/info
	// mqttPlainURL, else mqttURL), and MQTTAddr its host:port.
	MQTTURL  string
	MQTTAddr string
	// MQTTTLSURL is the URL the hub tells devices (mqttURL: MQTT over
	// TLS), HTTPSURL its HTTPS API and CAHash the pin of its CA, whose PEM
	// is in CAFile ("" when the hub has none).
	MQTTTLSURL string
	HTTPSURL   string
	CAHash     string
	CAFile     string
	// SigningKey is the hub's desired-state signing key (GET /v1/info
	// signingKey), which the harness's agents pin (--hub-signing-key).
	SigningKey string

	t    testing.TB
	bin  string
	opts HubOptions
	logs *lockedBuffer

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, valid once exited is closed
	// conf is admin.conf as the previous process left it.
	conf os.FileInfo
}

// StartHub builds fleet-hub (once), starts it on a free loopback port and
// waits until it has written admin.conf and answers /healthz. The process
// is stopped when the test ends; its output is logged if the test failed.
func StartHub(t testing.TB, opts HubOptions) *Hub {
	t.Helper()
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Binary != "" {
		bin = opts.Binary
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "fleet-data")
	}
	if opts.Ready <= 0 {
		opts.Ready = 30 * time.Second
	}
	if opts.MQTTAddr == "" {
		opts.MQTTAddr = "127.0.0.1:0"
	}
	h := &Hub{DataDir: opts.DataDir, t: t, bin: bin, opts: opts, logs: &lockedBuffer{}}
	t.Cleanup(func() {
		if h.running() {
			if err := h.Stop(); err != nil {
				t.Errorf("stop fleet-hub: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("fleet-hub output:\n%s", h.logs.String())
		}
	})
	h.start()
	return h
}

// PID is the process ID of the running fleet-hub (0 if none).
func (h *Hub) PID() int {
	if !h.running() {
		return 0
	}
	return h.cmd.Process.Pid
}

// AdminConfig is the path of the hub's admin.conf.
func (h *Hub) AdminConfig() string { return filepath.Join(h.DataDir, "admin.conf") }

// Logs returns everything the process (and its predecessors) printed.
func (h *Hub) Logs() string { return h.logs.String() }

func (h *Hub) start() {
	h.t.Helper()
	if fi, err := os.Stat(h.AdminConfig()); err == nil {
		h.conf = fi
	}
	mqttAddr := h.opts.MQTTAddr
	if strings.HasSuffix(mqttAddr, ":0") && strings.HasPrefix(h.MQTTAddr, "127.0.0.1:") {
		mqttAddr = h.MQTTAddr // the port the previous process had
	}
	// The TLS listeners on free loopback ports: hubs run side by side.
	args := append([]string{"--data-dir", h.DataDir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", mqttAddr,
		"--https-addr", "127.0.0.1:0", "--mqtts-addr", "127.0.0.1:0", "--log-level", "debug"}, h.opts.Args...)
	cmd := exec.Command(h.bin, args...)
	cmd.Stdout, cmd.Stderr = h.logs, h.logs
	cmd.Env = append(cleanEnv(h.DataDir+".home"), h.opts.Env...)
	fmt.Fprintf(h.logs, "--- harness: starting fleet-hub %s\n", strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start fleet-hub: %v", err)
	}
	h.cmd, h.exited = cmd, make(chan struct{})
	go func() {
		h.err = cmd.Wait()
		close(h.exited)
	}()
	h.awaitReady()
}

// awaitReady polls until this process has (re)written admin.conf and
// answers /healthz.
func (h *Hub) awaitReady() {
	h.t.Helper()
	deadline := time.Now().Add(h.opts.Ready)
	for {
		select {
		case <-h.exited:
			h.t.Fatalf("fleet-hub exited before it was ready: %v\n%s", h.err, h.logs.String())
		default:
		}
		fi, err := os.Stat(h.AdminConfig())
		// A restarted hub rewrites admin.conf (atomically: a new file).
		fresh := err == nil && (h.conf == nil || !os.SameFile(fi, h.conf))
		if fresh {
			if c, err := client.LoadConfigFile(h.AdminConfig()); err == nil && healthy(c.Hub) {
				h.URL, h.Token = strings.TrimSuffix(c.Hub, "/"), c.Token
				h.readInfo()
				return
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("fleet-hub did not write %s and answer /healthz within %v\n%s", h.AdminConfig(), h.opts.Ready, h.logs.String())
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
}

// readInfo reads the MQTT URL from GET /v1/info.
func (h *Hub) readInfo() {
	h.t.Helper()
	code, body := h.Do(h.t, http.MethodGet, "/v1/info", nil)
	if code != http.StatusOK {
		h.t.Fatalf("GET /v1/info: %d %s", code, body)
	}
	var info schema.HubInfo
	if err := json.Unmarshal(body, &info); err != nil {
		h.t.Fatalf("GET /v1/info: %v", err)
	}
	h.MQTTURL, h.MQTTTLSURL, h.HTTPSURL, h.CAHash = info.MQTTURL, info.MQTTURL, info.HTTPSURL, info.CAHash
	h.SigningKey = info.SigningKey
	if info.MQTTPlainURL != "" {
		h.MQTTURL = info.MQTTPlainURL
	}
	h.CAFile = ""
	if info.CAHash != "" {
		h.CAFile = filepath.Join(h.DataDir, "ca.crt")
	}
	if u, err := url.Parse(h.MQTTURL); err == nil {
		h.MQTTAddr = u.Host
	}
}

func healthy(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(url, "/") + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (h *Hub) running() bool {
	if h.cmd == nil {
		return false
	}
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL, as a crash would, and waits for the process to go.
func (h *Hub) Kill() {
	h.t.Helper()
	if !h.running() {
		return
	}
	if err := h.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		h.t.Fatalf("kill fleet-hub: %v", err)
	}
	<-h.exited
	fmt.Fprintln(h.logs, "--- harness: fleet-hub killed")
}

// Stop sends SIGTERM and waits (15 s at most, then SIGKILL). It returns
// the exit error: nil for a clean shutdown.
func (h *Hub) Stop() error {
	if !h.running() {
		return nil
	}
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal fleet-hub: %w", err)
	}
	select {
	case <-h.exited:
		return h.err
	case <-time.After(15 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
		return errors.New("fleet-hub did not stop within 15s of SIGTERM")
	}
}

// Restart kills the process if it runs and starts a new one on the same
// data directory, then waits until it is ready. URL may change.
func (h *Hub) Restart() {
	h.t.Helper()
	h.Kill()
	h.start()
}

// Do sends an authenticated request and returns the status and body.
func (h *Hub) Do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// cleanEnv is the test process's environment without FLEET_* variables
// and with HOME set to home, so no user or CI setting leaks in.
func cleanEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+home)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
