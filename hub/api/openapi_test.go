package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestOpenAPIServed(t *testing.T) {
	h := newTestHub(t, Options{})
	for _, tc := range []struct{ path, ctype string }{
		{"/v1/openapi.yaml", "application/yaml"},
		{"/v1/openapi.json", "application/json"},
	} {
		// A monitor reads it; nobody without a token does.
		r := h.do(t, "GET", tc.path, h.Monitor, nil)
		if r.Code != http.StatusOK || r.Header.Get("Content-Type") != tc.ctype {
			t.Fatalf("GET %s as monitor: %d %s %.200s", tc.path, r.Code, r.Header.Get("Content-Type"), r.Body)
		}
		var doc struct {
			OpenAPI string         `json:"openapi"`
			Paths   map[string]any `json:"paths"`
		}
		if err := yaml.Unmarshal(r.Body, &doc); err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		if doc.OpenAPI != "3.0.3" || doc.Paths["/v1/openapi.json"] == nil {
			t.Errorf("GET %s: openapi %q, %d paths", tc.path, doc.OpenAPI, len(doc.Paths))
		}
		if tc.ctype == "application/json" && !json.Valid(r.Body) {
			t.Errorf("GET %s: not JSON", tc.path)
		}
		if tc.ctype == "application/yaml" && !bytes.Equal(r.Body, OpenAPIYAML()) {
			t.Errorf("GET %s: not the embedded file", tc.path)
		}
		if r := h.do(t, "GET", tc.path, "", nil); r.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", tc.path, r.Code)
		}
		if r := h.do(t, "POST", tc.path, h.Admin, nil); r.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", tc.path, r.Code)
		}
	}
}

func TestRoutesListsWhatIsRegistered(t *testing.T) {
	h := newTestHub(t, Options{})
	byPattern := map[string]Route{}
	for _, r := range h.API.Routes() {
		if _, dup := byPattern[r.Pattern]; dup {
			t.Errorf("%s listed twice", r.Pattern)
		}
		byPattern[r.Pattern] = r
	}
	for pattern, want := range map[string]Route{
		"/healthz":          {Pattern: "/healthz", Methods: []string{"GET"}, Public: true},
		"/v1/{kind}":        {Pattern: "/v1/{kind}", Methods: []string{"GET", "POST"}},
		"/v1/{kind}/{name}": {Pattern: "/v1/{kind}/{name}", Methods: []string{"DELETE", "GET", "PUT"}},
		"/v1/openapi.json":  {Pattern: "/v1/openapi.json", Methods: []string{"GET"}},
		"/":                 {Pattern: "/"}, // the 404 answer takes any method
	} {
		got, ok := byPattern[pattern]
		if !ok || got.Public != want.Public || !slices.Equal(got.Methods, want.Methods) {
			t.Errorf("route %s: %+v, want %+v", pattern, got, want)
		}
	}
	// A route added later is listed too, and the list is a copy.
	h.API.HandlePublic("/extra", Methods{http.MethodPost: func(http.ResponseWriter, *http.Request) {}})
	routes := h.API.Routes()
	last := routes[len(routes)-1]
	if last.Pattern != "/extra" || !last.Public || !slices.Equal(last.Methods, []string{"POST"}) {
		t.Errorf("last route %+v, want the public POST /extra", last)
	}
	last.Methods[0] = "PATCH"
	if again := h.API.Routes(); again[len(again)-1].Methods[0] != "POST" {
		t.Error("Routes returned the server's own slice")
	}
}
