package test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestHubProcessRefusesHostileBodies: a real fleet-hub answers bodies that
// are too big, alias bombs and binary garbage with a 4xx that says what is
// wrong, stores nothing, and keeps serving.
func TestHubProcessRefusesHostileBodies(t *testing.T) {
	h := StartHub(t, HubOptions{})
	bomb := `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	huge := append([]byte("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: huge}\nspec: {description: \""), bytes.Repeat([]byte("x"), 10<<20)...)
	huge = append(huge, "\"}\n"...)
	tests := []struct {
		name     string
		path     string
		body     []byte
		wantCode int
		wantText string
	}{
		{"10 MB body", "/v1/apply", huge, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"},
		{"10 MB body on create", "/v1/devices", huge, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"},
		{"alias bomb", "/v1/apply", []byte(bomb), http.StatusBadRequest, "aliasing"},
		{"binary garbage", "/v1/apply", []byte("\x7fELF\x02\x01\x01\x00\xff\xfe\xfd\x00"), http.StatusBadRequest, "not text"},
		{"unknown field", "/v1/apply", []byte("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, colour: red}\n"), http.StatusBadRequest, "metadata.colour"},
		{"wrong kind", "/v1/apply", []byte("apiVersion: fleet/v1\nkind: Pod\nmetadata: {name: pi}\n"), http.StatusBadRequest, "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := h.Do(t, "POST", tt.path, tt.body)
			if code != tt.wantCode || !strings.Contains(string(body), tt.wantText) {
				t.Errorf("POST %s: %d %.300s; want %d mentioning %q", tt.path, code, body, tt.wantCode, tt.wantText)
			}
		})
	}
	for _, kind := range []string{"devices", "deployments"} {
		code, body := h.Do(t, "GET", "/v1/"+kind, nil)
		if code != http.StatusOK || strings.Contains(string(body), `"name"`) {
			t.Errorf("after hostile bodies, GET /v1/%s = %d %.300s; want 200 and no objects", kind, code, body)
		}
	}
	if code, _ := h.Do(t, "GET", "/healthz", nil); code != http.StatusOK {
		t.Errorf("hub unhealthy after hostile bodies: %d", code)
	}
}
