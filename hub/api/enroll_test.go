package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestBootstrapTokens(t *testing.T) {
	h := newTestHub(t, Options{})

	resp := h.do(t, "POST", "/v1/bootstrap-tokens", h.Admin,
		[]byte(`{"description":"north","labels":{"site":"north"},"ttl":"1h","uses":100}`))
	if resp.Code != http.StatusCreated || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %v %s", resp.Code, resp.Header, resp.Body)
	}
	var created schema.BootstrapToken
	if err := json.Unmarshal(resp.Body, &created); err != nil {
		t.Fatal(err)
	}
	if id, err := schema.ParseBootstrapToken(created.Token); err != nil || id != created.ID {
		t.Fatalf("created token does not parse to ID %q: %v", created.ID, err)
	}
	if created.Uses != 100 || created.Used != 0 || created.Status != schema.BootstrapActive || created.Labels["site"] != "north" ||
		created.Expires == nil || created.Expires.Sub(created.Created) != time.Hour {
		t.Errorf("created = %+v", created)
	}

	// Defaults: 24 h, no use limit.
	resp = h.do(t, "POST", "/v1/bootstrap-tokens", h.Admin, nil)
	var def schema.BootstrapToken
	if err := json.Unmarshal(resp.Body, &def); err != nil || resp.Code != http.StatusCreated {
		t.Fatalf("create with defaults: %d %s", resp.Code, resp.Body)
	}
	if def.Uses != 0 || def.Expires == nil || def.Expires.Sub(def.Created) != DefaultBootstrapTTL {
		t.Errorf("defaults = %+v", def)
	}

	resp = h.do(t, "GET", "/v1/bootstrap-tokens", h.Admin, nil)
	if resp.Code != http.StatusOK || strings.Contains(string(resp.Body), created.Token) || strings.Contains(string(resp.Body), `"token"`) {
		t.Fatalf("list: %d %s (must never carry a token)", resp.Code, resp.Body)
	}
	var list schema.BootstrapTokenList
	if err := json.Unmarshal(resp.Body, &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v %s", err, resp.Body)
	}

	// A monitor reads neither the list nor writes anything.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/bootstrap-tokens"},
		{"POST", "/v1/bootstrap-tokens"},
		{"DELETE", "/v1/bootstrap-tokens/" + created.ID},
	} {
		if r := h.do(t, c.method, c.path, h.Monitor, nil); r.Code != http.StatusForbidden {
			t.Errorf("monitor %s %s: %d %s", c.method, c.path, r.Code, r.Body)
		}
	}

	resp = h.do(t, "DELETE", "/v1/bootstrap-tokens/"+created.ID, h.Admin, nil)
	if resp.Code != http.StatusOK || !strings.Contains(string(resp.Body), `"id":"`+created.ID+`"`) {
		t.Fatalf("delete: %d %s", resp.Code, resp.Body)
	}
	for _, id := range []string{created.ID, "BAD", "abc.de"} {
		if r := h.do(t, "DELETE", "/v1/bootstrap-tokens/"+id, h.Admin, nil); r.Code != http.StatusNotFound {
			t.Errorf("delete %q: %d %s", id, r.Code, r.Body)
		}
	}
	if strings.Contains(h.Logs.String(), created.Token) {
		t.Error("a bootstrap token was logged")
	}
}

func TestBootstrapTokenBadInput(t *testing.T) {
	h := newTestHub(t, Options{})
	for _, c := range []struct{ body, field string }{
		{`{"ttl":"soon"}`, "ttl"},
		{`{"ttl":"-1h"}`, "ttl"},
		{`{"ttl":"10ms"}`, "ttl"},
		{`{"uses":-1}`, "uses"},
		{`{"labels":{"fleet/arch":"arm64"}}`, "labels"},
		{`{"labels":{"site":"no spaces"}}`, "labels[site]"},
	} {
		r := h.do(t, "POST", "/v1/bootstrap-tokens", h.Admin, []byte(c.body))
		st := r.status(t)
		if r.Code != http.StatusBadRequest || len(st.Details) == 0 || st.Details[0].Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, r.Code, r.Body, c.field)
		}
	}
	for _, body := range []string{`{"colour":"red"}`, `{{`, `{} {}`} {
		if r := h.do(t, "POST", "/v1/bootstrap-tokens", h.Admin, []byte(body)); r.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, r.Code, r.Body)
		}
	}
	// ttl 0: never expires.
	r := h.do(t, "POST", "/v1/bootstrap-tokens", h.Admin, []byte(`{"ttl":"0"}`))
	var bt schema.BootstrapToken
	if err := json.Unmarshal(r.Body, &bt); err != nil || r.Code != http.StatusCreated || bt.Expires != nil {
		t.Errorf("ttl 0: %d %s", r.Code, r.Body)
	}
}
