package fakehubtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const manifest = `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: web, image: nginx}]
`

func post(t *testing.T, h *Hub, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestGenerationFollowsSpecOnly(t *testing.T) {
	h := New("tok")
	if code, body := post(t, h, "/v1/apply", manifest); code != 200 || !strings.Contains(body, `"action":"created"`) {
		t.Fatalf("%d %s", code, body)
	}
	// A label is not spec: configured, generation unchanged.
	labelled := strings.Replace(manifest, "{name: web}", "{name: web, labels: {a: b}}", 1)
	if _, body := post(t, h, "/v1/apply", labelled); !strings.Contains(body, `"action":"configured"`) {
		t.Fatal(body)
	}
	if g := h.Deployment("web").Metadata.Generation; g != 1 {
		t.Fatalf("generation %d after a label change", g)
	}
	post(t, h, "/v1/apply", strings.Replace(labelled, "image: nginx", "image: nginx:2", 1))
	d := h.Deployment("web")
	if d.Metadata.Generation != 2 || d.Metadata.ResourceVersion != "3" {
		t.Fatalf("after a spec change: %+v", d.Metadata)
	}
}

func TestRefusals(t *testing.T) {
	h := New("tok")
	if code, _ := post(t, h, "/v1/apply", strings.Repeat("#", schema.MaxManifestBytes+1)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d", code)
	}
	if code, body := post(t, h, "/v1/apply", strings.Replace(manifest, "image: nginx", "image: \"\"", 1)); code != 400 || !strings.Contains(body, `"details"`) {
		t.Fatalf("invalid: %d %s", code, body)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/devices", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", rec.Code)
	}
}

func do(t *testing.T, h *Hub, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestInfoAndCredentials(t *testing.T) {
	h := New("tok")
	if code, body := do(t, h, http.MethodGet, "/v1/info", ""); code != 200 || !strings.Contains(body, `"mqttURL":"`+DefaultMQTTURL+`"`) {
		t.Fatalf("info: %d %s", code, body)
	}
	h.SetInfo(nil)
	if code, _ := do(t, h, http.MethodGet, "/v1/info", ""); code != 404 {
		t.Fatalf("no info: %d", code)
	}
	code, body := do(t, h, http.MethodPost, "/v1/credentials", `{"name":"grafana","role":"monitor"}`)
	_, tok := h.Credential("grafana")
	if code != 201 || tok == "" || !strings.Contains(body, `"token":"`+tok+`"`) {
		t.Fatalf("create: %d %s", code, body)
	}
	for _, bad := range []string{`{"name":"grafana","role":"monitor"}`, `{"name":"x","role":"admin"}`, `{"name":"Bad","role":"monitor"}`, `{"name":"x","role":"monitor","extra":1}`} {
		if code, body := do(t, h, http.MethodPost, "/v1/credentials", bad); code != 409 && code != 400 {
			t.Errorf("create %s: %d %s", bad, code, body)
		}
	}
	if code, body := do(t, h, http.MethodGet, "/v1/credentials", ""); code != 200 || body != `{"items":[{"name":"grafana","role":"monitor"}]}`+"\n" {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, _ := do(t, h, http.MethodDelete, "/v1/credentials/grafana", ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := do(t, h, http.MethodDelete, "/v1/credentials/grafana", ""); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
}

func TestFail(t *testing.T) {
	h := New("tok")
	h.Fail(http.MethodGet, "/v1/devices", 1, http.StatusServiceUnavailable, "ServiceUnavailable")
	if code, body := do(t, h, http.MethodGet, "/v1/devices", ""); code != 503 || !strings.Contains(body, `"reason":"ServiceUnavailable"`) {
		t.Fatalf("injected: %d %s", code, body)
	}
	if code, _ := do(t, h, http.MethodGet, "/v1/devices", ""); code != 200 {
		t.Fatalf("after the injected failure: %d", code)
	}
}
