package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/schema"
)

// The OpenAPI description (hub/api/openapi.yaml) against the routes a
// real hub registers. Its schemas against the Go types: hub/openapi.

const openAPISource = "hub/api/openapi-paths.yaml"

// catchAll are registered patterns that are no route of their own.
var catchAll = map[string]string{"/": "the API's 404 answer for every unknown path"}

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPIYAML())
	if err != nil {
		t.Fatalf("load the OpenAPI description: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI description does not validate: %v", err)
	}
	return doc
}

// describedOp is one operation of the description.
type describedOp struct {
	path, method string
	op           *openapi3.Operation
}

// describedRoutes maps each route (ServeMux pattern) to the operations
// described for it, by method.
func describedRoutes(doc *openapi3.T) map[string]map[string][]describedOp {
	out := map[string]map[string][]describedOp{}
	for path, item := range doc.Paths.Map() {
		route := path
		if r, ok := item.Extensions["x-fleet-route"].(string); ok {
			route = r
		}
		for method, op := range item.Operations() {
			if out[route] == nil {
				out[route] = map[string][]describedOp{}
			}
			out[route][method] = append(out[route][method], describedOp{path, method, op})
		}
	}
	return out
}

func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	h := startHub(t, Options{})
	doc := loadOpenAPI(t)
	described := describedRoutes(doc)
	registered := map[string]map[string]bool{}
	for _, r := range h.API().Routes() {
		if why, ok := catchAll[r.Pattern]; ok {
			t.Logf("%s is not described: %s", r.Pattern, why)
			continue
		}
		if r.Methods == nil {
			t.Errorf("route %s takes any method: register it with api.Methods so that its methods can be described", r.Pattern)
			continue
		}
		registered[r.Pattern] = map[string]bool{}
		for _, m := range r.Methods {
			registered[r.Pattern][m] = true
			ops := described[r.Pattern][m]
			if len(ops) == 0 {
				hint := ""
				if strings.Contains(r.Pattern, "{") {
					hint = fmt.Sprintf(" (or paths for its values, each with x-fleet-route: %q)", r.Pattern)
				}
				t.Errorf("route %s %s is registered but not described: add paths.%q.%s%s to %s, then run go generate ./hub/api/",
					m, r.Pattern, r.Pattern, strings.ToLower(m), hint, openAPISource)
			}
			for _, d := range ops {
				public := d.op.Security != nil && len(*d.op.Security) == 0
				if public != r.Public {
					t.Errorf("%s %s: registered public=%t, described with security %v (public routes say security: [])", m, d.path, r.Public, d.op.Security)
				}
			}
		}
	}
	for route, byMethod := range described {
		for m, ops := range byMethod {
			if !registered[route][m] {
				for _, d := range ops {
					t.Errorf("paths.%q.%s is described in %s but the hub registers no %s %s: remove it, or register the route", d.path, strings.ToLower(m), openAPISource, m, route)
				}
			}
		}
	}
	// /v1/{kind} is described kind by kind: each stored kind has its paths.
	for _, k := range schema.StoredKinds() {
		for _, p := range []struct{ path, route string }{
			{"/v1/" + k.Resource, "/v1/{kind}"}, {"/v1/" + k.Resource + "/{name}", "/v1/{kind}/{name}"},
		} {
			item := doc.Paths.Value(p.path)
			if item == nil {
				t.Errorf("kind %s is served at %s but paths.%q is not described in %s", k.Kind, p.path, p.path, openAPISource)
				continue
			}
			if got, _ := item.Extensions["x-fleet-route"].(string); got != p.route {
				t.Errorf("paths.%q: x-fleet-route %q, want %q", p.path, got, p.route)
			}
		}
	}
	if len(registered) < 30 {
		t.Errorf("the hub registers %d routes: Routes is broken", len(registered))
	}
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// TestOpenAPIRolesMatchTheHub asks the hub every described operation as
// a viewer and as a monitor: it refuses (403) exactly the roles the
// operation's x-fleet-roles leaves out.
func TestOpenAPIRolesMatchTheHub(t *testing.T) {
	h := startHub(t, Options{})
	doc := loadOpenAPI(t)
	tokens := map[string]string{}
	for _, role := range []string{"viewer", "monitor"} {
		code, body := h.do(t, h.token, "POST", "/v1/credentials", fmt.Sprintf(`{"name":"openapi-%s","role":%q}`, role, role))
		if code != http.StatusCreated {
			t.Fatalf("create %s credential: %d %s", role, code, body)
		}
		tokens[role] = jsonField(t, body, "token")
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			roles, _ := op.Extensions["x-fleet-roles"].([]any)
			if slices.Contains(roles, any("anyone")) {
				continue
			}
			if method != http.MethodGet && !slices.Equal(roles, []any{"admin"}) {
				t.Errorf("%s %s: x-fleet-roles %v, but only an admin may do anything but GET", method, path, roles)
			}
			url := pathParam.ReplaceAllString(path, "openapi-probe")
			for role, token := range tokens {
				code := statusOf(t, h.Info().URL, method, url, token)
				allowed := slices.Contains(roles, any(role))
				switch {
				case allowed && (code == http.StatusForbidden || code == http.StatusUnauthorized):
					t.Errorf("%s %s as %s: %d, but x-fleet-roles %v allows it", method, url, role, code, roles)
				case !allowed && code != http.StatusForbidden:
					t.Errorf("%s %s as %s: %d, but x-fleet-roles %v leaves %s out (want 403)", method, url, role, code, roles, role)
				}
			}
		}
	}
}

