package dashboard

import (
	"net/http"
	"strings"
	"testing"
)

// TestMonitorDashboardLeaksNoSpec: every route the page reads answers a
// monitor, and none carries an image, a command or an env value; the
// revisions (pod templates) are refused.
func TestMonitorDashboardLeaksNoSpec(t *testing.T) {
	f := newHub(t, "pi-1 online site=south", "pi-2 offline")
	const dep = `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {site: south}}
  template:
    spec:
      containers:
      - {name: app, image: registry.example/private-image:1, command: [/private-command], env: [{name: K, value: PRIVATE-ENV}]}
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
		t.Fatalf("apply: %d", resp.StatusCode)
	}
	for _, path := range []string{
		"/v1/dashboard/session", "/v1/dashboard/summary", "/v1/dashboard/devices",
		"/v1/dashboard/devices?pod=web&sort=state&limit=100",
		"/v1/deployments", "/v1/deployments/web", "/v1/deployments/web/status", "/v1/devices",
		"/v1/dashboard/history/online", "/v1/dashboard/history/devices/pi-1", "/v1/dashboard/history/deployments/web",
	} {
		resp, body := f.get(t, path, f.monitor)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("monitor GET %s: %d %s", path, resp.StatusCode, body)
		}
		for _, p := range []string{"private-image", "private-command", "PRIVATE-ENV"} {
			if strings.Contains(string(body), p) {
				t.Errorf("monitor GET %s: the answer holds %q: %s", path, p, body)
			}
		}
	}
	if resp, _ := f.get(t, "/v1/deployments/web/revisions", f.monitor); resp.StatusCode != http.StatusForbidden {
		t.Errorf("monitor GET revisions: %d, want 403", resp.StatusCode)
	}
	// The admin's page shows the template.
	if _, body := f.get(t, "/v1/deployments/web", f.admin); !strings.Contains(string(body), "PRIVATE-ENV") {
		t.Errorf("admin GET deployment: %s", body)
	}
}
