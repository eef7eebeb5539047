package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// TestDashboardCharts: the dashboard's charts (hub/history, charts.js,
// uPlot) in a real Chromium against a real fleet-hub with three real
// agents on containerd. Two Staged rollouts go out in waves, an agent is
// stopped and started; then, as a monitor, the overview's online chart,
// the rollout chart and a device's chart are drawn (a canvas, the
// expected series) from what the history routes answered: the page's
// copy is the API's answer, and the hub's own answer afterwards agrees
// with it. Screenshots go to the test's artifact directory (and, with
// -update, docs/dashboard-charts.png for the README).
func TestDashboardCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("browser end-to-end test: skipped under -short")
	}
	sysdeps.Require(t, "chromium")
	start := time.Now()
	// One sample every 2 s, so that a test of a minute shows a history
	// (a hub's default is 5 min: 24 h).
	f := StartFleet(t, FleetOptions{
		Agents: 3, DevicePrefix: "chart-pi",
		Labels:  func(int) map[string]string { return e2eAgents },
		HubArgs: []string{"--history-interval", "2s"},
	})
	t.Logf("fleet up in %v", time.Since(start).Round(time.Millisecond))
	h := f.Hub
	const name = "chart-web"
	f.deleteOnCleanup(t, name)

	// Two rollouts, each one device, a pause, then the rest.
	v1 := e2eDep{Name: name, Strategy: stagedStrategy("3s")}
	f.applyDeps(t, v1)
	awaitStaged(t, f, name, "v1 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == 3
	})
	awaitRolloutHistory(t, h, name, 1)
	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	f.applyDeps(t, v2)
	awaitStaged(t, f, name, "v2 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == 3
	})
	awaitRolloutHistory(t, h, name, 2)

	// An agent stopped, seen offline by the history, and started again.
	if err := f.Agent(t, "chart-pi-3").Stop(); err != nil {
		t.Fatalf("stop agent: %v", err)
	}
	awaitHistory(t, h, "/v1/dashboard/history/online", "an offline device in the online history", func(o history.Online) bool {
		n := len(o.Time)
		return n > 0 && o.Offline[n-1] == 1 && o.Online[n-1] == 2
	})
	f.RestartAgent(t, "chart-pi-3")
	awaitHistory(t, h, "/v1/dashboard/history/online", "every device online again", func(o history.Online) bool {
		n := len(o.Time)
		return n > 0 && o.Online[n-1] == 3 && o.Offline[n-1] == 0
	})
	var rollout history.Deployment
	getHistory(t, h, "/v1/dashboard/history/deployments/"+name, &rollout)
	checkWaves(t, rollout)

	monitor := addMonitor(t, h, "charts-monitor")
	b := startBrowser(t, h.URL, 1280, 900)
	b.do("open", chromedp.Navigate(b.base+"/"))
	b.login(monitor)
	b.awaitText("#conn", "Live")
	outer := t

	t.Run("online_chart", func(t *testing.T) {
		b.t = t
		defer func() { b.t = outer }()
		d := awaitChart[history.Online](b, "online", 4, `[...d.maxOffline].some((v) => v >= 1) && d.online[d.online.length - 1] === 3`)
		var now history.Online
		getHistory(t, h, "/v1/dashboard/history/online", &now)
		// Every sample the page drew but the newest (still filling) is
		// the hub's, unchanged.
		for i := 0; i+1 < len(d.Time); i++ {
			j := slices.Index(now.Time, d.Time[i])
			if j < 0 || now.Online[j] != d.Online[i] || now.MaxOffline[j] != d.MaxOffline[i] {
				t.Errorf("sample %d at %v: the page drew online %d, most offline %d; the hub has %v", i, d.Time[i], d.Online[i], d.MaxOffline[i], j)
			}
		}
		b.awaitText(`[data-chart="online"] .chart-summary`, "Now 3 online, 0 offline; at most 1 offline")
		b.checkNames("overview with its chart")
		b.screenshot("charts-overview.png")
		png := b.elementScreenshot("charts-online.png", `[data-chart="online"]`)
		writeDoc(t, "dashboard-charts-online.png", png)
		// The system turns dark: the chart is drawn again in its colours.
		eval[chromedp.Void](b, `window.__lightPlot = fleetCharts.online.plot; undefined`)
		b.dark(true)
		b.await("the chart redrawn for the dark theme", `fleetCharts.online.plot && fleetCharts.online.plot !== window.__lightPlot`)
		b.elementScreenshot("charts-online-dark.png", `[data-chart="online"]`)
		b.dark(false)
	})

	t.Run("rollout_chart", func(t *testing.T) {
		b.t = t
		defer func() { b.t = outer }()
		b.goTo("#/deployments/" + name)
		d := awaitChart[history.Deployment](b, "deployment", 5, `d.phase[d.phase.length - 1] === 'Complete' && d.revision[d.revision.length - 1] === 2`)
		checkWaves(t, d)
		labels := eval[[]string](b, `fleetCharts.deployment.plot.series.slice(1).map((s) => s.label)`)
		if !slices.Equal(labels, []string{"Updated", "Ready", "Failed", "Pending"}) {
			t.Errorf("rollout chart series %q", labels)
		}
		b.awaitText(`[data-chart="deployment"] .chart-summary`, "now revision 2, wave 2 of 2 (Complete): 3 updated, 3 ready, 0 failed")
		b.do("scroll to the chart", chromedp.ScrollIntoView(chromedp.CSS(`[data-chart="deployment"]`)))
		b.screenshot("charts-rollout.png")
	})

	t.Run("device_chart", func(t *testing.T) {
		b.t = t
		defer func() { b.t = outer }()
		b.goTo("#/devices/chart-pi-3")
		d := awaitChart[history.Device](b, "device", 4, `d.memoryUsedBytes.some((v) => v !== null)`)
		if d.MemoryTotalBytes == 0 || d.DiskTotalBytes == 0 {
			t.Errorf("device chart without the totals the agent reports: %+v", d)
		}
		if len(d.Time) < 2 {
			t.Errorf("the device chart has %d samples; the agent reported before its stop and after its start", len(d.Time))
		}
		b.awaitText(`[data-chart="device"] .chart-summary`, "Memory ", " used of ", "disk ")
		b.do("scroll to the chart", chromedp.ScrollIntoView(chromedp.CSS(`[data-chart="device"]`)))
		b.screenshot("charts-device.png")
	})

	t.Run("readme_screenshot", func(t *testing.T) {
		b.t = t
		defer func() { b.t = outer }()
		b.goTo("#/deployments/" + name)
		b.await("the rollout chart", `!!(window.fleetCharts.deployment && fleetCharts.deployment.plot)`)
		png := b.elementScreenshot("charts-readme.png", `[data-chart="deployment"]`)
		writeDoc(t, "dashboard-charts.png", png)
	})

	loaded := eval[[]string](b, `performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)`)
	for _, want := range []string{"/ui/uplot.min.js", "/ui/charts.js", "/v1/dashboard/history/online",
		"/v1/dashboard/history/deployments/" + name, "/v1/dashboard/history/devices/chart-pi-3"} {
		if !slices.Contains(loaded, want) {
			t.Errorf("the page never fetched %s (it fetched %q)", want, loaded)
		}
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %s", strings.Join(errs, "\n"))
	}
}

