package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func (h *testHub) audit(t *testing.T, query string) []schema.AuditEntry {
	t.Helper()
	r := h.admin(t, "GET", "/v1/audit"+query, "")
	var l schema.AuditList
	if err := json.Unmarshal(r.Body, &l); r.Code != http.StatusOK || err != nil || l.Kind != "AuditList" {
		t.Fatalf("GET /v1/audit%s: %d %s (%v)", query, r.Code, r.Body, err)
	}
	return l.Items
}

// line is an entry in a few words, for comparisons.
func line(e schema.AuditEntry) string {
	return strings.Join([]string{e.Actor, e.Role, e.Action, e.Object, e.Result}, " ")
}

// fakeClock is the throttle's clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAuditTrail: writes, credential and token changes, token uses and
// failed authentications are recorded once each (uses and failures
// aggregated: the first of a minute per actor, address, action and result
// at once, the rest counted when the minute ends), with actor, role,
// source and result, never a token; each is also a log line.
func TestAuditTrail(t *testing.T) {
	h := newTestHub(t, Options{})
	clock := &fakeClock{t: time.Now()}
	h.API.agg.Now = clock.now

	secrets := auditSteps(t, h)
	if len(secrets) != 3 {
		t.Fatalf("want 3 tokens issued, got %d", len(secrets))
	}
	got := h.audit(t, "")
	var lines []string
	for _, e := range got {
		lines = append(lines, line(e))
		if e.Source != "127.0.0.1" || e.Time.IsZero() || e.Seq == 0 {
			t.Errorf("entry without source, time or seq: %+v", e)
		}
	}
	want := []string{
		"admin admin apply devices/pi,configmaps/gw ok",
		"admin admin apply devices/pi ok",
		"admin admin create devices/pi2 ok",
		"admin admin issue-token devices/pi ok",
		"admin admin create credentials/ci ok",
		"admin admin create bootstrap-tokens/", // its id follows
		"admin admin delete devices/pi2 ok",
		"admin admin delete credentials/ci ok",
		"admin admin update devices/nope 404",
		"grafana monitor apply  403",
		"grafana monitor use-token  ok",
		"grafana monitor list secrets 403",
		"anonymous  list devices 401",
		// The admin's own GET /v1/audit, recorded before it was served.
		"admin admin use-token  ok",
		// The counts so far, written before the trail is read.
		"grafana monitor use-token  ok",
		"anonymous  list devices 401",
	}
	if len(lines) != len(want) {
		t.Fatalf("audit trail:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("entry %d: %q, want %q", i, lines[i], want[i])
		}
	}
	if d := got[0].Detail; d != "devices/pi created, configmaps/gw created" {
		t.Errorf("first apply's detail: %q", d)
	}
	if d := got[1].Detail; d != "nothing changed" {
		t.Errorf("second apply's detail: %q", d)
	}
	if got[12].Detail != "missing bearer token" {
		t.Errorf("401 detail: %q", got[12].Detail)
	}

	for i, c := range []int{8: 1, 9: 1, 10: 1, 11: 1, 12: 1, 13: 1, 14: 2, 15: 2} {
		if got[i].Count != c {
			t.Errorf("entry %d (%s): count %d, want %d", i, lines[i], got[i].Count, c)
		}
	}

	if got[15].Until.IsZero() || got[15].Detail != "wrong bearer token" {
		t.Errorf("the count of 401s: %+v", got[15])
	}

	// A minute later each is recorded at once again.
	clock.add(AuditThrottle)
	h.do(t, "GET", "/v1/devices", "", nil)
	h.do(t, "GET", "/v1/devices", h.Monitor, nil)
	got = h.audit(t, "?limit=3") // the last: this read's use of the admin token
	if len(got) != 3 || line(got[0]) != "anonymous  list devices 401" || got[0].Count != 1 ||
		line(got[1]) != "grafana monitor use-token  ok" || got[1].Count != 1 || line(got[2]) != "admin admin use-token  ok" {
		t.Fatalf("after a minute: %+v", got)
	}
	checkAuditFiltersAndSecrets(t, h, secrets, len(want))
}

