package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// newTokenEnv is newEnv on the hub's real API and store (the fake hub
// has no bootstrap tokens). Test code only: the CLI binary links neither.
func newTokenEnv(t *testing.T) (*env, *store.Store) {
	t.Helper()
	e := newEnv(t)
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := st.PutCredential(t.Context(), store.AdminCredential, store.RoleAdmin, strings.Repeat(adminToken, 4)); err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	e.vars["FLEET_HUB"], e.vars["FLEET_TOKEN"] = ts.URL, strings.Repeat(adminToken, 4)
	return e, st
}

func TestTokenCreate(t *testing.T) {
	e, st := newTokenEnv(t)
	out := e.ok("", "token", "create", "--label", "site=north", "--label", "room=a,floor=2", "--ttl", "24h", "--uses", "100", "--description", "north Pis")
	m := regexp.MustCompile(`Token \(shown once, store it safely\): ([a-z0-9]{6})\.[a-z0-9]{32}\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no token in:\n%s", out)
	}
	for _, want := range []string{
		"bootstrap-token/" + m[1] + " created: 100 uses, expires ",
		"(in 24h), labels floor=2,room=a,site=north\n",
		"--bootstrap-token-file /etc/fleet/bootstrap-token --name-from hostname",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("create output lacks %q:\n%s", want, out)
		}
	}
	list, err := st.BootstrapTokens(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != m[1] || list[0].Uses != 100 || list[0].Labels["floor"] != "2" || list[0].Description != "north Pis" {
		t.Fatalf("stored: %+v %v", list, err)
	}

	// -o json: the token object and nothing else.
	r := e.run("", "token", "create", "--ttl", "0", "-o", "json")
	var bt schema.BootstrapToken
	if err := json.Unmarshal([]byte(r.stdout), &bt); err != nil || r.code != 0 || r.stderr != "" || bt.Token == "" || bt.Expires != nil || bt.Uses != 0 {
		t.Fatalf("-o json: %+v %v", r, err)
	}

	for _, args := range [][]string{
		{"token", "create", "--ttl", "soon"},
		{"token", "create", "--ttl", "-1h"},
		{"token", "create", "--uses", "-2"},
		{"token", "create", "--label", "fleet/arch=arm64"},
		{"token", "create", "--label", "site-"},
		{"token", "create", "extra"},
		{"token", "create", "-o", "table"},
	} {
		if r := e.run("", args...); r.code == 0 || r.stdout != "" {
			t.Errorf("fleet %s: %+v", strings.Join(args, " "), r)
		}
	}
}

func TestTokenListAndDelete(t *testing.T) {
	e, st := newTokenEnv(t)
	if r := e.run("", "token", "list"); r.code != 0 || r.stdout != "" || r.stderr != "No resources found.\n" {
		t.Fatalf("empty list: %+v", r)
	}
	if out := e.ok("", "token", "list", "-o", "json"); out != "{\n    \"items\": []\n}\n" {
		t.Fatalf("empty list -o json: %q", out)
	}
	tok, a, err := st.CreateBootstrapToken(t.Context(), store.BootstrapTokenSpec{Labels: map[string]string{"site": "north"}, TTL: time.Hour, Uses: 2, Description: "north"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Enroll(t.Context(), store.Enrollment{Token: tok, Device: "pi-1", RequestID: "req_0123456789abcdef", Secret: strings.Repeat("s", 32)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Enroll(t.Context(), store.Enrollment{Token: tok, Device: "pi-2", RequestID: "req_0123456789abcde0", Secret: strings.Repeat("s", 32)}); err != nil {
		t.Fatal(err)
	}
	_, b, err := st.CreateBootstrapToken(t.Context(), store.BootstrapTokenSpec{})
	if err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "token", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "STATUS") {
		t.Fatalf("list:\n%s", out)
	}
	for _, want := range []string{
		a.ID + " ", "UsedUp", "2/2", "site=north", "north",
		b.ID + " ", "Active", "0/unlimited", "never", "<none>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	// A 1 h TTL reads "in 60m", or "in 59m" once the clock has moved on.
	if !strings.Contains(out, "in 60m") && !strings.Contains(out, "in 59m") {
		t.Errorf("list lacks the expiry in 59m or 60m:\n%s", out)
	}
	if strings.Contains(out, tok) {
		t.Error("list shows a token")
	}
	if out := e.ok("", "token", "ls", "-o", "name"); !strings.Contains(out, "bootstrap-token/"+a.ID+"\n") {
		t.Errorf("-o name:\n%s", out)
	}

	if out := e.ok("", "token", "delete", a.ID); out != "bootstrap-token/"+a.ID+" deleted\n" {
		t.Fatalf("delete: %q", out)
	}
	r := e.run("", "token", "delete", a.ID, b.ID)
	if r.code == 0 || r.stdout != "bootstrap-token/"+b.ID+" deleted\n" || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("delete of a missing token: %+v", r)
	}
	if out := e.ok("", "token", "delete", a.ID, "--ignore-not-found"); out != "" {
		t.Fatalf("--ignore-not-found: %q", out)
	}
	// Pasting the whole token deletes by its ID and never echoes it.
	_, c, err := st.CreateBootstrapToken(t.Context(), store.BootstrapTokenSpec{})
	if err != nil {
		t.Fatal(err)
	}
	whole := c.ID + "." + strings.Repeat("z", 32)
	if r := e.run("", "token", "delete", whole); r.code != 0 || strings.Contains(r.stdout+r.stderr, whole) {
		t.Fatalf("delete by whole token: %+v", r)
	}
	if r := e.run("", "token", "delete", "NOT-AN-ID"); r.code == 0 {
		t.Fatalf("bad ID accepted: %+v", r)
	}
	// Devices enrolled with a deleted token keep their tokens.
	devs, _, err := st.ListDevices(t.Context(), nil)
	if err != nil || len(devs) != 2 {
		t.Fatalf("devices after deleting their token: %d %v", len(devs), err)
	}
}

// TestTokenCreateCAHash: a hub with its own CA returns its hash with each
// new token (-o json: caHash), and the printed agent and install.sh
// command lines pin it on the TLS broker.
func TestTokenCreateCAHash(t *testing.T) {
	e := newEnv(t)
	hash := "sha256:" + strings.Repeat("5a", 32)
	useRealAPI(t, e, hash, schema.HubInfo{MQTTURL: "ssl://0.0.0.0:8883", MQTTPlainURL: "tcp://127.0.0.1:1883", CAHash: hash})

	out := e.ok("", "token", "create")
	for _, want := range []string{
		"Hub CA hash: " + hash + "\n",
		"fleet-agent --broker ssl://127.0.0.1:8883 --ca-hash " + hash + " --bootstrap-token-file /etc/fleet/bootstrap-token",
		"install.sh --broker ssl://127.0.0.1:8883 --ca-hash " + hash + " --bootstrap-token-file FILE",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("create output lacks %q:\n%s", want, out)
		}
	}
	r := e.run("", "token", "create", "-o", "json")
	var bt schema.BootstrapToken
	if err := json.Unmarshal([]byte(r.stdout), &bt); err != nil || r.code != 0 || bt.CAHash != hash {
		t.Fatalf("-o json: %+v %v", r, err)
	}
	// Listing never shows it (nor the token).
	list := e.ok("", "token", "list", "-o", "json")
	if strings.Contains(list, hash) {
		t.Errorf("token list carries the CA hash:\n%s", list)
	}
}

// useRealAPI points e's CLI at the hub's real API over a store of its own
// (the admin token: adminToken four times, as a real one is long), whose
// /v1/info answers info, for the commands that print what a hub with CA
// hash hash tells them.
func useRealAPI(t *testing.T, e *env, hash string, info schema.HubInfo) {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := st.PutCredential(t.Context(), store.AdminCredential, store.RoleAdmin, strings.Repeat(adminToken, 4)); err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st, CAHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv)
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, http.StatusOK, info)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	e.vars["FLEET_HUB"], e.vars["FLEET_TOKEN"] = ts.URL, strings.Repeat(adminToken, 4)
}
