package test

import (
	"net/http"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestUpdateTermsBadInput: a malformed schedule, a window over 24 h, an
// unknown time zone and a lock path outside the pod are refused by a
// real fleet-hub with 400 naming the field, and `fleet apply` exits
// non-zero saying so; nothing is stored.
func TestUpdateTermsBadInput(t *testing.T) {
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	hub := StartHub(t, HubOptions{})
	f := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + hub.AdminConfig()}}
	for _, tt := range []struct{ name, spec, field, msg string }{
		{"malformed schedule", `updateWindow: {schedule: "0 25 * * *", duration: 4h}`, "spec.updateWindow.schedule", `hour field "25"`},
		{"duration over 24h", `updateWindow: {schedule: "0 1 * * *", duration: 25h}`, "spec.updateWindow.duration", "at most 24h"},
		{"unknown time zone", `updateWindow: {schedule: "0 1 * * *", duration: 4h, timeZone: Mars/Olympus}`, "spec.updateWindow.timeZone", `unknown time zone "Mars/Olympus"`},
		{"lock path outside the pod", `updateLock: {path: "/run/../../etc", deadline: 10m}`, "spec.updateLock.path", "clean absolute path"},
		{"lock policy", `updateLock: {onDeadline: never}`, "spec.updateLock.onDeadline", `unsupported value "never"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := f.on(t)
			manifest := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: bad-terms}
spec:
  selector: {matchLabels: {site: lab}}
  template: {spec: {containers: [{name: app, image: "nginx:1"}]}}
  ` + tt.spec + "\n"
			r := f.run(manifest, "apply", "-f", "-")
			if r.code == 0 || !strings.Contains(r.stderr, tt.field) || !strings.Contains(r.stderr, tt.msg) {
				t.Errorf("fleet apply: exit %d, stderr %q; want non-zero naming %s (%s)", r.code, r.stderr, tt.field, tt.msg)
			}
			body, err := yaml.YAMLToJSON([]byte(manifest))
			if err != nil {
				t.Fatal(err)
			}
			code, resp := hub.Do(t, http.MethodPost, "/v1/deployments", body)
			if code != http.StatusBadRequest || !strings.Contains(string(resp), tt.field) {
				t.Errorf("POST /v1/deployments: %d %s; want 400 naming %s", code, resp, tt.field)
			}
			if code, _ := hub.Do(t, http.MethodGet, "/v1/deployments/bad-terms", nil); code != http.StatusNotFound {
				t.Errorf("GET the refused deployment: %d, want 404", code)
			}
		})
	}
}