// statusOf makes a request and returns its status code, without reading
// the body (streams stay open).
func statusOf(t *testing.T, base, method, path, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// jsonField returns the string field name of the JSON object b.
func jsonField(t *testing.T, b []byte, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	s, _ := m[name].(string)
	return s
}

// TestOpenAPIAnswersValidate makes real requests of a real hub and
// checks each request and answer against the description
// (kin-openapi's openapi3filter): objects of every kind, lists, the
// hub's info, events, credentials, bootstrap tokens, the audit trail,
// the dashboard's data and the error Status.
func TestOpenAPIAnswersValidate(t *testing.T) {
	// A history sample a second: the charts' answers have rows to check.
	h := startHub(t, Options{HistoryInterval: time.Second})
	doc := loadOpenAPI(t)
	doc.Servers = openapi3.Servers{{URL: h.Info().URL}}
	strictObjects(doc)
	router, err := legacyrouter.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	const (
		deployment = `{"apiVersion":"fleet/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":"web"}},` +
			`"spec":{"selector":{"matchLabels":{"site":"lab"}},"template":{"spec":{"containers":[{"name":"app","image":"nginx:1.27","ports":[{"containerPort":80}]}]}}}}`
		device    = `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-1","labels":{"site":"lab"}}}`
		configMap = `{"apiVersion":"fleet/v1","kind":"ConfigMap","metadata":{"name":"conf"},"data":{"a.ini":"x=1"}}`
		secret    = `{"apiVersion":"fleet/v1","kind":"Secret","metadata":{"name":"pw"},"stringData":{"token":"s3cr3t"}}`
	)
	steps := []struct {
		method, path, ctype, body string
		want                      int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/v1/info", "", "", 200},
		{"GET", "/v1/hubs", "", "", 200},
		{"POST", "/v1/devices", "application/json", device, 201},
		{"POST", "/v1/apply", "application/json", deployment, 200},
		{"POST", "/v1/configmaps", "application/json", configMap, 201},
		{"POST", "/v1/configmaps", "application/yaml", "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: conf2}\ndata: {k: v}\n", 201},
		{"POST", "/v1/apply", "application/yaml", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi-2}\n---\napiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi-3}\n", 200},
		{"POST", "/v1/secrets?dryRun=server", "application/json", secret, 201},
		{"POST", "/v1/secrets", "application/json", secret, 201},
		{"GET", "/v1/devices", "", "", 200},
		{"GET", "/v1/devices?labelSelector=site%3Dlab", "", "", 200},
		{"GET", "/v1/devices/pi-1", "", "", 200},
		{"GET", "/v1/deployments", "", "", 200},
		{"GET", "/v1/deployments/web", "", "", 200},
		{"GET", "/v1/configmaps/conf", "", "", 200},
		{"GET", "/v1/secrets", "", "", 200},
		{"GET", "/v1/secrets/pw", "", "", 200},
		{"PUT", "/v1/configmaps/conf", "application/json", configMap, 200},
		{"GET", "/v1/deployments/web/status", "", "", 200},
		{"GET", "/v1/deployments/web/revisions", "", "", 200},
		{"GET", "/v1/deployments/web/revisions/1", "", "", 200},
		{"POST", "/v1/devices/pi-1/token", "", "", 200},
		{"POST", "/v1/devices/pi-1/rekey", "", "", 200},
		{"GET", "/v1/devices/pi-1/events", "", "", 200},
		{"GET", "/v1/events?type=Warning&limit=10", "", "", 200},
		{"GET", "/v1/top", "", "", 200},
		{"GET", "/v1/devices/pi-1/crashreports", "", "", 200},
		{"POST", "/v1/credentials", "application/json", `{"name":"grafana","role":"monitor"}`, 201},
		{"GET", "/v1/credentials", "", "", 200},
		{"DELETE", "/v1/credentials/grafana", "", "", 200},
		{"POST", "/v1/bootstrap-tokens", "application/json", `{"labels":{"site":"north"},"ttl":"1h","uses":3}`, 201},
		{"GET", "/v1/bootstrap-tokens", "", "", 200},
		{"GET", "/v1/audit?since=1h&limit=50", "", "", 200},
		{"POST", "/v1/audit/verify", "", "", 200},
		{"GET", "/v1/dashboard/session", "", "", 200},
		{"GET", "/v1/dashboard/summary", "", "", 200},
		{"GET", "/v1/dashboard/devices?sort=-name&limit=10", "", "", 200},
		{"GET", "/v1/mosquitto/acl", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"GET", "/v1/openapi.json", "", "", 200},
		{"GET", "/v1/openapi.yaml", "", "", 200},
		// Errors are Status answers as described.
		{"GET", "/v1/devices/nobody", "", "", 404},
		{"POST", "/v1/devices", "application/json", device, 409},
		{"POST", "/v1/deployments", "application/json", `{"apiVersion":"fleet/v1","kind":"Deployment","metadata":{"name":"bad"},"spec":{}}`, 400},
		{"GET", "/v1/events?limit=-1", "", "", 400},
		{"GET", "/v1/dashboard/devices?state=sleepy", "", "", 400},
		{"GET", "/v1/dashboard/history/devices/nobody", "", "", 404},
		{"GET", "/v1/dashboard/history/deployments/nothing", "", "", 404},
	}
	// The description refuses these requests, as the hub does.
	refused := map[string]bool{"/v1/events?limit=-1": true, "/v1/dashboard/devices?state=sleepy": true}
	for _, s := range steps {
		t.Run(s.method+" "+s.path, func(t *testing.T) {
			validateExchange(t, router, h, s.method, s.path, s.ctype, s.body, s.want, refused[s.path])
		})
	}

	// pi-1 reports over MQTT as an agent does: the answers that carry
	// what devices report (status, events, crash reports) validate too.
	reportAsDevice(t, h, "pi-1")
	awaitDeviceHistory(t, h, "pi-1")
	for _, path := range []string{
		"/v1/devices", "/v1/devices/pi-1", "/v1/devices/pi-1/events", "/v1/events",
		"/v1/devices/pi-1/crashreports", "/v1/dashboard/devices?pod=web", "/v1/dashboard/summary",
		"/v1/deployments/web", "/v1/deployments/web/status",
		"/v1/dashboard/history/online", "/v1/dashboard/history/devices/pi-1", "/v1/dashboard/history/deployments/web",
	} {
		t.Run("reported GET "+path, func(t *testing.T) {
			validateExchange(t, router, h, "GET", path, "", "", 200, false)
		})
	}
	t.Run("401 without a token", func(t *testing.T) {
		validateExchangeAs(t, router, h, "", "GET", "/v1/devices", "", "", 401, false)
	})
	t.Run("403 for a monitor", func(t *testing.T) {
		code, body := h.do(t, h.token, "POST", "/v1/credentials", `{"name":"openapi-mon","role":"monitor"}`)
		if code != http.StatusCreated {
			t.Fatalf("create a monitor: %d %s", code, body)
		}
		mon := jsonField(t, body, "token")
		validateExchangeAs(t, router, h, mon, "GET", "/v1/secrets", "", "", 403, false)
		validateExchangeAs(t, router, h, mon, "GET", "/v1/deployments/web", "", "", 200, false) // without its pod template
	})
	t.Run("watch lines", func(t *testing.T) { validateWatch(t, doc, h, "devices", "Device") })
	t.Run("DELETE with a stale resourceVersion", func(t *testing.T) {
		validateExchange(t, router, h, "DELETE", "/v1/deployments/web?resourceVersion=1", "", "", 409, false)
	})
	t.Run("DELETE", func(t *testing.T) {
		validateExchange(t, router, h, "DELETE", "/v1/deployments/web", "", "", 200, false)
	})
}

