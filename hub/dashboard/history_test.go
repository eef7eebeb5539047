package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/schema"
)

// uplotBanner is the first line of the vendored uPlot build: its version
// is the one vendor-uplot.sh fetches and doc.go names.
const uplotBanner = "/*! https://github.com/leeoniya/uPlot (v1.6.32) */"

// TestHistoryRoutes: the three routes answer what the history holds, to
// a monitor too; unknown names are 404, writes 405, no token 401.
func TestHistoryRoutes(t *testing.T) {
	f := newHub(t, "pi-1 online", "pi-2 offline")
	applyWeb(t, f)
	h := f.dash.opts.History
	h.RecordOnline(1, 1)
	uid, _, _ := f.model.Device("pi-1")
	temp := 47.5
	h.RecordDevice("pi-1", uid, history.DeviceReport{MemoryTotalBytes: 4 << 30, MemoryAvailableBytes: 3 << 30, TemperatureCelsius: &temp})
	h.RecordRollout("web", schema.DeploymentStatus{Rollout: &schema.RolloutStatus{Revision: 2, Step: 1, Steps: 2, Phase: schema.RolloutProgressing, Targeted: 2, Updated: 1}})

	var on history.Online
	getJSON(t, f, "/v1/dashboard/history/online", f.monitor, &on)
	if len(on.Time) != 1 || on.Online[0] != 1 || on.Offline[0] != 1 || on.WindowSeconds != 86400 {
		t.Errorf("online history: %+v", on)
	}
	var dev history.Device
	getJSON(t, f, "/v1/dashboard/history/devices/pi-1", f.monitor, &dev)
	if len(dev.Time) != 1 || dev.MemoryUsedBytes[0] == nil || *dev.MemoryUsedBytes[0] != 1<<30 || dev.DiskUsedBytes[0] != nil ||
		dev.TemperatureCelsius[0] == nil || *dev.TemperatureCelsius[0] != 47.5 || dev.MemoryTotalBytes != 4<<30 {
		t.Errorf("device history: %+v", dev)
	}
	var never history.Device
	getJSON(t, f, "/v1/dashboard/history/devices/pi-2", f.admin, &never)
	if never.Device != "pi-2" || never.Time == nil || len(never.Time) != 0 {
		t.Errorf("history of a device that reported nothing: %+v, want empty columns", never)
	}
	var dep history.Deployment
	getJSON(t, f, "/v1/dashboard/history/deployments/web", f.monitor, &dep)
	if len(dep.Time) != 1 || dep.Step[0] != 1 || dep.Steps[0] != 2 || dep.Updated[0] != 1 || dep.Phase[0] != string(schema.RolloutProgressing) {
		t.Errorf("deployment history: %+v", dep)
	}

	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{http.MethodGet, "/v1/dashboard/history/devices/nope", f.monitor, http.StatusNotFound},
		{http.MethodGet, "/v1/dashboard/history/deployments/nope", f.monitor, http.StatusNotFound},
		{http.MethodGet, "/v1/dashboard/history/online", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/dashboard/history/online", "wrong", http.StatusUnauthorized},
		{http.MethodPost, "/v1/dashboard/history/online", f.admin, http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/dashboard/history/devices/pi-1", f.monitor, http.StatusForbidden},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, f.srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

func applyWeb(t *testing.T, f *hubFixture) {
	t.Helper()
	const dep = `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {fleet/device: pi-1}}
  template: {spec: {containers: [{name: app, image: busybox}]}}
`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+"/v1/apply", strings.NewReader(dep))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("apply web: %d", resp.StatusCode)
	}
}

func getJSON(t *testing.T, f *hubFixture, path, token string, v any) {
	t.Helper()
	resp, body := f.get(t, path, token)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// TestVendoredUPlot: uPlot is the pinned version, with its licence, and
// the first view does not load it (nor charts.js): app.js does, when a
// chart comes into view.
func TestVendoredUPlot(t *testing.T) {
	a, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	js, css, lic, kit := a.files["uplot.min.js"], a.files["uplot.min.css"], a.files["uplot-LICENSE.txt"], a.files["charts.js"]
	if js == nil || css == nil || lic == nil || kit == nil {
		t.Fatalf("missing assets: uplot.min.js %v, uplot.min.css %v, uplot-LICENSE.txt %v, charts.js %v", js != nil, css != nil, lic != nil, kit != nil)
	}
	if !bytes.HasPrefix(js.raw, []byte(uplotBanner)) {
		t.Errorf("uplot.min.js starts %q, want the banner %q (run make uplot)", js.raw[:min(80, len(js.raw))], uplotBanner)
	}
	if !bytes.Contains(lic.raw, []byte("The MIT License")) {
		t.Error("uplot-LICENSE.txt is not uPlot's MIT licence")
	}
	if !bytes.Contains(kit.raw, []byte("version: '1.6.32'")) {
		t.Error("charts.js names another uPlot version than the one vendored")
	}
	if bytes.Contains(a.index.raw, []byte("uplot")) || bytes.Contains(a.index.raw, []byte("charts.js")) {
		t.Error("index.html loads the charts: the first view must not")
	}
	first := 0
	for _, as := range []*asset{a.index, a.files["app.js"], a.files["app.css"], a.files["icon.svg"]} {
		first += len(as.gz)
	}
	charts := len(js.gz) + len(css.gz) + len(kit.gz)
	t.Logf("first view (page, script, style sheet, icon): %d bytes gzipped; the charts add %d (uPlot %d + %d, charts.js %d) once shown",
		first, charts, len(js.gz), len(css.gz), len(kit.gz))
	if charts > 32<<10 {
		t.Errorf("the charts' files are %d bytes gzipped; keep them under 32 KB", charts)
	}
}
