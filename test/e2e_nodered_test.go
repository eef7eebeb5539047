package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// nodeREDVersion is the Node-RED the example flow is tested on: the
// newest release that runs on Debian's Node.js (Node-RED 5 needs Node 22).
const nodeREDVersion = "4.1.8"

// nodeREDFlow is the example flow users import.
const nodeREDFlow = "../fleet-examples/node-red/fleet-alerts.json"

// TestE2ENodeRED runs the example flow fleet-examples/node-red in a real
// Node-RED (from npm, pinned, installed once under the user's cache
// directory) against a real fleet-hub with real agents, logged in with a
// monitor credential: stopping an agent makes the flow POST a
// DeviceOffline alert for that device (and only that one) to the webhook,
// and a Staged rollout whose new revision fails makes it POST a
// RolloutFailed alert for the deployment.
func TestE2ENodeRED(t *testing.T) {
	t.Parallel() // mostly waits for npm and Node-RED; devices nr-*
	redJS := installNodeRED(t)
	f := StartFleet(t, FleetOptions{Agents: 2, DevicePrefix: "nr", Shell: true, Labels: func(int) map[string]string { return e2eAgents }})
	devs := f.Devices()
	token := addMonitor(t, f.Hub, "node-red")

	alerts := newAlertSink(t)
	nr := startNodeRED(t, redJS, f.Hub.MQTTAddr, alerts.srv.URL)
	nr.deploy(t, token)

	// An agent stops: its last will says offline.
	f.KillAgent(t, devs[1])
	got := alerts.await(t, "DeviceOffline for "+devs[1], func(a map[string]any) bool {
		return a["alert"] == "DeviceOffline" && a["device"] == devs[1]
	})
	t.Logf("alert: %v", got["summary"])

	// A rollout that fails on the live device, rolled back by the hub.
	const name = "e2e-nodered"
	f.deleteOnCleanup(t, name)
	only := map[string]string{"fleet/device": devs[0]}
	v1 := e2eDep{Name: name, Selector: only, Strategy: stagedStrategy("0s")}
	f.applyDeps(t, v1)
	awaitStaged(t, f, name, "v1 complete", func(r *schema.RolloutStatus) bool { return r.Phase == schema.RolloutComplete })
	v2 := v1
	v2.Image, v2.Args = f.ShellImage, []string{"echo", "v2", "exit", "1"}
	// Healthy only after 30 s Ready: v2 crashes well within that, so
	// the rollout fails instead of completing before the first crash.
	v2.Strategy = stagedStrategy("0s")
	v2.Strategy["staged"].(map[string]any)["minReadySeconds"] = 30
	f.applyDeps(t, v2)
	got = alerts.await(t, "RolloutFailed for "+name, func(a map[string]any) bool {
		return a["alert"] == "RolloutFailed" && a["deployment"] == name
	})
	t.Logf("alert: %v", got["summary"])
	for _, a := range alerts.all() {
		if a["alert"] == "DeviceOffline" && a["device"] != devs[1] {
			t.Errorf("offline alert for a device that stayed online: %v", a)
		}
	}
}

// installNodeRED installs node-red@nodeREDVersion once per machine under
// the user's cache directory and returns its red.js.
func installNodeRED(t *testing.T) string {
	t.Helper()
	sysdeps.Require(t, "node")
	npm := sysdeps.Require(t, "npm")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "fleet-test", "node-red-"+nodeREDVersion)
	redJS := filepath.Join(dir, "node_modules", "node-red", "red.js")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(redJS); err == nil {
		return redJS
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--omit=dev", "--no-save", "node-red@"+nodeREDVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install node-red@%s: %v\n%s", nodeREDVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("installed node-red@%s in %v", nodeREDVersion, time.Since(start).Round(time.Second))
	return redJS
}

// nodeRED is a running Node-RED process.
type nodeRED struct {
	url  string
	logs *lockedBuffer
}

// startNodeRED starts Node-RED on a free loopback port with a fresh user
// directory, the broker address and webhook in its environment, and waits
// for its admin API.
func startNodeRED(t *testing.T, redJS, mqttAddr, webhook string) *nodeRED {
	t.Helper()
	host, port, err := net.SplitHostPort(mqttAddr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uiPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	userDir := t.TempDir()
	settings := fmt.Sprintf(`module.exports = {
  uiHost: "127.0.0.1",
  uiPort: %d,
  flowFile: "flows.json",
  credentialSecret: "fleet-test-only",
  diagnostics: { enabled: false },
  telemetry: { enabled: false },
  logging: { console: { level: "info" } }
};
`, uiPort)
	if err := os.WriteFile(filepath.Join(userDir, "settings.js"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	nr := &nodeRED{url: "http://127.0.0.1:" + strconv.Itoa(uiPort), logs: &lockedBuffer{}}
	cmd := exec.Command(sysdeps.Require(t, "node"), redJS, "--userDir", userDir, "--settings", filepath.Join(userDir, "settings.js"))
	cmd.Env = append(os.Environ(), "FLEET_MQTT_HOST="+host, "FLEET_MQTT_PORT="+port, "FLEET_ALERT_WEBHOOK="+webhook)
	cmd.Stdout, cmd.Stderr = nr.logs, nr.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("node-red output:\n%s", nr.logs.String())
		}
	})
	awaitf(t, time.Minute, func() bool {
		select {
		case <-exited:
			t.Fatalf("node-red exited:\n%s", nr.logs.String())
		default:
		}
		resp, err := http.Get(nr.url + "/settings")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "node-red admin API on %s", nr.url)
	return nr
}

// deploy loads the example flow as a user imports it, gives its broker
// node the monitor credential (Node-RED keeps credentials apart from the
// flow file), and deploys it through the admin API.
func (nr *nodeRED) deploy(t *testing.T, token string) {
	t.Helper()
	raw, err := os.ReadFile(nodeREDFlow)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(raw, &nodes); err != nil {
		t.Fatalf("%s: %v", nodeREDFlow, err)
	}
	brokers := 0
	for _, n := range nodes {
		if n["type"] == "mqtt-broker" {
			n["credentials"] = map[string]any{"user": "node-red", "password": token}
			brokers++
		}
	}
	if brokers != 1 {
		t.Fatalf("%s: %d mqtt-broker nodes, want 1", nodeREDFlow, brokers)
	}
	body, _ := json.Marshal(nodes)
	req, _ := http.NewRequest(http.MethodPost, nr.url+"/flows", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Node-RED-Deployment-Type", "full")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("deploy the flow: %s %s", resp.Status, b)
	}
	// The broker node connected with the monitor credential.
	awaitf(t, time.Minute, func() bool { return strings.Contains(nr.logs.String(), "Connected to broker") },
		"node-red connected to the broker:\n%s", nr.logs)
}

// alertSink is the webhook the flow posts alerts to.
type alertSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts []map[string]any
	wake   chan struct{}
}

func newAlertSink(t *testing.T) *alertSink {
	s := &alertSink{wake: make(chan struct{}, 1)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&a) != nil {
			http.Error(w, "want a POST of JSON", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.alerts = append(s.alerts, a)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *alertSink) all() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.alerts...)
}

func (s *alertSink) await(t *testing.T, what string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.NewTimer(e2eConverge)
	defer deadline.Stop()
	for {
		for _, a := range s.all() {
			if pred(a) {
				return a
			}
		}
		select {
		case <-s.wake:
		case <-deadline.C:
			t.Fatalf("no alert %s within %v; got %v", what, e2eConverge, s.all())
		}
	}
}
