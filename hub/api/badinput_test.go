package api

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// aliasBomb is a "billion laughs" YAML document.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: bomb}\n")
	b.WriteString(`a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]` + "\n")
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		refs := strings.TrimSuffix(strings.Repeat("*"+prev+",", 9), ",")
		fmt.Fprintf(&b, "%s: &%s [%s]\n", n, n, refs)
		prev = n
	}
	return b.String()
}

func TestBadInputIsRefusedAndStoresNothing(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, "POST", "/v1/apply", deploymentYAML("web", "nginx:1")+"---\n"+deviceYAML("pi")); r.Code != http.StatusOK {
		t.Fatalf("seed: %d %s", r.Code, r.Body)
	}
	before, err := h.Store.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 4096)
	if _, err := rand.Read(garbage); err != nil {
		t.Fatal(err)
	}
	container := "spec.template.spec.containers[0]"
	tests := []struct {
		name   string
		body   []byte
		code   int
		fields []string
	}{
		{"10 MB body", bytes.Repeat([]byte("a"), 10<<20), http.StatusRequestEntityTooLarge, nil},
		{"alias bomb", []byte(aliasBomb()), http.StatusBadRequest, nil},
		{"binary garbage", garbage, http.StatusBadRequest, nil},
		{"NUL bytes", []byte("apiVersion: fleet/v1\x00"), http.StatusBadRequest, nil},
		{"empty body", nil, http.StatusBadRequest, nil},
		{"JSON list", []byte(`[1,2]`), http.StatusBadRequest, nil},
		{"not YAML", []byte("{{{"), http.StatusBadRequest, nil},
		{"unknown field", []byte(strings.Replace(deploymentYAML("web", "nginx:9"), "image:", "imagee:", 1)), http.StatusBadRequest, []string{container + ".imagee"}},
		{"unknown top-level field", []byte(deploymentYAML("web", "nginx:9") + "extra: 1\n"), http.StatusBadRequest, []string{"extra"}},
		{"bad name", []byte(deploymentYAML("Web_1", "nginx:9")), http.StatusBadRequest, []string{"metadata.name"}},
		{"too long name", []byte(deploymentYAML(strings.Repeat("a", 64), "nginx:9")), http.StatusBadRequest, []string{"metadata.name"}},
		{"missing image", []byte(deploymentYAML("web", `""`)), http.StatusBadRequest, []string{container + ".image"}},
		{"bad image", []byte(deploymentYAML("web", "UPPER/Case::x")), http.StatusBadRequest, []string{container + ".image"}},
		{"negative memory", []byte(deploymentYAML("web", "nginx:9") + "        resources: {limits: {memory: \"-64Mi\"}}\n"), http.StatusBadRequest, []string{container + ".resources.limits.memory"}},
		{"malformed memory", []byte(deploymentYAML("web", "nginx:9") + "        resources: {limits: {memory: 64Mx}}\n"), http.StatusBadRequest, []string{container + ".resources.limits.memory"}},
		{"memory of wrong type", []byte(deploymentYAML("web", "nginx:9") + "        resources: {limits: {memory: [1]}}\n"), http.StatusBadRequest, nil},
		{"wrong apiVersion", []byte(strings.Replace(deploymentYAML("web", "nginx:9"), "fleet/v1", "fleet/v2", 1)), http.StatusBadRequest, []string{"apiVersion"}},
		{"wrong kind", []byte(strings.Replace(deploymentYAML("web", "nginx:9"), "kind: Deployment", "kind: Pod", 1)), http.StatusBadRequest, []string{"kind"}},
		{"reserved label", []byte(deviceYAML("pi", "fleet/owner", "me")), http.StatusBadRequest, []string{"metadata.labels[fleet/owner]"}},
		{"every invalid field of every document", []byte(deploymentYAML("web", `""`) + "---\n" + deploymentYAML("Bad_Name", "nginx:9") + "---\n" + deviceYAML("pi-9")),
			http.StatusBadRequest, []string{container + ".image", "metadata.name"}},
		{"one good, one bad: all or nothing", []byte(deviceYAML("new-device") + "---\n" + deploymentYAML("web", `""`)), http.StatusBadRequest, []string{container + ".image"}},
		{"same object twice", []byte(deviceYAML("dup") + "---\n" + deviceYAML("dup")), http.StatusBadRequest, []string{"metadata.name"}},
	}
	paths := []struct{ method, path string }{
		{"POST", "/v1/apply"},
		{"POST", "/v1/deployments"},
		{"PUT", "/v1/deployments/web"},
	}
	for _, tt := range tests {
		for _, p := range paths {
			t.Run(tt.name+" "+p.method+" "+p.path, func(t *testing.T) {
				r := h.do(t, p.method, p.path, h.Admin, tt.body)
				multi := bytes.Contains(tt.body, []byte("\n---\n"))
				if p.path != "/v1/apply" && multi && r.Code == http.StatusBadRequest {
					return // single-object paths may refuse several documents first
				}
				if r.Code != tt.code {
					t.Fatalf("%d, want %d: %.300s", r.Code, tt.code, r.Body)
				}
				st := r.status(t)
				if st.Code != tt.code {
					t.Errorf("status code %d", st.Code)
				}
				for _, f := range tt.fields {
					if !hasField(st, f) {
						t.Errorf("details %v do not name %s", st.Details, f)
					}
				}
			})
		}
	}
	after, err := h.Store.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("bad input changed the store: revision %d -> %d", before, after)
	}
	r := h.admin(t, "GET", "/v1/deployments/web", "")
	if r.Code != http.StatusOK || !bytes.Contains(r.Body, []byte("nginx:1")) {
		t.Errorf("stored deployment changed: %s", r.Body)
	}
	if strings.Contains(h.Logs.String(), "level=ERROR") {
		t.Errorf("bad input logged an error:\n%s", h.Logs.String())
	}
}

func TestPanicIsA500(t *testing.T) {
	h := newTestHub(t, Options{})
	h.API.Handle("GET /boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	r := h.admin(t, "GET", "/boom", "")
	if r.Code != http.StatusInternalServerError || r.status(t).Reason != ReasonInternalError {
		t.Errorf("panic: %d %s", r.Code, r.Body)
	}
	if !strings.Contains(h.Logs.String(), "handler panic") {
		t.Error("panic not logged")
	}
	if r := h.admin(t, "GET", "/healthz", ""); r.Code != http.StatusOK || string(r.Body) != "ok\n" {
		t.Errorf("healthz after a panic: %d %q", r.Code, r.Body)
	}
}

// TestOversizedStreamedBody sends a body without Content-Length (chunked),
// so only http.MaxBytesReader can stop it.
func TestOversizedStreamedBody(t *testing.T) {
	h := newTestHub(t, Options{})
	body := io.MultiReader(strings.NewReader(deviceYAML("pi")+"# "), bytes.NewReader(bytes.Repeat([]byte("a"), 10<<20)))
	req, err := http.NewRequestWithContext(t.Context(), "POST", h.URL+"/v1/apply", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("%d, want 413", resp.StatusCode)
	}
	if r := h.admin(t, "GET", "/v1/devices/pi", ""); r.Code != http.StatusNotFound {
		t.Errorf("the oversized apply stored something: %d", r.Code)
	}
}