// auditSteps makes TestAuditTrail's requests and returns the tokens they
// issued.
func auditSteps(t *testing.T, h *testHub) []string {
	t.Helper()
	steps := []struct {
		method, path, token, body string
		code                      int
	}{
		{"POST", "/v1/apply", h.Admin, deviceYAML("pi") + "---\n" + configMapYAML, 200},
		{"POST", "/v1/apply", h.Admin, deviceYAML("pi"), 200},
		{"POST", "/v1/devices", h.Admin, deviceYAML("pi2"), 201},
		{"POST", "/v1/devices/pi/token", h.Admin, "", 200},
		{"POST", "/v1/credentials", h.Admin, `{"name":"ci","role":"viewer"}`, 201},
		{"POST", "/v1/bootstrap-tokens", h.Admin, `{"labels":{"site":"a"}}`, 201},
		{"DELETE", "/v1/devices/pi2", h.Admin, "", 200},
		{"DELETE", "/v1/credentials/ci", h.Admin, "", 200},
		{"PUT", "/v1/devices/nope", h.Admin, deviceYAML("nope"), 404},
		{"POST", "/v1/apply", h.Monitor, deviceYAML("x"), 403},
		{"GET", "/v1/devices", h.Monitor, "", 200},
		{"GET", "/v1/devices/pi", h.Monitor, "", 200}, // the same minute: no second use
		{"GET", "/v1/secrets", h.Monitor, "", 403},
		{"GET", "/v1/devices", "", "", 401},
		{"GET", "/v1/devices", strings.Repeat("x", 43), "", 401}, // the same minute and address
		{"GET", "/v1/devices", strings.Repeat("y", 43), "", 401},
	}
	var secrets []string
	for _, s := range steps {
		var body []byte
		if s.body != "" {
			body = []byte(s.body)
		}
		r := h.do(t, s.method, s.path, s.token, body)
		if r.Code != s.code {
			t.Fatalf("%s %s: %d %s, want %d", s.method, s.path, r.Code, r.Body, s.code)
		}
		if tok := struct {
			Token string `json:"token"`
		}{}; json.Unmarshal(r.Body, &tok) == nil && tok.Token != "" {
			secrets = append(secrets, tok.Token)
		}
	}
	return secrets
}

// checkAuditFiltersAndSecrets: the trail of TestAuditTrail filters by
// actor and time, refuses bad parameters, and holds no token, in the
// store or the log, where every entry is a line.
func checkAuditFiltersAndSecrets(t *testing.T, h *testHub, secrets []string, entries int) {
	t.Helper()
	// Filters.
	if got := h.audit(t, "?actor=grafana"); len(got) != 5 {
		t.Errorf("actor=grafana: %d entries, want 5: %+v", len(got), got)
	}
	if got := h.audit(t, "?since=1h&actor=anonymous&limit=0"); len(got) != 3 {
		t.Errorf("since=1h actor=anonymous: %+v", got)
	}
	if got := h.audit(t, "?since="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("since the future: %+v", got)
	}
	for _, q := range []string{"?since=yesterday", "?limit=-1", "?limit=x"} {
		if r := h.admin(t, "GET", "/v1/audit"+q, ""); r.Code != http.StatusBadRequest {
			t.Errorf("GET /v1/audit%s: %d %s", q, r.Code, r.Body)
		}
	}

	// Never a token, in the store or the log; every entry is a log line.
	all, err := json.Marshal(h.audit(t, "?limit=0"))
	if err != nil {
		t.Fatal(err)
	}
	logs := h.Logs.String()
	for _, tok := range append(secrets, h.Admin, h.Monitor) {
		if strings.Contains(string(all), tok) || strings.Contains(logs, tok) {
			t.Errorf("a token is in the audit trail or the log")
		}
	}
	if n := strings.Count(logs, "msg=audit "); n < entries {
		t.Errorf("%d audit log lines, want at least %d", n, entries)
	}
	if !strings.Contains(logs, `msg=audit seq=4 actor=admin role=admin source=127.0.0.1 action=issue-token object=devices/pi result=ok`) {
		t.Errorf("no structured audit line for the token issue in\n%s", logs)
	}
}

// TestAuditRequestHook: a handler that records its request itself
// (hub/remote: exec, logs) gets no second entry.
func TestAuditRequestHook(t *testing.T) {
	h := newTestHub(t, Options{})
	h.API.Handle("/v1/devices/{device}/pods/{pod}/exec", methods{http.MethodPost: func(w http.ResponseWriter, r *http.Request) {
		AuditRequest(r.Context(), schema.AuditEntry{Action: "exec", Object: "devices/pi/pods/web", Detail: `"ls" started`})
		AuditRequest(r.Context(), schema.AuditEntry{Action: "exec-ended", Object: "devices/pi/pods/web", Detail: "exit 0"})
		w.WriteHeader(http.StatusOK)
	}})
	if r := h.admin(t, "POST", "/v1/devices/pi/pods/web/exec", ""); r.Code != http.StatusOK {
		t.Fatalf("exec: %d", r.Code)
	}
	got := h.audit(t, "?actor=admin")
	if len(got) != 3 || line(got[0]) != "admin admin exec devices/pi/pods/web ok" || line(got[1]) != "admin admin exec-ended devices/pi/pods/web ok" {
		t.Fatalf("exec entries: %+v", got)
	}
	if AuditRequest(t.Context(), schema.AuditEntry{Action: "x"}) {
		t.Error("AuditRequest recorded outside a request")
	}
}

