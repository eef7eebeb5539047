package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// Tests of the hub against a real Mosquitto 2 (external broker mode).

func writeSecret(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(body+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMQTTMosquittoExternalBroker(t *testing.T) {
	t.Parallel()
	hubAcct := broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: "hub-password-for-the-test-0123456789"}
	m := mosquittotest.Start(t, mosquittotest.Config{Accounts: []broker.MosquittoAccount{hubAcct}})
	h := StartHub(t, HubOptions{Args: []string{"--broker", m.URL, "--broker-password-file", writeSecret(t, hubAcct.Password)}})
	var info schema.HubInfo
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/info", nil, http.StatusOK), &info); err != nil || !info.ExternalBroker || info.MQTTURL != m.URL {
		t.Fatalf("info %+v %v", info, err)
	}

	tokA := addDevice(t, h, "dev-a", map[string]string{"site": "lab"})
	tokB := addDevice(t, h, "dev-b", map[string]string{"site": "lab"})
	mtok := addMonitor(t, h, "grafana")
	accounts := []broker.MosquittoAccount{
		hubAcct,
		{Identity: broker.Identity{Name: "dev-a", Role: broker.RoleDevice}, Password: tokA},
		{Identity: broker.Identity{Name: "dev-b", Role: broker.RoleDevice}, Password: tokB},
		{Identity: broker.Identity{Name: "grafana", Role: broker.RoleMonitor}, Password: mtok},
	}
	m.SetAccounts(t, accounts)
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))

	a := mustDialMQTT(t, m.URL, "dev-a", tokA, dialOpts{})
	// Mosquitto grants any SUBSCRIBE but delivers only what the ACL lets
	// the client read: dev-b's retained desired state must not arrive,
	// while dev-a's own (subscribed after it) does.
	a.subscribe(topics.Device("dev-b", schema.TopicDesired))
	a.subscribe(topics.DeviceFilter(schema.TopicDesired))
	a.subscribe(topics.Device("dev-a", schema.TopicDesired))
	ds := a.awaitDesired("dev-a", func(d schema.DesiredState) bool { return len(d.Pods) == 1 })
	for _, msg := range a.received() {
		if msg.Topic != topics.Device("dev-a", schema.TopicDesired) {
			t.Errorf("dev-a received %s", msg.Topic)
		}
	}

	// Speaking for dev-b is dropped by Mosquitto; the hub's view of dev-b
	// does not change. dev-a's own report comes after on the same
	// connection.
	_ = a.publish(topics.Device("dev-b", schema.TopicStatus), 0, true, statusPayload("dev-b", 42, ""))
	_ = a.publish(topics.Device("dev-b", schema.TopicOnline), 0, true, []byte("online"))
	a.mustPublish(topics.Device("dev-a", schema.TopicOnline), true, []byte("online"))
	a.mustPublish(topics.Device("dev-a", schema.TopicStatus), true, statusPayload("dev-a", ds.Generation, ds.Store, runningPods(ds)...))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "dev-a")
		return d.Status != nil && d.Status.Converged && d.Status.Online
	}, "dev-a converged through Mosquitto")
	if b := getDevice(t, h, "dev-b"); b.Status == nil || b.Status.ObservedGeneration != 0 || b.Status.Online {
		t.Errorf("dev-b's status changed through dev-a: %+v", b.Status)
	}
	if _, err := dialMQTT(t, m.URL, "dev-a", tokB, dialOpts{}); err == nil {
		t.Error("dev-b's token accepted for dev-a")
	}
	if _, err := dialMQTT(t, m.URL, "", "", dialOpts{}); err == nil {
		t.Error("anonymous client accepted")
	}

	// mosquitto_sub reads status with the monitor credential.
	sub := sysdeps.Require(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(m.Addr)
	out, err := exec.CommandContext(t.Context(), sub, "-h", host, "-p", port, "-u", "grafana", "-P", mtok,
		"-t", topics.Device("dev-a", schema.TopicStatus), "-C", "1", "-W", "10").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(`"device":"dev-a"`)) {
		t.Errorf("mosquitto_sub as monitor: %v: %s", err, out)
	}

	// 1,000 targeted devices: exactly 1,000 desired states, counted by a
	// subscriber with the hub's rights; an identical re-apply: none.
	const n = 1000
	for batch := range 2 {
		docs := make([]string, 0, n/2)
		for i := batch * n / 2; i < (batch+1)*n/2; i++ {
			docs = append(docs, deviceYAML(fmt.Sprintf("d%04d", i), map[string]string{"fleet": "big"}))
		}
		applyYAML(t, h, strings.Join(docs, "---\n"))
	}
	counter := newTopicCounter()
	watcher := mustDialMQTT(t, m.URL, hubAcct.Name, hubAcct.Password, dialOpts{clientID: "desired-counter"})
	watcher.onMsg = counter.add
	watcher.subscribe(topics.DeviceFilter(schema.TopicDesired))
	awaitf(t, mqttWait, func() bool { return counter.distinct() == n+2 }, "retained desired states of %d devices (have %d)", n+2, counter.distinct())
	counter.reset()
	start := time.Now()
	applyYAML(t, h, webYAML("big", "nginx:1", map[string]string{"fleet": "big"}))
	awaitf(t, mqttWait, func() bool { return counter.total() >= n }, "%d desired states after the apply", n)
	t.Logf("apply -> %d desired states received through Mosquitto in %v", n, time.Since(start))
	applyYAML(t, h, webYAML("big", "nginx:1", map[string]string{"fleet": "big"}))
	applyYAML(t, h, deviceYAML("late", map[string]string{"fleet": "small"}))
	awaitf(t, mqttWait, func() bool { return counter.count(topics.Device("late", schema.TopicDesired)) == 1 }, "the late device's desired state")
	if got := counter.total(); got != n+1 {
		t.Errorf("%d desired states published for one apply targeting %d devices, an identical re-apply and a new device; want %d", got, n, n+1)
	}
	if d := counter.distinct(); d != n+1 {
		t.Errorf("%d distinct topics, want %d", d, n+1)
	}

	// The hub crashes and comes back: it reconnects under its persistent
	// session and goes on from the store.
	h.Kill()
	h.Restart()
	applyYAML(t, h, webYAML("web", "nginx:2", map[string]string{"site": "lab"}))
	ds = a.awaitDesired("dev-a", func(d schema.DesiredState) bool { return d.Generation == ds.Generation+1 })
	if ds.Pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("after the hub's restart: %+v", ds)
	}

	// Mosquitto restarts without persistence: the retained messages are
	// gone, and the hub republishes them all when it reconnects.
	m.Restart(t)
	awaitf(t, 30*time.Second, func() bool {
		c, err := dialMQTT(t, m.URL, "dev-a", tokA, dialOpts{})
		if err != nil {
			return false
		}
		defer c.c.Disconnect(0)
		c.subscribe(topics.Device("dev-a", schema.TopicDesired))
		deadline := time.After(2 * time.Second)
		for {
			for _, msg := range c.received() {
				var got schema.DesiredState
				if json.Unmarshal(msg.Payload, &got) == nil && got.Generation == ds.Generation {
					return true
				}
			}
			select {
			case <-c.wake:
			case <-deadline:
				return false
			}
		}
	}, "desired state back in Mosquitto after its restart")
}

