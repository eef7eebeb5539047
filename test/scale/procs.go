package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// ---- fleet-hub -------------------------------------------------------------------

// hubSpec says how to run the hub.
type hubSpec struct {
	// Bin is a fleet-hub binary; empty runs this binary's "hub" role
	// (same hub.Options, plus PprofAddr).
	Bin       string
	PprofAddr string
	// CPUProfile (with Bin empty): profile the hub from its start into
	// this file, until POST /scale/cpu/stop.
	CPUProfile string
	DataDir    string
	HTTPAddr   string
	MQTTAddr   string // embedded broker; "" with Broker
	// Broker and PasswordFile: external-broker mode.
	Broker       string
	PasswordFile string
	LogLevel     string
	LogPath      string
	// Env is added to the hub's environment.
	Env []string
	// StoreArgs are the hub's store flags (-store etcd: --store etcd://…).
	StoreArgs []string
}

// hubProc is a running hub. URL and Token come from its admin.conf.
type hubProc struct {
	spec   hubSpec
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	logf   *os.File
	conf   os.FileInfo // admin.conf as the previous process left it

	URL, Token string
	Client     *client.Client
}

func startHub(ctx context.Context, spec hubSpec, ready time.Duration) (*hubProc, error) {
	h := &hubProc{spec: spec}
	return h, h.start(ctx, ready)
}

func (h *hubProc) start(ctx context.Context, ready time.Duration) error {
	s := h.spec
	if fi, err := os.Stat(h.adminConf()); err == nil {
		h.conf = fi
	}
	args := []string{"--data-dir", s.DataDir, "--http-addr", s.HTTPAddr, "--log-level", s.LogLevel}
	args = append(args, s.StoreArgs...)
	if s.Broker != "" {
		args = append(args, "--broker", s.Broker, "--broker-password-file", s.PasswordFile)
	} else {
		args = append(args, "--mqtt-addr", s.MQTTAddr)
	}
	var cmd *exec.Cmd
	if s.Bin != "" {
		// fleet-hub opens HTTPS :8443 and MQTT over TLS :8883 by
		// default: the suite uses the plain loopback listeners, and
		// parallel runs must not fight over those ports.
		cmd = exec.Command(s.Bin, append(args, "--https-addr", "", "--mqtts-addr", "")...)
	} else {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		if s.PprofAddr != "" {
			args = append(args, "--pprof-addr", s.PprofAddr)
		}
		if s.CPUProfile != "" {
			args = append(args, "--cpuprofile", s.CPUProfile)
		}
		cmd = exec.Command(self, append([]string{"hub"}, args...)...)
		cmd.Env = append(os.Environ(), roleEnv+"=hub")
	}
	if len(s.Env) > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, s.Env...)
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "--- scale: starting hub %s\n", strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start hub: %w", err)
	}
	h.cmd, h.logf, h.exited = cmd, logf, make(chan struct{})
	go func() {
		h.err = cmd.Wait()
		close(h.exited)
	}()
	return h.awaitReady(ctx, ready)
}

func (h *hubProc) adminConf() string { return filepath.Join(h.spec.DataDir, "admin.conf") }

// awaitReady polls until the process has (re)written admin.conf and
// answers /healthz.
func (h *hubProc) awaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return poll(ctx, 10*time.Millisecond, func() (bool, error) {
		select {
		case <-h.exited:
			return false, fmt.Errorf("hub exited (%v) before it was ready:\n%s", h.err, tail(h.spec.LogPath, 3000))
		default:
		}
		fi, err := os.Stat(h.adminConf())
		if err != nil || h.conf != nil && os.SameFile(fi, h.conf) {
			return false, nil
		}
		c, err := client.LoadConfigFile(h.adminConf())
		if err != nil || !healthy(ctx, c.Hub) {
			return false, nil
		}
		h.URL, h.Token = strings.TrimSuffix(c.Hub, "/"), c.Token
		h.Client, err = client.New(h.URL, h.Token, client.WithHTTPClient(&http.Client{Timeout: 2 * time.Minute}))
		return err == nil, err
	})
}

func healthy(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pid is the running hub's process ID.
func (h *hubProc) pid() int { return h.cmd.Process.Pid }

// stop sends sig and waits up to grace for the exit, then kills.
func (h *hubProc) stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-h.exited:
		return nil
	default:
	}
	if err := h.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal hub: %w", err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.exited:
	case <-t.C:
		_ = h.cmd.Process.Kill()
		<-h.exited
		return fmt.Errorf("hub did not exit within %v of %v", grace, sig)
	}
	h.logf.Close()
	return nil
}

