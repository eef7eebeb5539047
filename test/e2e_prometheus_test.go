package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/fleet-examples/grafana"
	promrules "github.com/fleetmq/fleet/fleet-examples/prometheus"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// testRuleFor is the `for:` every alert gets in the test's copy of
// fleet-rules.yml. The shipped durations are minutes (a device offline
// for 5 minutes); the test keeps every expression as shipped and shortens
// only how long each must hold, so that an alert fires within seconds of
// what causes it, Prometheus scraping and evaluating every second.
const testRuleFor = "3s"

// hardwareSeries are series a hub exports only for devices whose
// hardware reports them (a SoC temperature): a test machine's agents may
// not, so a selector of them may select nothing here.
var hardwareSeries = []string{"fleet_device_temperature_celsius", "fleet_device_throttled"}

// TestE2EPrometheusDeviceOfflineAlert: Debian's Prometheus (private data
// directory, loopback port, 1 s scrape and evaluation) scrapes a real hub
// with a monitor token, with two real agents on containerd and a Staged
// deployment rolled out. Every series selector of fleet-rules.yml and of
// the Grafana dashboard selects series of the real hub (the backup series
// of issue 41 excepted until they land), every dashboard query runs, and
// no alert fires. Then one agent is stopped (SIGTERM, as systemctl stop):
// FleetDeviceOffline fires for that device and no other, and resolves
// once the agent is back. Last, rollouts of an image that cannot be
// pulled fire FleetRolloutFailed (stopped) and FleetRolloutRolledBack
// (rolled back by the hub).
func TestE2EPrometheusDeviceOfflineAlert(t *testing.T) {
	promBin := sysdeps.Require(t, "prometheus")
	f := StartFleet(t, FleetOptions{Agents: 2, DevicePrefix: "prom"})
	f.Apply(t, promDeployment(f.Image, "v1", false))
	f.AwaitRollout(t, "prom-web", 2, e2eConverge)
	f.CLI(t, "top", "pods") // the devices' figures, for the resource series

	var cred schema.Credential
	if err := json.Unmarshal(mustDo(t, f.Hub, http.MethodPost, "/v1/credentials", []byte(`{"name":"prometheus","role":"monitor"}`), http.StatusCreated), &cred); err != nil {
		t.Fatal(err)
	}
	p := startPrometheus(t, promBin, f.Hub.URL, cred.Token)
	p.awaitTargetUp(t, time.Minute)
	p.awaitQuery(t, "both devices online", `fleet_device_online == 1`, time.Minute, func(r []promSample) bool { return len(r) == 2 })

	t.Run("rule and dashboard selectors select real series", func(t *testing.T) { checkSelectors(t, p) })
	if firing := p.alerts(t, "firing"); len(firing) != 0 {
		t.Fatalf("alerts firing on a healthy fleet: %+v", firing)
	}

	stopped := time.Now()
	if err := f.Agent(t, "prom-1").Stop(); err != nil {
		t.Fatalf("stop the agent of prom-1: %v", err)
	}
	p.awaitQuery(t, "prom-1 offline in Prometheus", `fleet_device_online{device="prom-1"} == 0`, time.Minute, func(r []promSample) bool { return len(r) == 1 })
	seenOffline := time.Since(stopped)
	a := p.awaitAlert(t, "FleetDeviceOffline", "firing", time.Minute)
	fired := time.Since(stopped)
	if a.Labels["device"] != "prom-1" || a.Labels["severity"] != "warning" || !strings.Contains(a.Annotations["summary"], "prom-1") {
		t.Errorf("FleetDeviceOffline: labels %v, annotations %v; want device prom-1, severity warning, a summary naming it", a.Labels, a.Annotations)
	}
	for _, x := range p.alerts(t, "") {
		if x.Labels["alertname"] == "FleetDeviceOffline" && x.Labels["device"] != "prom-1" {
			t.Errorf("FleetDeviceOffline for %s, which runs: %+v", x.Labels["device"], x)
		}
	}
	t.Logf("agent stopped → Prometheus sees prom-1 offline in %v; FleetDeviceOffline (for: %s in the test copy) firing after %v",
		seenOffline.Round(10*time.Millisecond), testRuleFor, fired.Round(10*time.Millisecond))

	f.Agent(t, "prom-1").Start(t)
	p.awaitNoAlert(t, "FleetDeviceOffline", time.Minute)

	t.Run("failed rollouts fire FleetRolloutFailed and FleetRolloutRolledBack", func(t *testing.T) { failedRolloutAlerts(t, f, p) })
}

