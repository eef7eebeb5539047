package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestRevisionRoutes(t *testing.T) {
	h := newTestHub(t, Options{})
	for _, img := range []string{"nginx:1", "nginx:2"} {
		if r := h.admin(t, "POST", "/v1/apply", deploymentYAML("web", img)); r.Code != http.StatusOK {
			t.Fatalf("apply %s: %d %s", img, r.Code, r.Body)
		}
	}

	// Revisions hold pod templates: not for a monitor.
	for _, path := range []string{"/v1/deployments/web/revisions", "/v1/deployments/web/revisions/1"} {
		if r := h.do(t, "GET", path, h.Monitor, nil); r.Code != http.StatusForbidden {
			t.Errorf("monitor GET %s: %d %s", path, r.Code, r.Body)
		}
	}
	r := h.do(t, "GET", "/v1/deployments/web/revisions", h.Admin, nil)
	var list schema.DeploymentRevisionList
	if err := json.Unmarshal(r.Body, &list); r.Code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s (%v)", r.Code, r.Body, err)
	}
	if len(list.Items) != 2 || list.Items[0].Revision != 2 || list.Items[1].Revision != 1 ||
		list.Items[1].Template.Spec.Containers[0].Image != "nginx:1" || list.Items[0].ChangeCause != "by admin (admin)" {
		t.Fatalf("list = %+v, want revisions 2 then 1, caused by the admin credential", list.Items)
	}
	r = h.do(t, "GET", "/v1/deployments/web/revisions/1", h.Admin, nil)
	var rev schema.DeploymentRevision
	if err := json.Unmarshal(r.Body, &rev); r.Code != http.StatusOK || err != nil || rev.Revision != 1 || rev.Kind != schema.KindDeploymentRevision {
		t.Fatalf("get revision 1: %d %s", r.Code, r.Body)
	}
	// GET shows the current revision in the status, once, whether or not
	// the controller has counted the deployment.
	r = h.admin(t, "GET", "/v1/deployments/web", "")
	var dep schema.Deployment
	if err := json.Unmarshal(r.Body, &dep); err != nil || dep.Status == nil || dep.Status.Revision != 2 {
		t.Fatalf("get deployment: %s", r.Body)
	}

	tests := []struct {
		name, method, path, token, body string
		code                            int
		reason, field, inMessage        string
	}{
		{"monitor may not roll back", "POST", "/v1/deployments/web/rollback", h.Monitor, `{}`, 403, ReasonForbidden, "", "may only read"},
		{"missing deployment", "GET", "/v1/deployments/nope/revisions", h.Admin, "", 404, ReasonNotFound, "", "nope"},
		{"missing revision", "GET", "/v1/deployments/web/revisions/7", h.Admin, "", 404, ReasonNotFound, "", "revision 7"},
		{"bad revision", "GET", "/v1/deployments/web/revisions/x", h.Admin, "", 400, ReasonInvalid, "revision", ""},
		{"rollback to a missing revision", "POST", "/v1/deployments/web/rollback", h.Admin, `{"toRevision":7}`, 404, ReasonNotFound, "", "revision 7 of deployment \"web\" not found"},
		{"toRevision not a number", "POST", "/v1/deployments/web/rollback", h.Admin, `{"toRevision":"1"}`, 400, ReasonInvalid, "toRevision", ""},
		{"negative toRevision", "POST", "/v1/deployments/web/rollback", h.Admin, `{"toRevision":-2}`, 400, ReasonInvalid, "toRevision", ""},
		{"unknown field", "POST", "/v1/deployments/web/rollback", h.Admin, `{"revision":1}`, 400, ReasonInvalid, "revision", ""},
		{"not JSON", "POST", "/v1/deployments/web/rollback", h.Admin, `toRevision: 1`, 400, ReasonBadRequest, "", ""},
		{"stale resourceVersion", "POST", "/v1/deployments/web/rollback?resourceVersion=1", h.Admin, `{}`, 409, ReasonConflict, "", ""},
		{"GET rollback", "GET", "/v1/deployments/web/rollback", h.Admin, "", 405, ReasonMethodNotAllowed, "", ""},
		{"POST revisions", "POST", "/v1/deployments/web/revisions", h.Admin, "", 405, ReasonMethodNotAllowed, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			r := h.do(t, tt.method, tt.path, tt.token, body)
			st := r.status(t)
			if r.Code != tt.code || st.Reason != tt.reason || !strings.Contains(st.Message, tt.inMessage) {
				t.Fatalf("%d %s %q, want %d %s containing %q", r.Code, st.Reason, st.Message, tt.code, tt.reason, tt.inMessage)
			}
			if tt.field != "" && (len(st.Details) == 0 || st.Details[0].Field != tt.field) {
				t.Errorf("details %+v, want field %s", st.Details, tt.field)
			}
		})
	}

	// The undo: back to revision 1's template, as revision 3.
	r = h.admin(t, "POST", "/v1/deployments/web/rollback", "")
	var res schema.RollbackResponse
	if err := json.Unmarshal(r.Body, &res); r.Code != http.StatusOK || err != nil {
		t.Fatalf("rollback: %d %s", r.Code, r.Body)
	}
	d := res.Deployment
	if res.FromRevision != 2 || res.ToRevision != 1 || res.Unchanged || d.Status.Revision != 3 ||
		d.Spec.Template.Spec.Containers[0].Image != "nginx:1" || d.Metadata.Generation != 3 {
		t.Errorf("rollback = %+v", res)
	}
	// Now revision 2 is RolledBack and 1 is gone (it is 3): nothing to undo to.
	r = h.admin(t, "POST", "/v1/deployments/web/rollback", `{"toRevision":0}`)
	if st := r.status(t); r.Code != 400 || len(st.Details) == 0 || st.Details[0].Field != "toRevision" {
		t.Errorf("undo with no previous revision: %d %s", r.Code, r.Body)
	}
	// Deleting the deployment deletes its history.
	if r := h.admin(t, "DELETE", "/v1/deployments/web", ""); r.Code != 200 {
		t.Fatal(r.Code)
	}
	if r := h.admin(t, "GET", "/v1/deployments/web/revisions", ""); r.Code != 404 {
		t.Errorf("revisions of a deleted deployment: %d %s", r.Code, r.Body)
	}
}

func TestWriteWithStatusReplacesStoredStatus(t *testing.T) {
	for _, tc := range []struct{ raw, status, want string }{
		{`{"kind":"Deployment","spec":{},"status":{"revision":2}}`, `{"ready":1,"revision":2}`, `{"kind":"Deployment","spec":{},"status":{"ready":1,"revision":2}}`},
		{`{"kind":"Device","spec":{}}`, `{"online":true}`, `{"kind":"Device","spec":{},"status":{"online":true}}`},
		{`{"kind":"Deployment","status":{"revision":2}}`, ``, `{"kind":"Deployment","status":{"revision":2}}`},
	} {
		var b bytes.Buffer
		writeWithStatus(&b, []byte(tc.raw), []byte(tc.status))
		if b.String() != tc.want {
			t.Errorf("writeWithStatus(%s, %s) = %s, want %s", tc.raw, tc.status, b.String(), tc.want)
		}
	}
}
