package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// privateDeployment has what a monitor must never see: an image, a
// command, an env value and a change cause.
const privateDeployment = `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: web
  annotations: {kubernetes.io/change-cause: "hotfix PRIVATE-CAUSE"}
spec:
  selector: {matchLabels: {site: a}}
  template:
    spec:
      containers:
      - name: app
        image: registry.example/private-image:1
        command: [/bin/private-command]
        env: [{name: API_URL, value: PRIVATE-ENV-VALUE}]
`

// private are the strings of privateDeployment a monitor must not read.
var private = []string{"private-image", "private-command", "PRIVATE-ENV-VALUE", "PRIVATE-CAUSE", "interval=5"}

// TestRoleMatrix: each route × role → code. The hub's own routes
// (mosquitto files, metrics, events, logs, the dashboard) are stand-ins
// here, registered under their real patterns: roles.go decides by pattern.
// test/e2e_privilege_test.go TestE2EPrivilegeCrashReports hits every
// route with each role against a real hub, its real handlers and real
// data (a crashed container's report, events pointing at it).
func TestRoleMatrix(t *testing.T) {
	// Every wrong token of the matrix comes from 127.0.0.1: no throttling.
	h := newTestHub(t, Options{AuthLimiter: ratelimit.NewAuthLimiter(ratelimit.AuthOptions{Rate: ratelimit.Rate{Burst: 1000, PerSecond: 1000}})})
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }
	for _, p := range []string{"/v1/mosquitto/passwd", "/v1/mosquitto/acl", "/metrics", "/v1/info", "/v1/events",
		"/v1/devices/{name}/events", "/v1/dashboard/summary", "/v1/dashboard/devices", "/v1/top",
		"/v1/devices/{device}/pods/{pod}/log", "/v1/devices/{device}/crashreports"} {
		h.API.Handle(p, methods{http.MethodGet: ok})
	}
	viewer, err := h.Store.CreateCredential(t.Context(), "ci", store.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.admin(t, "POST", "/v1/apply", deviceYAML("pi", "site", "a")+"---\n"+privateDeployment+"---\n"+configMapYAML+"---\n"+secretYAML("creds", apiSecretValue)); r.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	tokens := map[string]string{"admin": h.Admin, "viewer": viewer, "monitor": h.Monitor, "anonymous": "", "wrong": strings.Repeat("w", 43)}
	roles := []string{"admin", "viewer", "monitor", "anonymous", "wrong"}

	tests := []struct {
		method, path, body string
		// codes for admin, viewer, monitor, anonymous, a wrong token
		want [5]int
	}{
		{"GET", "/v1/devices", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/devices/pi", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/deployments", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/deployments/web", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/deployments/web/status", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/deployments/web/revisions", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/deployments/web/revisions/1", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/configmaps", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/configmaps/gw", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/secrets", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/secrets/creds", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/credentials", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/bootstrap-tokens", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/mosquitto/passwd", "", [5]int{200, 403, 403, 401, 401}},
		{"GET", "/v1/mosquitto/acl", "", [5]int{200, 200, 403, 401, 401}},
		{"GET", "/v1/audit", "", [5]int{200, 403, 403, 401, 401}},
		{"GET", "/v1/devices/pi/pods/web/log", "", [5]int{200, 403, 403, 401, 401}},
		{"GET", "/v1/devices/pi/crashreports", "", [5]int{200, 403, 403, 401, 401}},
		{"GET", "/metrics", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/info", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/events", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/devices/pi/events", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/top", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/dashboard/summary", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/dashboard/devices", "", [5]int{200, 200, 200, 401, 401}},
		{"GET", "/v1/nope", "", [5]int{404, 404, 404, 401, 401}},
		{"GET", "/nope", "", [5]int{404, 404, 404, 401, 401}},
		// Writes: admins only. The dry runs leave the store as it is.
		{"POST", "/v1/apply?dryRun=server", deviceYAML("pi2"), [5]int{200, 403, 403, 401, 401}},
		{"POST", "/v1/devices?dryRun=server", deviceYAML("pi3"), [5]int{201, 403, 403, 401, 401}},
		{"PUT", "/v1/devices/pi?dryRun=server", deviceYAML("pi", "site", "b"), [5]int{200, 403, 403, 401, 401}},
		{"DELETE", "/v1/devices/pi?dryRun=server", "", [5]int{200, 403, 403, 401, 401}},
		{"POST", "/v1/deployments/web/rollback?resourceVersion=1", `{}`, [5]int{409, 403, 403, 401, 401}},
		{"POST", "/v1/devices/nope/token", "", [5]int{404, 403, 403, 401, 401}},
		{"POST", "/v1/credentials", `{"name":"x","role":"nope"}`, [5]int{400, 403, 403, 401, 401}},
		{"DELETE", "/v1/credentials/nope", "", [5]int{404, 403, 403, 401, 401}},
		{"POST", "/v1/bootstrap-tokens", `{"uses":-1}`, [5]int{400, 403, 403, 401, 401}},
		{"DELETE", "/v1/bootstrap-tokens/abcdef", "", [5]int{404, 403, 403, 401, 401}},
	}
	for _, tt := range tests {
		for i, role := range roles {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			r := h.do(t, tt.method, tt.path, tokens[role], body)
			if r.Code != tt.want[i] {
				t.Errorf("%s %s as %s: %d, want %d: %s", tt.method, tt.path, role, r.Code, tt.want[i], r.Body)
				continue
			}
			if role == "monitor" {
				for _, p := range private {
					if strings.Contains(string(r.Body), p) {
						t.Errorf("monitor %s %s: the answer holds %q: %s", tt.method, tt.path, p, r.Body)
					}
				}
			}
			if role == "viewer" || role == "admin" {
				noValue(t, role+" "+tt.path, r.Body)
			}
		}
	}
}

// TestMonitorSeesDeploymentsWithoutTemplate: a monitor's Deployments
// keep name, labels, selector, strategy and status, and lose the pod
// template and annotations, in get, list and watch alike.
func TestMonitorSeesDeploymentsWithoutTemplate(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, "POST", "/v1/apply", privateDeployment); r.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	check := func(what string, raw []byte) {
		t.Helper()
		var d schema.Deployment
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v: %s", what, err, raw)
		}
		if d.Metadata.Name != "web" || d.Spec.Selector.MatchLabels["site"] != "a" || d.Status == nil || d.Status.Revision != 1 {
			t.Errorf("%s: the monitor's view lost what it may see: %s", what, raw)
		}
		if len(d.Spec.Template.Spec.Containers) != 0 || d.Metadata.Annotations != nil {
			t.Errorf("%s: the monitor sees the template or annotations: %s", what, raw)
		}
	}
	r := h.do(t, "GET", "/v1/deployments/web", h.Monitor, nil)
	check("get", r.Body)
	r = h.do(t, "GET", "/v1/deployments", h.Monitor, nil)
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &l); err != nil || len(l.Items) != 1 {
		t.Fatalf("list: %v %s", err, r.Body)
	}
	check("list", l.Items[0])

	req, err := http.NewRequestWithContext(t.Context(), "GET", h.URL+"/v1/deployments?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Monitor)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatalf("watch: no event: %v", sc.Err())
	}
	var ev schema.WatchEvent
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type != schema.WatchAdded {
		t.Fatalf("watch: %v %s", err, sc.Bytes())
	}
	check("watch", ev.Object)
	// A change streams redacted as well.
	if r := h.admin(t, "POST", "/v1/apply", strings.Replace(privateDeployment, "private-image:1", "private-image:2", 1)); r.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == schema.WatchModified {
			break
		}
	}
	if ev.Type != schema.WatchModified || strings.Contains(string(ev.Object), "private") {
		t.Fatalf("watch MODIFIED: %s %s", ev.Type, ev.Object)
	}
	// The admin still sees everything.
	if r := h.admin(t, "GET", "/v1/deployments/web", ""); !strings.Contains(string(r.Body), "PRIVATE-ENV-VALUE") {
		t.Errorf("admin get: %s", r.Body)
	}
}

