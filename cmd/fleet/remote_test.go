package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/client/fakehubtest"
	"github.com/fleetmq/fleet/schema"
)

// remoteHub serves the remote-operation routes of the hub's HTTP contract
// (logs, exec, top, crash reports) in front of a fake hub that serves the
// rest: what each route answers is set by the test.
type remoteHub struct {
	hub *fakehubtest.Hub

	mu      sync.Mutex
	logs    func(w http.ResponseWriter, r *http.Request, device, pod string)
	exec    func(conn net.Conn, br *bufio.Reader, r *http.Request, device, pod string)
	execErr func(w http.ResponseWriter, r *http.Request) bool // answers before the upgrade when true
	top     map[string]schema.TopReport
	crashes map[string][]schema.CrashReport
}

// newRemoteEnv is newEnv with a hub that also serves remote operations.
func newRemoteEnv(t *testing.T) (*env, *remoteHub) {
	t.Helper()
	rh := &remoteHub{hub: fakehubtest.New(adminToken), top: map[string]schema.TopReport{}, crashes: map[string][]schema.CrashReport{}}
	srv := httptest.NewServer(rh)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	return &env{t: t, hub: rh.hub, url: srv.URL, dir: dir, vars: map[string]string{
		"FLEET_HUB": srv.URL, "FLEET_TOKEN": adminToken, "HOME": filepath.Join(dir, "home"),
	}}, rh
}

func statusJSON(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(schema.Status{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"}, Code: code, Reason: reason, Message: msg})
}

func (rh *remoteHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	remote := (len(p) == 5 && p[0] == "devices" && p[2] == "pods" && (p[4] == "log" || p[4] == "exec")) ||
		(len(p) == 3 && p[0] == "devices" && (p[2] == "top" || p[2] == "crashreports")) ||
		(len(p) == 1 && p[0] == "top")
	if !remote {
		rh.hub.ServeHTTP(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+adminToken {
		statusJSON(w, 401, "Unauthorized", "missing or wrong bearer token")
		return
	}
	if len(p) != 1 && rh.hub.Device(p[1]) == nil {
		statusJSON(w, 404, "NotFound", fmt.Sprintf("device %q not found", p[1]))
		return
	}
	rh.mu.Lock()
	logs, exec, execErr := rh.logs, rh.exec, rh.execErr
	rh.mu.Unlock()
	switch {
	case len(p) == 5 && p[4] == "log":
		if logs == nil {
			statusJSON(w, 404, "NotFound", "no logs")
			return
		}
		logs(w, r, p[1], p[3])
	case len(p) == 5:
		if execErr != nil && execErr(w, r) {
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Upgrade") != schema.ExecUpgradeProtocol {
			statusJSON(w, 400, "BadRequest", "exec needs POST with Upgrade: "+schema.ExecUpgradeProtocol)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", schema.ExecUpgradeProtocol)
		brw.Flush()
		exec(conn, brw.Reader, r, p[1], p[3])
	case p[0] == "top":
		rh.mu.Lock()
		var items []schema.TopReport
		for _, d := range mustDevices(rh.hub, r.URL.Query().Get("labelSelector")) {
			if rep, ok := rh.top[d]; ok {
				items = append(items, rep)
			}
		}
		rh.mu.Unlock()
		writeJSONTest(w, schema.TopReportList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.TopReportList"}, Items: items})
	case p[2] == "top":
		rh.mu.Lock()
		rep, ok := rh.top[p[1]]
		rh.mu.Unlock()
		if !ok {
			statusJSON(w, 503, "ServiceUnavailable", "device "+p[1]+" is offline and has never been measured")
			return
		}
		writeJSONTest(w, rep)
	default:
		rh.mu.Lock()
		items := rh.crashes[p[1]]
		rh.mu.Unlock()
		writeJSONTest(w, schema.CrashReportList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.CrashReportList"}, Items: items})
	}
}

// mustDevices lists the names of the fake hub's devices a selector
// matches, sorted, by asking it as the real hub would be asked.
func mustDevices(h *fakehubtest.Hub, sel string) []string {
	req := httptest.NewRequest(http.MethodGet, "/v1/devices?labelSelector="+sel, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var l schema.DeviceList
	json.Unmarshal(rec.Body.Bytes(), &l)
	var names []string
	for _, d := range l.Items {
		names = append(names, d.Metadata.Name)
	}
	return names
}

func writeJSONTest(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func execExit(conn net.Conn, x schema.ExecExit) {
	b, _ := json.Marshal(x)
	schema.WriteFrame(conn, schema.FrameExit, b)
}

// threeDevices applies deployment web (site=lab) and devices pi-1, pi-2
// (site=lab) and pi-3 (site=shop), which reports running web anyway.
func threeDevices(e *env) {
	e.t.Helper()
	devs := deviceYAML + "---\n" + strings.ReplaceAll(deviceYAML, "pi-1", "pi-2") + "---\n" +
		strings.ReplaceAll(strings.ReplaceAll(deviceYAML, "pi-1", "pi-3"), "site: lab", "site: shop")
	e.ok("", "apply", "-f", e.file("three.yaml", webYAML+"---\n"+devs))
	if err := e.hub.SetDeviceStatus("pi-3", &schema.DeviceObservedInfo{Online: true, Pods: []schema.PodStatus{{Name: "web", Phase: "Running", Containers: []schema.ContainerStatus{{Name: "web", State: "running"}}}}}); err != nil {
		e.t.Fatal(err)
	}
}