// ---- Mosquitto ---------------------------------------------------------------------

// mosquittoProc is a Mosquitto 2 configured by broker.WriteMosquittoFiles
// (what `fleet-hub mosquitto-config` renders), on a loopback port.
type mosquittoProc struct {
	Dir, Addr, URL string
	topics         schema.Topics
	extra          []string // lines appended to mosquitto.conf
	port           int
	bin            string
	logPath        string

	cmd     *exec.Cmd
	exited  chan struct{}
	err     error
	mu      sync.Mutex
	reloads int // "Reloading config" lines seen
	changed chan struct{}
}

func mosquittoBinary() (string, error) { return sysdeps.Path("mosquitto") }

func startMosquitto(ctx context.Context, dir string, topics schema.Topics, extra []string, accounts []broker.MosquittoAccount) (*mosquittoProc, error) {
	bin, err := mosquittoBinary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	m := &mosquittoProc{Dir: dir, topics: topics, extra: extra, port: port, bin: bin, logPath: filepath.Join(dir, "mosquitto.log"), changed: make(chan struct{}, 1)}
	m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	m.URL = "tcp://" + m.Addr
	if _, err := m.writeFiles(accounts); err != nil {
		return nil, err
	}
	return m, m.start(ctx)
}

func (m *mosquittoProc) writeFiles(accounts []broker.MosquittoAccount) (string, error) {
	conf := broker.MosquittoConf{Port: m.port, Bind: "127.0.0.1"}
	if os.Geteuid() == 0 {
		// Mosquitto drops root for "mosquitto", who cannot read our 0600
		// password file.
		if u, err := user.Current(); err == nil {
			conf.User = u.Username
		}
	}
	path, err := broker.WriteMosquittoFiles(m.Dir, m.topics, accounts, conf)
	if err != nil || len(m.extra) == 0 {
		return path, err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, "# -mosquitto-option\n%s\n", strings.Join(m.extra, "\n"))
	return path, errors.Join(err, f.Close())
}

func (m *mosquittoProc) start(ctx context.Context) error {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.bin, "-c", filepath.Join(m.Dir, "mosquitto.conf"))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start mosquitto: %w", err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	exited := m.exited
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if strings.Contains(line, "Reloading config") {
				m.mu.Lock()
				m.reloads++
				m.mu.Unlock()
				select {
				case m.changed <- struct{}{}:
				default:
				}
			}
		}
		logf.Close()
	}()
	go func() {
		m.err = cmd.Wait()
		pw.Close()
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return poll(ctx, 10*time.Millisecond, func() (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("mosquitto exited (%v):\n%s", m.err, tail(m.logPath, 2000))
		default:
		}
		c, err := net.DialTimeout("tcp", m.Addr, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
}

// setAccounts rewrites the password and ACL files and waits until
// Mosquitto has reloaded them (SIGHUP).
func (m *mosquittoProc) setAccounts(ctx context.Context, accounts []broker.MosquittoAccount) error {
	if _, err := m.writeFiles(accounts); err != nil {
		return err
	}
	m.mu.Lock()
	before := m.reloads
	m.mu.Unlock()
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload mosquitto: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m.mu.Lock()
		n := m.reloads
		m.mu.Unlock()
		if n > before {
			return nil
		}
		select {
		case <-m.changed:
		case <-m.exited:
			return fmt.Errorf("mosquitto exited on reload (%v)", m.err)
		case <-ctx.Done():
			return fmt.Errorf("mosquitto did not reload within 30s")
		}
	}
}

func (m *mosquittoProc) stop(sig syscall.Signal) {
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Signal(sig)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-m.exited:
	case <-t.C:
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// ---- helpers -----------------------------------------------------------------------

// errDeadline marks a wait that ran out of time.
var errDeadline = errors.New("deadline exceeded")

// poll calls f every interval until it reports done, fails, or ctx ends:
// it waits for a condition in another process, for which there is no
// event to wait on.
func poll(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := f()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errDeadline, context.Cause(ctx))
		case <-t.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// cpuTime is the CPU time (user + system) a process has used, or -1.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(u+st) * time.Second / ticks
}

// cpuMeter measures the CPU the hub and the agents use over a phase, and
// what the machine's hypervisor took from it meanwhile.
type cpuMeter struct {
	hub, agents, self time.Duration
	brokers           time.Duration // every Mosquitto
	core              time.Duration // the core's (bridged) or the one Mosquitto
	host              hostCPU
}

func (s *suite) cpuStart() cpuMeter {
	return cpuMeter{hub: cpuTime(s.hub.pid()), agents: s.agents.cpu(), self: cpuTime(os.Getpid()), brokers: s.brokersCPU(), core: s.coreCPU(), host: readHostCPU()}
}

// hostCPU is the machine-wide CPU time from /proc/stat's "cpu" line, in
// ticks: all of it, and the part "steal" (time a virtual CPU was ready to
// run while the hypervisor ran something else).
type hostCPU struct{ total, steal int64 }

func readHostCPU() hostCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	return parseHostCPU(string(b))
}

