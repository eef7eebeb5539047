package api

import (
	"net/http"
	"strings"
	"testing"
)

func TestAuthentication(t *testing.T) {
	h := newTestHub(t, Options{})
	tests := []struct {
		name, method, path, header string
		want                       int
	}{
		{"healthz needs no token", "GET", "/healthz", "", http.StatusOK},
		{"no token", "GET", "/v1/deployments", "", http.StatusUnauthorized},
		{"no token, unknown path", "GET", "/nope", "", http.StatusUnauthorized},
		{"no token, apply", "POST", "/v1/apply", "", http.StatusUnauthorized},
		{"wrong token", "GET", "/v1/deployments", "Bearer " + strings.Repeat("x", 43), http.StatusUnauthorized},
		{"empty bearer", "GET", "/v1/deployments", "Bearer ", http.StatusUnauthorized},
		{"basic auth", "GET", "/v1/deployments", "Basic " + h.Admin, http.StatusUnauthorized},
		{"token without scheme", "GET", "/v1/deployments", h.Admin, http.StatusUnauthorized},
		{"admin", "GET", "/v1/deployments", "Bearer " + h.Admin, http.StatusOK},
		{"admin, lower-case scheme", "GET", "/v1/devices", "bearer " + h.Admin, http.StatusOK},
		{"monitor may read", "GET", "/v1/devices", "Bearer " + h.Monitor, http.StatusOK},
		{"monitor may not write", "POST", "/v1/apply", "Bearer " + h.Monitor, http.StatusForbidden},
		{"monitor may not issue tokens", "POST", "/v1/devices/x/token", "Bearer " + h.Monitor, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, h.URL+tt.path, strings.NewReader(deviceYAML("pi")))
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if strings.Contains(h.Logs.String(), h.Admin) || strings.Contains(h.Logs.String(), h.Monitor) {
		t.Error("a token was logged")
	}
}

func TestDeviceTokenRoute(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, "POST", "/v1/devices/pi/token", ""); r.Code != http.StatusNotFound {
		t.Fatalf("token for a missing device: %d %s", r.Code, r.Body)
	}
	if r := h.admin(t, "POST", "/v1/devices", deviceYAML("pi")); r.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	var toks []string
	for range 2 {
		r := h.admin(t, "POST", "/v1/devices/pi/token", "")
		if r.Code != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("token: %d %v %s", r.Code, r.Header, r.Body)
		}
		var creds struct{ Name, Token string }
		if err := jsonUnmarshal(r.Body, &creds); err != nil || creds.Name != "pi" || creds.Token == "" {
			t.Fatalf("credentials %s: %v", r.Body, err)
		}
		toks = append(toks, creds.Token)
	}
	if h.Store.VerifyToken("pi", toks[0]) || !h.Store.VerifyToken("pi", toks[1]) {
		t.Error("the rotated token is still valid, or the new one is not")
	}
	if strings.Contains(h.Logs.String(), toks[1]) {
		t.Error("a device token was logged")
	}
	if r := h.admin(t, "DELETE", "/v1/devices/pi", ""); r.Code != http.StatusOK {
		t.Fatalf("delete: %d", r.Code)
	}
	if h.Store.VerifyToken("pi", toks[1]) {
		t.Error("token valid after the device was deleted")
	}
}