// reportAsDevice connects to the hub's broker as the device with a new
// token and publishes what an agent does: online, a status with a
// running pod, a crash report and its event. It returns once the API
// shows them.
func reportAsDevice(t *testing.T, h *testHub, device string) {
	t.Helper()
	code, body := h.do(t, h.token, "POST", "/v1/devices/"+device+"/token", "")
	if code != http.StatusOK {
		t.Fatalf("issue a token: %d %s", code, body)
	}
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + h.Info().MQTTAddr).SetClientID(device).
		SetUsername(device).SetPassword(jsonField(t, body, "token")).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect as %s: %v", device, tok.Error())
	}
	defer c.Disconnect(0)
	now := time.Now().UTC()
	exit := int32(137)
	status := schema.DeviceStatus{Device: device, ObservedGeneration: 1, Time: now,
		Agent: schema.AgentInfo{Version: "v1", OS: "linux", Arch: "arm64"},
		// Memory but no disk: the charts' history has a null to describe.
		Node: &schema.NodeInfo{Hostname: device, MemoryTotalBytes: 1 << 30, MemoryAvailBytes: 1 << 29},
		Pods: []schema.PodStatus{{Name: "web", Hash: "0123456789abcdef", Phase: schema.PhaseRunning, Ready: true,
			Containers: []schema.ContainerStatus{{Name: "app", Image: "nginx:1.27", State: "running", Restarts: 1, StartedAt: &now}}}}}
	crash := schema.CrashReport{Device: device, Pod: "web", Container: "app", Time: now, Reason: "Exited", ExitCode: &exit, LogTail: "bye\n"}
	event := schema.Event{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Event"}, ID: "ev-1", Device: device,
		Time: now, Type: schema.EventWarning, Reason: "Exited", Pod: "web", Container: "app", ExitCode: &exit, CrashReport: true}
	prefix := "fleet/v1/devices/" + device + "/"
	for _, m := range []struct {
		topic   string
		retain  bool
		payload any
	}{{"online", true, "online"}, {"status", true, status}, {"crashreports", false, crash}, {"events", false, event}} {
		var b []byte
		if s, ok := m.payload.(string); ok {
			b = []byte(s)
		} else if b, _ = json.Marshal(m.payload); b == nil {
			t.Fatalf("encode %s", m.topic)
		}
		if tok := c.Publish(prefix+m.topic, 1, m.retain, b); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", m.topic, tok.Error())
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, dev := h.do(t, h.token, "GET", "/v1/devices/"+device, "")
		_, evs := h.do(t, h.token, "GET", "/v1/devices/"+device+"/events", "")
		_, crashes := h.do(t, h.token, "GET", "/v1/devices/"+device+"/crashreports", "")
		if strings.Contains(string(dev), `"online":true`) && strings.Contains(string(dev), `"pods":[`) &&
			strings.Contains(string(evs), `"ev-1"`) && strings.Contains(string(crashes), `"logTail"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not show what %s reported:\n%s\n%s\n%s", device, dev, evs, crashes)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// validateWatch opens a watch of resource and checks its first line, an
// ADDED event, against WatchEvent, and the object it carries against
// the kind's schema.
func validateWatch(t *testing.T, doc *openapi3.T, h *testHub, resource, kind string) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", h.Info().URL+"/v1/"+resource+"?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatalf("read a watch line: %v", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatalf("decode %s: %v", line, err)
	}
	if err := doc.Components.Schemas["WatchEvent"].Value.VisitJSON(ev); err != nil {
		t.Errorf("a watch line does not match WatchEvent: %v\n%s", err, line)
	}
	if ev["type"] != "ADDED" {
		t.Fatalf("first watch event %v, want ADDED", ev["type"])
	}
	if err := doc.Components.Schemas[kind].Value.VisitJSON(ev["object"]); err != nil {
		t.Errorf("a watch event's object does not match %s: %v\n%s", kind, err, line)
	}
}

// strictObjects makes every component schema with properties refuse
// others, so an answer that carries a field the description lacks fails
// (the description itself leaves objects open, for clients to tolerate
// fields a newer hub adds).
func strictObjects(doc *openapi3.T) {
	no := false
	for _, ref := range doc.Components.Schemas {
		if s := ref.Value; s != nil && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = &no
		}
	}
}

// validateExchange makes one request and checks it, and its answer,
// against the description.
func validateExchange(t *testing.T, router routers.Router, h *testHub, method, path, ctype, body string, want int, badQuery bool) {
	t.Helper()
	validateExchangeAs(t, router, h, h.token, method, path, ctype, body, want, badQuery)
}

// validateExchangeAs is validateExchange with the bearer token token
// ("" for none).
func validateExchangeAs(t *testing.T, router routers.Router, h *testHub, token, method, path, ctype, body string, want int, badQuery bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, h.Info().URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("no described route for %s %s: %v", method, path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	err = openapi3filter.ValidateRequest(t.Context(), in)
	switch {
	case err != nil && !badQuery:
		t.Fatalf("the request does not match the description: %v", err)
	case err == nil && badQuery:
		t.Fatal("the description admits a request the hub refuses")
	}
	// ValidateRequest read the body: send it again.
	req.Body = io.NopCloser(strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, got)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
		t.Errorf("the answer does not match the description: %v\nanswer: %.2000s", err, got)
	}
}

// awaitDeviceHistory waits until the charts' history holds a sample of
// what the device reported.
func awaitDeviceHistory(t *testing.T, h *testHub, device string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := h.do(t, h.token, "GET", "/v1/dashboard/history/devices/"+device, "")
		var d struct {
			Time []float64 `json:"time"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &d) == nil && len(d.Time) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no history sample of %s within 15 s: %d %s", device, code, body)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}