// parseHostCPU reads the first line, "cpu user nice system idle iowait
// irq softirq steal guest guest_nice". Guest time is already counted in
// user and nice, so the total is the first eight fields. A kernel too old
// to report steal gives a zero steal.
func parseHostCPU(stat string) hostCPU {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return hostCPU{}
	}
	var h hostCPU
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return hostCPU{}
		}
		h.total += n
		if i == 7 {
			h.steal = n
		}
	}
	return h
}

// stealPercent is the share of the machine's CPU time the hypervisor
// stole between a and b, or -1 when it cannot tell.
func stealPercent(a, b hostCPU) float64 {
	dt := b.total - a.total
	if a.total == 0 || dt <= 0 {
		return -1
	}
	return math.Round(1000*float64(b.steal-a.steal)/float64(dt)) / 10
}

// cpuStop fills in the CPU used since m (the hub's since m or, after a
// restart, since it started).
func (s *suite) cpuStop(m cpuMeter, r *Result, restarted bool) {
	hub, agents := cpuTime(s.hub.pid()), s.agents.cpu()
	if restarted {
		m.hub, m.brokers, m.core = 0, 0, 0
	}
	if c := s.coreCPU(); s.bridged != nil && c >= 0 && m.core >= 0 {
		r.CoreCPUMS = ms(c - m.core)
	}
	if b := s.brokersCPU(); len(s.brokers()) > 0 && b >= 0 && m.brokers >= 0 {
		r.BrokerCPUMS = ms(b - m.brokers)
	}
	if hub >= 0 && m.hub >= 0 {
		r.HubCPUMS = ms(hub - m.hub)
	}
	if agents >= 0 && m.agents >= 0 {
		r.AgentsCPUMS = ms(agents - m.agents)
	}
	if self := cpuTime(os.Getpid()); self >= 0 && m.self >= 0 {
		r.SuiteCPUMS = ms(self - m.self)
	}
	r.StealPct = stealPercent(m.host, readHostCPU())
}

// rss reads a process's VmRSS.
func rss(pid int) int64 { return hollow.RSS(pid) }

// hubCounters scrapes the hub's /metrics for the counters the suite
// reports per phase: MQTT messages received by topic kind, desired
// publishes, controller passes and their total time, status flushes.
func (h *hubProc) counters(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	names := map[string]string{
		`fleet_mqtt_messages_received_total{topic_kind="status"}`: "msgs_status",
		`fleet_mqtt_messages_received_total{topic_kind="events"}`: "msgs_events",
		`fleet_mqtt_messages_received_total{topic_kind="online"}`: "msgs_online",
		"fleet_desired_publishes_total":                           "desired_publishes",
		"fleet_controller_reconcile_duration_seconds_count":       "controller_passes",
		"fleet_controller_reconcile_duration_seconds_sum":         "controller_seconds",
		"fleet_status_flushes_total":                              "status_flushes",
		`fleet_mqtt_clients_cut_off_total{reason="publish_rate"}`: cutOffCounter,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if key, want := names[name]; want {
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				out[key] = v
			}
		}
	}
	return out, sc.Err()
}

// counterDelta is after − before, rounded; "controller_seconds" becomes
// milliseconds.
func counterDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		x := v - before[k]
		if k == "controller_seconds" {
			k, x = "controller_ms", x*1000
		}
		d[k] = float64(int64(x*10+0.5)) / 10
	}
	return d
}