// promDeployment is the test's Staged deployment: image, an env value
// that makes each version a new template, and autoRollback.
func promDeployment(image, version string, autoRollback bool) string {
	return fmt.Sprintf(`apiVersion: fleet/v1
kind: Deployment
metadata: {name: prom-web}
spec:
  selector: {matchLabels: {}}
  strategy:
    type: Staged
    staged:
      steps: [{devices: 1}, {percent: 100}]
      progressDeadlineSeconds: 60
      autoRollback: %t
  template:
    spec:
      containers: [{name: main, image: %q, env: [{name: VERSION, value: %q}]}]
`, autoRollback, image, version)
}

// promBadImage cannot be pulled: nothing listens on port 1.
const promBadImage = "127.0.0.1:1/fleet/app:typo"

// failedRolloutAlerts: a revision whose image cannot be pulled stops its
// rollout (no autoRollback): FleetRolloutFailed fires with phase Stopped.
// A good revision ends it; another bad one, with autoRollback, is rolled
// back by the hub: FleetRolloutRolledBack fires.
func failedRolloutAlerts(t *testing.T, f *Fleet, p *prometheusProc) {
	f.Apply(t, promDeployment(promBadImage, "v2", false))
	a := p.awaitAlert(t, "FleetRolloutFailed", "firing", e2eConverge)
	if a.Labels["deployment"] != "prom-web" || a.Labels["phase"] != string(schema.RolloutStopped) || a.Labels["severity"] != "critical" {
		t.Errorf("FleetRolloutFailed labels %v, want deployment prom-web, phase Stopped, severity critical", a.Labels)
	}
	f.Apply(t, promDeployment(f.Image, "v3", false))
	f.AwaitRollout(t, "prom-web", 2, e2eConverge)
	p.awaitNoAlert(t, "FleetRolloutFailed", time.Minute)

	f.Apply(t, promDeployment(promBadImage, "v4", true))
	a = p.awaitAlert(t, "FleetRolloutRolledBack", "firing", e2eConverge)
	if a.Labels["deployment"] != "prom-web" || !strings.Contains(a.Annotations["summary"], "rolled back") {
		t.Errorf("FleetRolloutRolledBack: labels %v, annotations %v", a.Labels, a.Annotations)
	}
	f.AwaitRollout(t, "prom-web", 2, e2eConverge) // every device back on v3's template
}

// checkSelectors: every series selector of the rules and of the
// dashboard selects at least one series Prometheus scraped from the real
// hub, and every dashboard query runs.
func checkSelectors(t *testing.T, p *prometheusProc) {
	rules, err := promrules.Rules()
	if err != nil {
		t.Fatal(err)
	}
	dash, err := grafana.Load()
	if err != nil {
		t.Fatal(err)
	}
	type use struct{ where, expr string }
	var uses []use
	for _, r := range rules.Alerts() {
		uses = append(uses, use{"rule " + r.Alert, r.Expr})
	}
	for _, q := range dash.Queries() {
		uses = append(uses, use{"dashboard " + q.Where, grafana.Expand(q.Expr)})
		if _, err := p.query(t.Context(), grafana.Expand(q.Expr)); err != nil {
			t.Errorf("dashboard %s: query %q: %v", q.Where, q.Expr, err)
		}
	}
	checked := 0
	for _, u := range uses {
		for _, sel := range promrules.Selectors(u.expr) {
			name, _, _ := strings.Cut(sel, "{")
			if promrules.Pending(name) {
				continue
			}
			n, err := p.seriesCount(t.Context(), sel)
			switch {
			case err != nil:
				t.Errorf("%s: series %s: %v", u.where, sel, err)
			case n == 0 && slices.Contains(hardwareSeries, name):
				t.Logf("%s: %s selects nothing: this machine's agents report no such figure", u.where, sel)
			case n == 0:
				t.Errorf("%s: %s selects no series of the real hub", u.where, sel)
			}
			checked++
		}
	}
	t.Logf("%d selectors of %d rules and dashboard queries checked against the real hub", checked, len(uses))
}

// ---- a Prometheus process ----------------------------------------------------------

type prometheusProc struct {
	url  string
	logs *lockedBuffer
}

// startPrometheus writes a configuration scraping hubURL's /metrics with
// token (from a 0600 file) every second and evaluating the test copy of
// fleet-rules.yml every second, and starts Prometheus on a free loopback
// port with its own data directory. It is stopped when the test ends.
func startPrometheus(t *testing.T, bin, hubURL, token string) *prometheusProc {
	t.Helper()
	dir := t.TempDir()
	hub, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "hub-token")
	writeTestFile(t, tokenFile, []byte(token), 0o600)
	writeTestFile(t, filepath.Join(dir, "fleet-rules.yml"), testRules(t), 0o644)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [fleet-rules.yml]