// awaitChart waits until the page drew chart key with a canvas and
// series+1 columns, and its data satisfies cond (a JavaScript expression
// of d, the route's answer as the page holds it); it returns that answer,
// after checking that the plot's columns are the answer's.
func awaitChart[T any](b *browser, key string, columns int, cond string) T {
	b.t.Helper()
	b.await("chart "+key, fmt.Sprintf(`(() => {
		const c = window.fleetCharts && window.fleetCharts[%[1]s];
		if (!c || !c.plot || !c.data || !document.querySelector('[data-chart=%[1]s] canvas')) return false;
		if (c.plot.data.length !== %[2]d || c.plot.series.length !== %[2]d) return false;
		const d = c.data;
		return %[3]s;
	})()`, jsString(key), columns, cond))
	got := eval[string](b, fmt.Sprintf(`JSON.stringify({url: fleetCharts[%[1]s].url, data: fleetCharts[%[1]s].data,
		time: fleetCharts[%[1]s].plot.data[0]})`, jsString(key)))
	var drawn struct {
		URL  string    `json:"url"`
		Data T         `json:"data"`
		Time []float64 `json:"time"`
	}
	if err := json.Unmarshal([]byte(got), &drawn); err != nil {
		b.t.Fatalf("chart %s: %v", key, err)
	}
	if !strings.HasPrefix(drawn.URL, "/v1/dashboard/history/") {
		b.t.Errorf("chart %s drew from %q, not a history route", key, drawn.URL)
	}
	var times struct {
		Time []float64 `json:"time"`
	}
	raw, _ := json.Marshal(drawn.Data)
	_ = json.Unmarshal(raw, &times)
	// The plot's x column is the answer's (the online and rollout charts
	// add "now" at the end: their last counts hold until now).
	if len(drawn.Time) < len(times.Time) || !slices.Equal(drawn.Time[:len(times.Time)], times.Time) {
		b.t.Errorf("chart %s plots times %v, the answer has %v", key, drawn.Time, times.Time)
	}
	return drawn.Data
}

