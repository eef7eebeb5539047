package test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// privateApp is a Deployment, ConfigMap and Secret whose contents a
// monitor must never see.
const privateApp = `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {site: lab}}
  template:
    spec:
      containers:
      - name: app
        image: registry.example/private-image:1
        command: [/private-command]
        env: [{name: API_URL, value: PRIVATE-ENV-VALUE}]
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: cfg}
data: {app.ini: PRIVATE-CONFIG}
---
apiVersion: fleet/v1
kind: Secret
metadata: {name: creds}
stringData: {password: PRIVATE-SECRET}
`

var privateStrings = []string{"private-image", "private-command", "PRIVATE-ENV-VALUE", "PRIVATE-CONFIG", "PRIVATE-SECRET"}

// doAs makes a request to the hub's API with a bearer token.
func doAs(t *testing.T, h *Hub, token, method, path string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestE2EPrivilege: against a real fleet-hub process, a monitor token
// gets 403 on specs, ConfigMaps, Secrets, credentials, bootstrap tokens,
// revisions, mosquitto files and the audit trail over HTTP, reads status
// and events with no spec in them, and over MQTT gets nothing on desired
// topics while it does get status; a viewer reads specs but writes
// nothing; and the audit trail records it all and survives a restart.
func TestE2EPrivilege(t *testing.T) {
	t.Parallel()
	sub := sysdeps.Require(t, "mosquitto_sub")
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", map[string]string{"site": "lab"})
	applyYAML(t, h, privateApp)
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))
	// The device's own desired state does carry the image: it is there
	// for a monitor to miss.
	dev.awaitDesired("pi", func(ds schema.DesiredState) bool {
		return len(ds.Pods) == 1 && strings.Contains(ds.Pods[0].Spec.Containers[0].Image, "private-image")
	})
	dev.mustPublish(topics.Device("pi", schema.TopicStatus), true, statusPayload("pi", 1, ""))
	mon := addMonitor(t, h, "grafana")

	t.Run("http", func(t *testing.T) {
		for _, path := range []string{
			"/v1/deployments/web/revisions", "/v1/deployments/web/revisions/1",
			"/v1/configmaps", "/v1/configmaps/cfg", "/v1/secrets", "/v1/secrets/creds",
			"/v1/credentials", "/v1/bootstrap-tokens", "/v1/mosquitto/passwd", "/v1/mosquitto/acl",
			"/v1/audit", "/v1/devices/pi/pods/web/log", "/v1/devices/pi/crashreports",
		} {
			code, body := doAs(t, h, mon, http.MethodGet, path, "")
			if code != http.StatusForbidden {
				t.Errorf("monitor GET %s: %d %.300s, want 403", path, code, body)
			}
		}
		for _, path := range []string{
			"/v1/devices", "/v1/devices/pi", "/v1/deployments", "/v1/deployments/web", "/v1/deployments/web/status",
			"/v1/events", "/v1/devices/pi/events", "/v1/info", "/metrics", "/v1/top",
			"/v1/dashboard/session", "/v1/dashboard/summary", "/v1/dashboard/devices",
		} {
			code, body := doAs(t, h, mon, http.MethodGet, path, "")
			if code != http.StatusOK {
				t.Errorf("monitor GET %s: %d %.300s, want 200", path, code, body)
			}
			for _, p := range privateStrings {
				if strings.Contains(body, p) {
					t.Errorf("monitor GET %s: the answer holds %q", path, p)
				}
			}
		}
		if code, _ := doAs(t, h, mon, http.MethodPost, "/v1/apply", deviceYAML("x", nil)); code != http.StatusForbidden {
			t.Errorf("monitor apply: %d", code)
		}

		var viewer schema.Credential
		body := mustDo(t, h, http.MethodPost, "/v1/credentials", []byte(`{"name":"ci","role":"viewer"}`), http.StatusCreated)
		if err := json.Unmarshal(body, &viewer); err != nil || viewer.Token == "" {
			t.Fatalf("create viewer: %v %s", err, body)
		}
		if code, body := doAs(t, h, viewer.Token, http.MethodGet, "/v1/deployments/web", ""); code != http.StatusOK || !strings.Contains(body, "private-image") {
			t.Errorf("viewer GET deployment: %d %.300s", code, body)
		}
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, "/v1/apply", deviceYAML("x", nil)},
			{http.MethodDelete, "/v1/devices/pi", ""},
			{http.MethodPost, "/v1/credentials", `{"name":"y","role":"admin"}`},
			{http.MethodGet, "/v1/audit", ""},
			{http.MethodGet, "/v1/mosquitto/passwd", ""},
		} {
			if code, body := doAs(t, h, viewer.Token, c.method, c.path, c.body); code != http.StatusForbidden {
				t.Errorf("viewer %s %s: %d %.300s, want 403", c.method, c.path, code, body)
			}
		}
	})

	t.Run("mqtt", func(t *testing.T) {
		u, err := url.Parse(h.MQTTURL)
		if err != nil {
			t.Fatal(err)
		}
		// Every filter that could reach the desired state, and the status
		// filter as the control: for 4 s, whatever arrives is printed.
		args := []string{"-h", u.Hostname(), "-p", u.Port(), "-u", "grafana", "-P", mon, "-v", "-W", "4",
			"-t", topics.Device("pi", schema.TopicDesired), "-t", topics.DeviceFilter(schema.TopicDesired),
			"-t", "fleet/v1/#", "-t", "#", "-t", topics.DeviceFilter(schema.TopicStatus)}
		out, _ := exec.CommandContext(t.Context(), sub, args...).CombinedOutput() // -W ends it with an error
		if !strings.Contains(string(out), topics.Device("pi", schema.TopicStatus)+" ") {
			t.Fatalf("mosquitto_sub as the monitor got no status (the control):\n%s", out)
		}
		if strings.Contains(string(out), "/desired") || strings.Contains(string(out), "private-image") {
			t.Errorf("mosquitto_sub as the monitor got a desired state:\n%s", out)
		}
	})

	t.Run("audit", func(t *testing.T) {
		check := func(when string) {
			t.Helper()
			var l schema.AuditList
			if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/audit?limit=0", nil, http.StatusOK), &l); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, e := range l.Items {
				lines = append(lines, strings.Join([]string{e.Actor, e.Role, e.Action, e.Object, e.Result}, " "))
				// Refusals are aggregated: an entry counting several names
				// their objects in its detail (hub/API.md, "Audit trail").
				if _, objs, ok := strings.Cut(e.Detail, "(objects: "); ok && e.Object == "" {
					for _, o := range strings.Split(strings.TrimSuffix(objs, ")"), ", ") {
						lines = append(lines, strings.Join([]string{e.Actor, e.Role, e.Action, o, e.Result}, " "))
					}
				}
			}
			all := strings.Join(lines, "\n")
			for _, want := range []string{
				"admin admin issue-token devices/pi ok", "admin admin apply deployments/web,configmaps/cfg,secrets/creds ok",
				"admin admin create credentials/grafana ok", "grafana monitor list secrets 403",
				"grafana monitor get credentials 403", "grafana monitor apply  403", "ci viewer apply  403",
			} {
				if !strings.Contains(all, want+"\n") && !strings.HasSuffix(all, want) {
					t.Errorf("%s: no %q in the audit trail:\n%s", when, want, all)
				}
			}
			raw, _ := json.Marshal(l)
			if strings.Contains(string(raw), mon) || strings.Contains(string(raw), tok) || strings.Contains(string(raw), h.Token) {
				t.Errorf("%s: a token is in the audit trail", when)
			}
		}
		check("before the restart")
		if !strings.Contains(h.Logs(), `"msg":"audit"`) && !strings.Contains(h.Logs(), "msg=audit") {
			t.Errorf("no audit line in the hub's log")
		}
		h.Restart()
		check("after the restart")
	})
}