// topicCounter counts messages per topic.
type topicCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newTopicCounter() *topicCounter { return &topicCounter{n: map[string]int{}} }

func (c *topicCounter) add(m mqttMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[m.Topic]++
}

func (c *topicCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = map[string]int{}
}

func (c *topicCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

func (c *topicCounter) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

func (c *topicCounter) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// mosquittoProc is a mosquitto started from a configuration the test did
// not write itself (the one fleet-hub mosquitto-config rendered).
type mosquittoProc struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	addr string
}

func startMosquittoConf(t *testing.T, conf string, addr string) *mosquittoProc {
	t.Helper()
	bin := sysdeps.Require(t, "mosquitto")
	p := &mosquittoProc{out: &lockedBuffer{}, addr: addr}
	p.cmd = exec.Command(bin, "-c", conf)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("mosquitto output:\n%s", p.out.String())
		}
	})
	awaitf(t, 10*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("mosquitto exited:\n%s", p.out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "mosquitto listening on %s", addr)
	return p
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runHubCmd runs a fleet-hub subcommand and returns its output.
func runHubCmd(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = cleanEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fleet-hub %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestMQTTMosquittoConfigCommand(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "fleet-data")
	h := StartHub(t, HubOptions{DataDir: dataDir})
	tok := addDevice(t, h, "pi", map[string]string{"site": "lab"})
	addDevice(t, h, "pi-2", nil)
	mtok := addMonitor(t, h, "grafana")
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))

	port := freeLoopbackPort(t)
	confArgs := []string{"--mosquitto-port", strconv.Itoa(port), "--mosquitto-bind", "127.0.0.1"}
	if os.Geteuid() == 0 {
		// Mosquitto started as root switches to this account; the files
		// are root's.
		confArgs = append(confArgs, "--mosquitto-user", "root")
	}

	// The hub runs: through its API.
	viaAPI := filepath.Join(t.TempDir(), "via-api")
	out := runHubCmd(t, append([]string{"mosquitto-config", "--data-dir", dataDir, "--out", viaAPI}, confArgs...)...)
	if !strings.Contains(out, "running hub") {
		t.Errorf("with the hub running, mosquitto-config said %q", out)
	}
	// The hub is stopped: from the store.
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	viaStore := filepath.Join(t.TempDir(), "via-store")
	out = runHubCmd(t, append([]string{"mosquitto-config", "--data-dir", dataDir, "--out", viaStore}, confArgs...)...)
	if !strings.Contains(out, "store in") {
		t.Errorf("with the hub stopped, mosquitto-config said %q", out)
	}
	for _, dir := range []string{viaAPI, viaStore} {
		pw, err := os.ReadFile(filepath.Join(dir, "passwd"))
		if err != nil {
			t.Fatal(err)
		}
		for _, user := range []string{"fleet-hub:$7$", "pi:$7$", "pi-2:$7$", "grafana:$7$"} {
			if !bytes.Contains(pw, []byte("\n"+user)) {
				t.Errorf("%s/passwd has no line %s…:\n%s", dir, user, pw)
			}
		}
		if bytes.Contains(pw, []byte("admin:")) || bytes.Contains(pw, []byte(tok)) {
			t.Errorf("%s/passwd holds the admin account or a token", dir)
		}
		fi, err := os.Stat(filepath.Join(dir, "passwd"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("passwd mode %v %v", fi.Mode(), err)
		}
		acl, err := os.ReadFile(filepath.Join(dir, "acl"))
		if err != nil || !bytes.Contains(acl, []byte("user grafana\n")) || !bytes.Contains(acl, []byte("user fleet-hub\ntopic readwrite fleet/v1/#")) {
			t.Errorf("%s/acl: %v\n%s", dir, err, acl)
		}
	}

	// A Mosquitto with the rendered files, and the hub on it (its password
	// from <data-dir>/mqtt-password, as mosquitto-config used).
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	startMosquittoConf(t, filepath.Join(viaStore, "mosquitto.conf"), addr)
	brokerURL := "tcp://" + addr
	h2 := StartHub(t, HubOptions{DataDir: dataDir, Args: []string{"--broker", brokerURL}})

	dev := mustDialMQTT(t, brokerURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))
	ds := dev.awaitDesired("pi", func(d schema.DesiredState) bool { return len(d.Pods) == 1 })
	dev.mustPublish(topics.Device("pi", schema.TopicStatus), true, statusPayload("pi", ds.Generation, ds.Store, runningPods(ds)...))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h2, "pi")
		return d.Status != nil && d.Status.ObservedGeneration == ds.Generation
	}, "status through the rendered Mosquitto")
	if _, err := dialMQTT(t, brokerURL, "pi", tok+"x", dialOpts{}); err == nil {
		t.Error("Mosquitto accepted a wrong token")
	}
	mon := mustDialMQTT(t, brokerURL, "grafana", mtok, dialOpts{})
	mon.subscribe(topics.DeviceFilter(schema.TopicStatus))
	mon.subscribe(topics.DeviceFilter(schema.TopicDesired)) // delivers nothing
	mon.await("status", func(m mqttMsg) bool { return m.Topic == topics.Device("pi", schema.TopicStatus) })
	mon.subscribe(topics.DeploymentStatus("+"))
	mon.await("deployment status", func(m mqttMsg) bool { return m.Topic == topics.DeploymentStatus("web") })
	for _, msg := range mon.received() {
		if strings.HasSuffix(msg.Topic, "/desired") {
			t.Errorf("monitor received %s", msg.Topic)
		}
	}

	// The running hub renders the same accounts through the API (admin
	// only).
	pw := mustDo(t, h2, http.MethodGet, "/v1/mosquitto/passwd", nil, http.StatusOK)
	if !bytes.Contains(pw, []byte("\npi:$7$")) {
		t.Errorf("GET /v1/mosquitto/passwd:\n%s", pw)
	}
	u, _ := url.Parse(h2.URL + "/v1/mosquitto/passwd")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u.String(), nil)
	req.Header.Set("Authorization", "Bearer "+mtok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a monitor read the password hashes: %d", resp.StatusCode)
	}
}
