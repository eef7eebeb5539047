package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func TestApplyFlow(t *testing.T) {
	h := newTestHub(t, Options{})
	apply := func(body, query string) schema.ApplyResponse {
		t.Helper()
		r := h.admin(t, "POST", "/v1/apply"+query, body)
		if r.Code != http.StatusOK {
			t.Fatalf("apply: %d %s", r.Code, r.Body)
		}
		var resp schema.ApplyResponse
		if err := json.Unmarshal(r.Body, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	actions := func(resp schema.ApplyResponse) string {
		var a []string
		for _, r := range resp.Results {
			a = append(a, r.Kind+"/"+r.Name+"="+r.Action)
		}
		return strings.Join(a, " ")
	}
	both := deploymentYAML("web", "nginx:1") + "---\n" + deviceYAML("pi-1", "site", "a")
	steps := []struct {
		body, query, want string
	}{
		{both, "?dryRun=server", "Deployment/web=created Device/pi-1=created"},
		{both, "", "Deployment/web=created Device/pi-1=created"},
		{both, "", "Deployment/web=unchanged Device/pi-1=unchanged"},
		{deploymentYAML("web", "nginx:2"), "?dryRun=server", "Deployment/web=configured"},
		{deploymentYAML("web", "nginx:2"), "", "Deployment/web=configured"},
	}
	for i, st := range steps {
		if got := actions(apply(st.body, st.query)); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
	r := h.admin(t, "GET", "/v1/deployments/web", "")
	var d schema.Deployment
	if err := json.Unmarshal(r.Body, &d); err != nil || r.Code != http.StatusOK {
		t.Fatalf("get: %d %s", r.Code, r.Body)
	}
	if d.Metadata.Generation != 2 || d.Metadata.UID == "" || d.Metadata.CreationTimestamp == nil || d.Spec.Template.Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("stored deployment %+v", d.Metadata)
	}

	// Lists, with selectors.
	for _, n := range []string{"pi-2", "pi-3"} {
		if r := h.admin(t, "POST", "/v1/devices", deviceYAML(n, "site", "b")); r.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", n, r.Code, r.Body)
		}
	}
	lists := []struct {
		query string
		want  []string
	}{
		{"", []string{"pi-1", "pi-2", "pi-3"}},
		{"?labelSelector=site=b", []string{"pi-2", "pi-3"}},
		{"?labelSelector=site%3Db,fleet/device%3Dpi-3", []string{"pi-3"}},
		{"?labelSelector=site==a", []string{"pi-1"}},
		{"?labelSelector=site=c", []string{}},
		// Set-based selectors, as kubectl's -l sends them.
		{"?labelSelector=" + url.QueryEscape("site!=a"), []string{"pi-2", "pi-3"}},
		{"?labelSelector=" + url.QueryEscape("site in (a,b)"), []string{"pi-1", "pi-2", "pi-3"}},
		{"?labelSelector=" + url.QueryEscape("site notin (b)"), []string{"pi-1"}},
		{"?labelSelector=" + url.QueryEscape("fleet/device in (pi-1,pi-3),site!=b"), []string{"pi-1"}},
		{"?labelSelector=site", []string{"pi-1", "pi-2", "pi-3"}},
		{"?labelSelector=" + url.QueryEscape("!site"), []string{}},
		{"?labelSelector=" + url.QueryEscape("!gpu,site=b"), []string{"pi-2", "pi-3"}},
		{"?labelSelector=" + url.QueryEscape("site=a,site=b"), []string{}},
	}
	for _, l := range lists {
		r := h.admin(t, "GET", "/v1/devices"+l.query, "")
		var list schema.DeviceList
		if err := json.Unmarshal(r.Body, &list); err != nil || r.Code != http.StatusOK {
			t.Fatalf("list %s: %d %s", l.query, r.Code, r.Body)
		}
		names := []string{}
		for _, it := range list.Items {
			names = append(names, it.Metadata.Name)
		}
		if strings.Join(names, ",") != strings.Join(l.want, ",") || list.Kind != "DeviceList" || list.Metadata.ResourceVersion == "" {
			t.Errorf("list %s: %s %v at %q", l.query, list.Kind, names, list.Metadata.ResourceVersion)
		}
		if !bytes.Contains(r.Body, []byte(`"items":[`)) {
			t.Errorf("list %s: items is not a JSON list: %s", l.query, r.Body)
		}
	}

	// Update with the current resourceVersion, then delete with it.
	put := strings.Replace(deploymentYAML("web", "nginx:3"), "name: web", "name: web\n  resourceVersion: \""+d.Metadata.ResourceVersion+"\"", 1)
	r = h.admin(t, "PUT", "/v1/deployments/web?dryRun=server", put)
	if r.Code != http.StatusOK {
		t.Fatalf("dry-run put: %d %s", r.Code, r.Body)
	}
	r = h.admin(t, "PUT", "/v1/deployments/web", put)
	if err := json.Unmarshal(r.Body, &d); err != nil || r.Code != http.StatusOK || d.Metadata.Generation != 3 {
		t.Fatalf("put: %d %s", r.Code, r.Body)
	}
	r = h.admin(t, "DELETE", "/v1/deployments/web?dryRun=server&resourceVersion="+d.Metadata.ResourceVersion, "")
	if r.Code != http.StatusOK {
		t.Fatalf("dry-run delete: %d %s", r.Code, r.Body)
	}
	r = h.admin(t, "DELETE", "/v1/deployments/web?resourceVersion="+d.Metadata.ResourceVersion, "")
	if r.Code != http.StatusOK || !bytes.Contains(r.Body, []byte(`"name":"web"`)) {
		t.Fatalf("delete: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "GET", "/v1/deployments/web", ""); r.Code != http.StatusNotFound {
		t.Errorf("get after delete: %d", r.Code)
	}
}

func TestErrorCodes(t *testing.T) {
	h := newTestHub(t, Options{})
	r := h.admin(t, "POST", "/v1/deployments", deploymentYAML("web", "nginx:1"))
	if r.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	stale := strings.Replace(deploymentYAML("web", "nginx:2"), "name: web", "name: web\n  resourceVersion: \"0\"", 1)
	tests := []struct {
		name, method, path, body string
		code                     int
		reason, field            string
	}{
		{"unknown path", "GET", "/nope", "", 404, ReasonNotFound, ""},
		{"unknown kind", "GET", "/v1/pods", "", 404, ReasonNotFound, ""},
		{"unknown kind, object", "GET", "/v1/pods/x", "", 404, ReasonNotFound, ""},
		{"missing object", "GET", "/v1/deployments/nope", "", 404, ReasonNotFound, ""},
		{"delete missing", "DELETE", "/v1/devices/nope", "", 404, ReasonNotFound, ""},
		{"update missing", "PUT", "/v1/deployments/nope", deploymentYAML("nope", "nginx:1"), 404, ReasonNotFound, ""},
		{"token of a deployment", "POST", "/v1/deployments/web/token", "", 404, ReasonNotFound, ""},
		{"PATCH", "PATCH", "/v1/deployments/web", "", 405, ReasonMethodNotAllowed, ""},
		{"GET apply", "GET", "/v1/apply", "", 405, ReasonMethodNotAllowed, ""},
		{"DELETE list", "DELETE", "/v1/deployments", "", 405, ReasonMethodNotAllowed, ""},
		{"GET token", "GET", "/v1/devices/pi/token", "", 405, ReasonMethodNotAllowed, ""},
		{"POST healthz", "POST", "/healthz", "", 405, ReasonMethodNotAllowed, ""},
		{"create existing", "POST", "/v1/deployments", deploymentYAML("web", "nginx:1"), 409, ReasonAlreadyExists, ""},
		{"stale update", "PUT", "/v1/deployments/web", stale, 409, ReasonConflict, ""},
		{"stale apply", "POST", "/v1/apply", stale, 409, ReasonConflict, ""},
		{"stale delete", "DELETE", "/v1/deployments/web?resourceVersion=0", "", 409, ReasonConflict, ""},
		{"bad resourceVersion", "DELETE", "/v1/deployments/web?resourceVersion=abc", "", 400, ReasonInvalid, "resourceVersion"},
		{"bad dryRun", "POST", "/v1/apply?dryRun=yes", deploymentYAML("web", "nginx:1"), 400, ReasonInvalid, "dryRun"},
		{"bad watch", "GET", "/v1/devices?watch=maybe", "", 400, ReasonInvalid, "watch"},
		{"bad selector", "GET", "/v1/devices?labelSelector=site!", "", 400, ReasonInvalid, "labelSelector"},
		{"bad selector key", "GET", "/v1/devices?labelSelector=-x-%3Dy", "", 400, ReasonInvalid, "labelSelector"},
		{"bad selector op", "GET", "/v1/devices?labelSelector=a%3E1", "", 400, ReasonInvalid, "labelSelector"},
		{"bad selector set", "GET", "/v1/devices?labelSelector=" + url.PathEscape("site in (a"), "", 400, ReasonInvalid, "labelSelector"},
		{"bad watch selector", "GET", "/v1/devices?watch=true&labelSelector=a%3D%3D%3Db", "", 400, ReasonInvalid, "labelSelector"},
		{"bad watch resourceVersion", "GET", "/v1/devices?watch=true&resourceVersion=-1", "", 400, ReasonInvalid, "resourceVersion"},
		{"name does not match path", "PUT", "/v1/deployments/other", deploymentYAML("web", "nginx:1"), 400, ReasonInvalid, "metadata.name"},
		{"kind does not match path", "POST", "/v1/devices", deploymentYAML("web2", "nginx:1"), 400, ReasonInvalid, "kind"},
		{"two objects in a create", "POST", "/v1/devices", deviceYAML("a") + "---\n" + deviceYAML("b"), 400, ReasonBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.admin(t, tt.method, tt.path, tt.body)
			if r.Code != tt.code {
				t.Fatalf("%d, want %d: %s", r.Code, tt.code, r.Body)
			}
			st := r.status(t)
			if st.Code != tt.code || st.Reason != tt.reason || st.Kind != "Status" || st.APIVersion != schema.APIVersion || st.Message == "" {
				t.Errorf("status %+v, want code %d reason %s", st, tt.code, tt.reason)
			}
			if tt.field != "" && !hasField(st, tt.field) {
				t.Errorf("details %v do not name %s", st.Details, tt.field)
			}
			if tt.code == 405 && r.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	if strings.Contains(h.Logs.String(), "level=ERROR") {
		t.Errorf("an error was logged:\n%s", h.Logs.String())
	}
}

func hasField(st schema.Status, field string) bool {
	for _, d := range st.Details {
		if d.Field == field {
			return true
		}
	}
	return false
}

// TestApplyInvalidDocumentsAllInDetails: a manifest whose documents fail to
// decode lists the fields of every document in the 400's details, not only
// the first document's.
func TestApplyInvalidDocumentsAllInDetails(t *testing.T) {
	h := newTestHub(t, Options{})
	one := strings.Replace(deploymentYAML("one", "nginx:1"), "image: nginx:1", "image: nginx:1\n        enviroment: []", 1)
	two := strings.Replace(deploymentYAML("two", "nginx:1"), "image: nginx:1", "image: nginx:1\n        comand: [x]", 1)
	r := h.admin(t, "POST", "/v1/apply", one+"---\n"+two)
	if r.Code != 400 {
		t.Fatalf("%d, want 400: %s", r.Code, r.Body)
	}
	st := r.status(t)
	for _, f := range []string{"spec.template.spec.containers[0].enviroment", "spec.template.spec.containers[0].comand"} {
		if !hasField(st, f) {
			t.Errorf("details %v do not name %s", st.Details, f)
		}
	}
}

// TestApplyWarnsOfSecretsInEnv: the hub applies a Deployment that takes a
// Secret into a container's environment and says, in the response's
// warnings, that the value lands on the device's disk.
func TestApplyWarnsOfSecretsInEnv(t *testing.T) {
	h := newTestHub(t, Options{})
	dep := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {site: a}}
  template:
    spec:
      containers:
      - name: app
        image: nginx:1
        env: [{name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}]
`
	r := h.admin(t, "POST", "/v1/apply", dep)
	var resp schema.ApplyResponse
	if r.Code != http.StatusOK || json.Unmarshal(r.Body, &resp) != nil {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `takes Secret "db" into its environment (spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef)`) {
		t.Errorf("warnings %q", resp.Warnings)
	}
}