// TestCredentialRoles: POST /v1/credentials takes each role; only the
// hub's own admin credential cannot be deleted through the API.
func TestCredentialRoles(t *testing.T) {
	h := newTestHub(t, Options{})
	for _, role := range schema.Roles {
		r := h.admin(t, "POST", "/v1/credentials", `{"name":"c-`+role+`","role":"`+role+`"}`)
		var c schema.Credential
		if err := json.Unmarshal(r.Body, &c); r.Code != http.StatusCreated || err != nil || c.Role != role || len(c.Token) < 32 {
			t.Fatalf("create %s: %d %s", role, r.Code, r.Body)
		}
		if got, ok := h.Store.Authenticate(c.Token); !ok || got.Role != role {
			t.Errorf("%s token authenticates as %+v %t", role, got, ok)
		}
	}
	if r := h.admin(t, "POST", "/v1/credentials", `{"name":"x","role":"root"}`); r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), `"field":"role"`) {
		t.Errorf("unknown role: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "DELETE", "/v1/credentials/c-admin", ""); r.Code != http.StatusOK {
		t.Errorf("delete a second admin: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "DELETE", "/v1/credentials/admin", ""); r.Code != http.StatusForbidden {
		t.Errorf("delete the hub's admin: %d %s", r.Code, r.Body)
	}
}