// TestAuditSurvivesReopen: the trail is in the store.
func TestAuditSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHubOn(t, st, Options{})
	if r := h.admin(t, "POST", "/v1/apply", deviceYAML("pi")); r.Code != http.StatusOK {
		t.Fatal(r.Code)
	}
	h.API.StopStreams()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Audit(t.Context(), store.AuditQuery{})
	if err != nil || len(got) != 1 || line(got[0]) != "admin admin apply devices/pi ok" || got[0].Detail != "devices/pi created" {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
}

func TestAppliedObjects(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"deployments/web"}, "deployments/web"},
		{[]string{"secrets/db", "configmaps/gw", "deployments/web"}, "secrets/db,configmaps/gw,deployments/web"},
		{[]string{"a/1", "a/2", "a/3", "a/4", "a/5"}, "a/1,a/2,a/3 (+2 more)"},
	} {
		if got := appliedObjects(c.names); got != c.want {
			t.Errorf("appliedObjects(%v) = %q, want %q", c.names, got, c.want)
		}
	}
}

// TestAuditRefusalsCannotFlush: a flood of refused requests (a monitor
// applying, bad tokens) adds a handful of entries however long it is,
// every refusal is counted once they are flushed, and the admin's entries
// before it stay in place.
func TestAuditRefusalsCannotFlush(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, "POST", "/v1/apply", deviceYAML("pi")); r.Code != http.StatusOK {
		t.Fatal(r.Code)
	}
	before := h.audit(t, "?limit=0")
	const n = 300
	for i := range n {
		h.do(t, "POST", "/v1/apply", h.Monitor, []byte(deviceYAML("x")))
		h.do(t, "GET", "/v1/devices", strings.Repeat("z", 40+i%3), nil)
	}
	h.API.FlushAudit(t.Context(), true)
	after := h.audit(t, "?limit=0")
	if len(after) > len(before)+10 {
		t.Fatalf("%d refusals added %d entries", 2*n, len(after)-len(before))
	}
	for i, e := range before {
		if after[i] != e {
			t.Fatalf("entry %d changed: %+v, was %+v", i, after[i], e)
		}
	}
	counts := map[string]int{}
	for _, e := range after[len(before):] {
		counts[e.Actor+" "+e.Result] += e.Count
	}
	// The bad tokens: 401 until the auth limiter throttles the address,
	// then 429.
	if counts["grafana 403"] != n || counts["anonymous 401"]+counts["anonymous 429"] != n {
		t.Fatalf("counted: %v, want %d each", counts, n)
	}
}

// TestAuditVerifyRoute: POST /v1/audit/verify answers the chain's state,
// is admin only, and is itself recorded.
func TestAuditVerifyRoute(t *testing.T) {
	h := newTestHub(t, Options{})
	h.admin(t, "POST", "/v1/apply", deviceYAML("pi"))
	r := h.admin(t, "POST", "/v1/audit/verify", "")
	var v schema.AuditVerification
	if err := json.Unmarshal(r.Body, &v); err != nil || r.Code != http.StatusOK || !v.OK || v.Kind != "AuditVerification" || v.Entries < 1 || len(v.Head) != 64 {
		t.Fatalf("verify: %d %s", r.Code, r.Body)
	}
	if r := h.do(t, "POST", "/v1/audit/verify", h.Monitor, nil); r.Code != http.StatusForbidden {
		t.Errorf("monitor verify: %d", r.Code)
	}
	if r := h.do(t, "GET", "/v1/audit/verify", h.Admin, nil); r.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET verify: %d", r.Code)
	}
	var found bool
	for _, e := range h.audit(t, "?actor=admin") {
		if line(e) == "admin admin verify audit ok" && strings.HasPrefix(e.Detail, "chain intact: ") {
			found = true
		}
	}
	if !found {
		t.Errorf("the verification is not in the trail: %+v", h.audit(t, "?actor=admin"))
	}
}
