package fakehub

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