scrape_configs:
  - job_name: fleet-hub
    scheme: %s
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: [%q]
`, hub.Scheme, tokenFile, hub.Host)
	confFile := filepath.Join(dir, "prometheus.yml")
	writeTestFile(t, confFile, []byte(config), 0o644)

	p := &prometheusProc{logs: &lockedBuffer{}}
	for attempt := 0; ; attempt++ {
		addr := freeLoopbackAddr(t)
		p.url = "http://" + addr
		cmd := exec.Command(bin, "--config.file="+confFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr, "--web.console.templates="+dir, "--web.console.libraries="+dir)
		cmd.Stdout, cmd.Stderr = p.logs, p.logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start prometheus: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		if p.awaitReady(exited, 30*time.Second) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("prometheus output:\n%s", p.logs.String())
				}
			})
			return p
		}
		stop()
		if attempt == 2 {
			t.Fatalf("prometheus did not become ready on %s:\n%s", addr, p.logs.String())
		}
	}
}

// testRules is fleet-rules.yml with every alert's `for:` set to
// testRuleFor; the expressions are the shipped ones.
func testRules(t *testing.T) []byte {
	t.Helper()
	f, err := promrules.Rules()
	if err != nil {
		t.Fatal(err)
	}
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			if f.Groups[gi].Rules[ri].Alert != "" {
				f.Groups[gi].Rules[ri].For = testRuleFor
			}
		}
	}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeTestFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// freeLoopbackAddr returns a loopback address whose port was free a
// moment ago (Prometheus cannot report the port it bound for port 0).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// awaitReady polls /-/ready until it answers 200, the process exits, or
// the time is up.
func (p *prometheusProc) awaitReady(exited <-chan struct{}, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(pollEvery)
	}
	return false
}

// api GETs a Prometheus API path and decodes its data.
func (p *prometheusProc) api(ctx context.Context, path string, params url.Values, data any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %d %s: %w", path, resp.StatusCode, bytes.TrimSpace(body), err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, env.Status, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (p *prometheusProc) query(ctx context.Context, q string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, err
	}
	var out []promSample
	if data.ResultType == "vector" {
		if err := json.Unmarshal(data.Result, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seriesCount counts the series a selector selects over the last hour.
func (p *prometheusProc) seriesCount(ctx context.Context, sel string) (int, error) {
	var data []map[string]string
	params := url.Values{"match[]": {sel}, "start": {fmt.Sprint(time.Now().Add(-time.Hour).Unix())}}
	if err := p.api(ctx, "/api/v1/series", params, &data); err != nil {
		return 0, err
	}
	return len(data), nil
}

func (p *prometheusProc) awaitTargetUp(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		var data struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := p.api(t.Context(), "/api/v1/targets", nil, &data); err == nil && len(data.ActiveTargets) == 1 {
			if data.ActiveTargets[0].Health == "up" {
				return
			}
			last = data.ActiveTargets[0].Health + ": " + data.ActiveTargets[0].LastError
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape the hub within %v (%s)", within, last)
		}
		time.Sleep(pollEvery)
	}
}

func (p *prometheusProc) awaitQuery(t *testing.T, what, q string, within time.Duration, ok func([]promSample) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := p.query(t.Context(), q)
		if err == nil && ok(r) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s gave %+v (%v) for %v", what, q, r, err, within)
		}
		time.Sleep(pollEvery)
	}
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// alerts returns the active alerts in state ("": any state).
func (p *prometheusProc) alerts(t *testing.T, state string) []promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.api(t.Context(), "/api/v1/alerts", nil, &data); err != nil {
		t.Fatalf("alerts: %v", err)
	}
	var out []promAlert
	for _, a := range data.Alerts {
		if state == "" || a.State == state {
			out = append(out, a)
		}
	}
	return out
}

func (p *prometheusProc) awaitAlert(t *testing.T, name, state string, within time.Duration) promAlert {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, a := range p.alerts(t, state) {
			if a.Labels["alertname"] == name {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s not %s within %v; active: %+v", name, state, within, p.alerts(t, ""))
		}
		time.Sleep(pollEvery)
	}
}

func (p *prometheusProc) awaitNoAlert(t *testing.T, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if !slices.ContainsFunc(p.alerts(t, ""), func(a promAlert) bool { return a.Labels["alertname"] == name }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s still active %v after its cause ended: %+v", name, within, p.alerts(t, ""))
		}
		time.Sleep(pollEvery)
	}
}