// checkWaves: two revisions, each through wave 1 of 2 with one device
// updated, then wave 2 with all three, ending Complete.
func checkWaves(t *testing.T, d history.Deployment) {
	t.Helper()
	type row struct {
		rev        int32
		step       int16
		updated    int32
		phase      schema.RolloutPhase
		time       float64
		ready, bad int32
	}
	var rows []row
	for i := range d.Time {
		rows = append(rows, row{d.Revision[i], d.Step[i], d.Updated[i], schema.RolloutPhase(d.Phase[i]), d.Time[i], d.Ready[i], d.Failed[i]})
	}
	for _, rev := range []int32{1, 2} {
		var wave1, wave2, complete bool
		for _, r := range rows {
			if r.rev != rev {
				continue
			}
			wave1 = wave1 || r.step == 1 && r.updated == 1
			wave2 = wave2 || r.step == 2 && r.updated == 3
			complete = complete || r.phase == schema.RolloutComplete && r.ready == 3
			if r.bad != 0 {
				t.Errorf("revision %d: %d failed at %v", rev, r.bad, r.time)
			}
		}
		if !wave1 || !wave2 || !complete {
			t.Errorf("revision %d in the rollout history: wave 1 with one device %v, wave 2 with three %v, complete %v; rows %+v", rev, wave1, wave2, complete, rows)
		}
	}
}

func getHistory(t *testing.T, h *Hub, path string, v any) {
	t.Helper()
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, path, nil, http.StatusOK), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// awaitHistory polls a history route until cond holds.
func awaitHistory[T any](t *testing.T, h *Hub, path, what string, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		var v T
		getHistory(t, h, path, &v)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; %s answers %+v", what, e2eConverge, path, v)
		}
		time.Sleep(pollEvery) // poll interval
	}
}

// awaitRolloutHistory waits until the deployment's history shows
// revision rev complete on three devices: the hub records a rollout's
// statuses every second, so a test that moves on at once could outrun it.
func awaitRolloutHistory(t *testing.T, h *Hub, name string, rev int32) {
	t.Helper()
	awaitHistory(t, h, "/v1/dashboard/history/deployments/"+name, fmt.Sprintf("revision %d complete in the history", rev), func(d history.Deployment) bool {
		n := len(d.Time)
		return n > 0 && d.Revision[n-1] == rev && d.Phase[n-1] == string(schema.RolloutComplete) && d.Ready[n-1] == 3
	})
}

// writeDoc writes docs/name for the README, with -update only.
func writeDoc(t *testing.T, name string, png []byte) {
	t.Helper()
	if !updateDocs() {
		return
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// elementScreenshot saves a screenshot of the element sel.
func (b *browser) elementScreenshot(name, sel string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		b.fail("screenshot of "+sel, err)
	}
	p := filepath.Join(b.t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s: %d KB", p, len(png)/1024)
	return png
}
