package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// privateApp is a Deployment, ConfigMap and Secret whose contents a
// monitor must never see.
const privateApp = `apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {site: lab}}
  template:
    spec:
      containers:
      - name: app
        image: registry.example/private-image:1
        command: [/private-command]
        env: [{name: API_URL, value: PRIVATE-ENV-VALUE}]
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: cfg}
data: {app.ini: PRIVATE-CONFIG}
---
apiVersion: fleet/v1
kind: Secret
metadata: {name: creds}
stringData: {password: PRIVATE-SECRET}
`

var privateStrings = []string{"private-image", "private-command", "PRIVATE-ENV-VALUE", "PRIVATE-CONFIG", "PRIVATE-SECRET"}

// doAs makes a request to the hub's API with a bearer token.
func doAs(t *testing.T, h *Hub, token, method, path string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestE2EPrivilege: against a real fleet-hub process, a monitor token
// gets 403 on specs, ConfigMaps, Secrets, credentials, bootstrap tokens,
// revisions, mosquitto files and the audit trail over HTTP, reads status
// and events with no spec in them, and over MQTT gets nothing on desired
// topics while it does get status; a viewer reads specs but writes
// nothing; and the audit trail records it all and survives a restart.
func TestE2EPrivilege(t *testing.T) {
	t.Parallel()
	sub := sysdeps.Require(t, "mosquitto_sub")
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", map[string]string{"site": "lab"})
	applyYAML(t, h, privateApp)
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))
	// The device's own desired state does carry the image: it is there
	// for a monitor to miss.
	dev.awaitDesired("pi", func(ds schema.DesiredState) bool {
		return len(ds.Pods) == 1 && strings.Contains(ds.Pods[0].Spec.Containers[0].Image, "private-image")
	})
	dev.mustPublish(topics.Device("pi", schema.TopicStatus), true, statusPayload("pi", 1, ""))
	mon := addMonitor(t, h, "grafana")

	t.Run("http", func(t *testing.T) {
		for _, path := range []string{
			"/v1/deployments/web/revisions", "/v1/deployments/web/revisions/1",
			"/v1/configmaps", "/v1/configmaps/cfg", "/v1/secrets", "/v1/secrets/creds",
			"/v1/credentials", "/v1/bootstrap-tokens", "/v1/mosquitto/passwd", "/v1/mosquitto/acl",
			"/v1/audit", "/v1/devices/pi/pods/web/log", "/v1/devices/pi/crashreports",
		} {
			code, body := doAs(t, h, mon, http.MethodGet, path, "")
			if code != http.StatusForbidden {
				t.Errorf("monitor GET %s: %d %.300s, want 403", path, code, body)
			}
		}
		for _, path := range []string{
			"/v1/devices", "/v1/devices/pi", "/v1/deployments", "/v1/deployments/web", "/v1/deployments/web/status",
			"/v1/events", "/v1/devices/pi/events", "/v1/info", "/metrics", "/v1/top",
			"/v1/dashboard/session", "/v1/dashboard/summary", "/v1/dashboard/devices",
		} {
			code, body := doAs(t, h, mon, http.MethodGet, path, "")
			if code != http.StatusOK {
				t.Errorf("monitor GET %s: %d %.300s, want 200", path, code, body)
			}
			for _, p := range privateStrings {
				if strings.Contains(body, p) {
					t.Errorf("monitor GET %s: the answer holds %q", path, p)
				}
			}
		}
		if code, _ := doAs(t, h, mon, http.MethodPost, "/v1/apply", deviceYAML("x", nil)); code != http.StatusForbidden {
			t.Errorf("monitor apply: %d", code)
		}

		var viewer schema.Credential
		body := mustDo(t, h, http.MethodPost, "/v1/credentials", []byte(`{"name":"ci","role":"viewer"}`), http.StatusCreated)
		if err := json.Unmarshal(body, &viewer); err != nil || viewer.Token == "" {
			t.Fatalf("create viewer: %v %s", err, body)
		}
		if code, body := doAs(t, h, viewer.Token, http.MethodGet, "/v1/deployments/web", ""); code != http.StatusOK || !strings.Contains(body, "private-image") {
			t.Errorf("viewer GET deployment: %d %.300s", code, body)
		}
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, "/v1/apply", deviceYAML("x", nil)},
			{http.MethodDelete, "/v1/devices/pi", ""},
			{http.MethodPost, "/v1/credentials", `{"name":"y","role":"admin"}`},
			{http.MethodGet, "/v1/audit", ""},
			{http.MethodGet, "/v1/mosquitto/passwd", ""},
		} {
			if code, body := doAs(t, h, viewer.Token, c.method, c.path, c.body); code != http.StatusForbidden {
				t.Errorf("viewer %s %s: %d %.300s, want 403", c.method, c.path, code, body)
			}
		}
	})

	t.Run("mqtt", func(t *testing.T) {
		u, err := url.Parse(h.MQTTURL)
		if err != nil {
			t.Fatal(err)
		}
		// Every filter that could reach the desired state, and the status
		// filter as the control: for 4 s, whatever arrives is printed.
		args := []string{"-h", u.Hostname(), "-p", u.Port(), "-u", "grafana", "-P", mon, "-v", "-W", "4",
			"-t", topics.Device("pi", schema.TopicDesired), "-t", topics.DeviceFilter(schema.TopicDesired),
			"-t", "fleet/v1/#", "-t", "#", "-t", topics.DeviceFilter(schema.TopicStatus)}
		out, _ := exec.CommandContext(t.Context(), sub, args...).CombinedOutput() // -W ends it with an error
		if !strings.Contains(string(out), topics.Device("pi", schema.TopicStatus)+" ") {
			t.Fatalf("mosquitto_sub as the monitor got no status (the control):\n%s", out)
		}
		if strings.Contains(string(out), "/desired") || strings.Contains(string(out), "private-image") {
			t.Errorf("mosquitto_sub as the monitor got a desired state:\n%s", out)
		}
	})

	t.Run("audit", func(t *testing.T) {
		check := func(when string) {
			t.Helper()
			var l schema.AuditList
			if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/audit?limit=0", nil, http.StatusOK), &l); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, e := range l.Items {
				lines = append(lines, strings.Join([]string{e.Actor, e.Role, e.Action, e.Object, e.Result}, " "))
				// Refusals are aggregated: an entry counting several names
				// their objects in its detail (hub/API.md, "Audit trail").
				if _, objs, ok := strings.Cut(e.Detail, "(objects: "); ok && e.Object == "" {
					for _, o := range strings.Split(strings.TrimSuffix(objs, ")"), ", ") {
						lines = append(lines, strings.Join([]string{e.Actor, e.Role, e.Action, o, e.Result}, " "))
					}
				}
			}
			all := strings.Join(lines, "\n")
			for _, want := range []string{
				"admin admin issue-token devices/pi ok", "admin admin apply deployments/web,configmaps/cfg,secrets/creds ok",
				"admin admin create credentials/grafana ok", "grafana monitor list secrets 403",
				"grafana monitor get credentials 403", "grafana monitor apply  403", "ci viewer apply  403",
			} {
				if !strings.Contains(all, want+"\n") && !strings.HasSuffix(all, want) {
					t.Errorf("%s: no %q in the audit trail:\n%s", when, want, all)
				}
			}
			raw, _ := json.Marshal(l)
			if strings.Contains(string(raw), mon) || strings.Contains(string(raw), tok) || strings.Contains(string(raw), h.Token) {
				t.Errorf("%s: a token is in the audit trail", when)
			}
		}
		check("before the restart")
		if !strings.Contains(h.Logs(), `"msg":"audit"`) && !strings.Contains(h.Logs(), "msg=audit") {
			t.Errorf("no audit line in the hub's log")
		}
		h.Restart()
		check("after the restart")
	})
}

// crashLogMark is what the crashing container of crashApp writes to its
// log; it is built by the shell, so it is in the log but not in the pod
// template.
const crashLogMark = "LOGTAIL-42-MARK"

// crashApp crashes at once, again and again, after writing crashLogMark
// (and with a command argument, an env value, a ConfigMap and a Secret a
// monitor must never see).
func crashApp(image string) string {
	return `apiVersion: fleet/v1
kind: Deployment
metadata: {name: crasher}
spec:
  selector: {matchLabels: {site: lab}}
  template:
    spec:
      containers:
      - name: app
        image: ` + image + `
        command: [/bin/sh, -c, 'X=PRIVATE-COMMAND-ARG; echo "starting"; echo "LOGTAIL-$((6*7))-MARK" >&2; sleep 1; exit 3']
        env: [{name: API_URL, value: PRIVATE-ENV-VALUE}]
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: cfg}
data: {app.ini: PRIVATE-CONFIG}
---
apiVersion: fleet/v1
kind: Secret
metadata: {name: creds}
stringData: {password: PRIVATE-SECRET}
`
}

// crashSecrets are what a monitor must never receive, over HTTP or MQTT:
// the crash log, the log field itself, and the pod template's command,
// env, ConfigMap and Secret values.
var crashSecrets = []string{crashLogMark, "logTail", "PRIVATE-COMMAND-ARG", "PRIVATE-ENV-VALUE", "PRIVATE-CONFIG", "PRIVATE-SECRET"}

// TestE2EPrivilegeCrashReports: a real agent on containerd whose container
// crashes, on the embedded broker and on Mosquitto. The crash's log tail
// reaches the hub on the device's crashreports topic only: a monitor's
// MQTT subscription to events gets the event with its crashReport
// pointer and no log, its subscription to crashreports is refused (and
// so is another device's), every API route answers each role as
// hub/API.md says with real handlers and real data, and no answer to a
// monitor holds a log tail, a command, an env value, a ConfigMap or a
// Secret value; a monitor does see the images that run, in the status.
// An admin's fleet logs --previous and describe pod still show the tail,
// and an older agent's event with a logTail is stripped by the hub for
// everyone while its crash report is kept.
func TestE2EPrivilegeCrashReports(t *testing.T) {
	for _, kind := range []string{BrokerEmbedded, BrokerMosquitto} {
		t.Run(kind, func(t *testing.T) {
			f := StartFleet(t, FleetOptions{Agents: 1, Broker: kind, Shell: true, Labels: func(int) map[string]string {
				return map[string]string{"site": "lab"}
			}})
			privilegeCrashReports(t, f)
		})
	}
}

// roleTokens are the API tokens of each role.
type roleTokens struct{ admin, viewer, monitor string }

func privilegeCrashReports(t *testing.T, f *Fleet) {
	h := f.Hub
	mon := addMonitor(t, h, "grafana")
	var viewer schema.Credential
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/credentials", []byte(`{"name":"ci","role":"viewer"}`), http.StatusCreated), &viewer); err != nil {
		t.Fatal(err)
	}
	otherTok := f.AddDevice(t, "old-1", nil) // an older agent, played by the test; also syncs Mosquitto's accounts
	// The ACL Mosquitto enforces (and the embedded broker's policy it is
	// rendered from): devices write their own crash reports, nobody but
	// the hub reads them.
	_, acl := h.Do(t, http.MethodGet, "/v1/mosquitto/acl", nil)
	if !strings.Contains(string(acl), "pattern write "+topics.Device("%u", schema.TopicCrashReports)+"\n") ||
		strings.Contains(string(acl), "read "+topics.DeviceFilter(schema.TopicCrashReports)) {
		t.Errorf("the Mosquitto ACL does not keep crash reports to devices (write) and the hub:\n%s", acl)
	}
	tok := roleTokens{admin: h.Token, viewer: viewer.Token, monitor: mon}

	// The monitor subscribes over plain MQTT, as Grafana would.
	mq := mustDialMQTT(t, f.BrokerURL, "grafana", mon, dialOpts{})
	for _, filter := range []string{topics.DeviceFilter(schema.TopicEvents), topics.DeviceFilter(schema.TopicStatus)} {
		if code := mq.subscribe(filter); code == 0x80 {
			t.Fatalf("monitor subscribe %s refused", filter)
		}
	}
	// The embedded broker refuses the subscription (SUBACK 0x80);
	// Mosquitto 2.0 grants it and delivers nothing its ACL file does not
	// let the user read, which the checks below see (against a control
	// that does get the crash report).
	refuse := func(who string, c *mqttClient, filter string) {
		t.Helper()
		if code := c.subscribe(filter); f.Mosquitto == nil && code != 0x80 {
			t.Errorf("%s subscribe %s: SUBACK %#x, want 0x80 (refused)", who, filter, code)
		}
	}
	for _, filter := range []string{topics.DeviceFilter(schema.TopicCrashReports), topics.Device("dev-1", schema.TopicCrashReports), "#"} {
		refuse("monitor", mq, filter)
	}
	// Another device may not read dev-1's crash reports either.
	od := mustDialMQTT(t, f.BrokerURL, "old-1", otherTok, dialOpts{})
	refuse("device old-1", od, topics.Device("dev-1", schema.TopicCrashReports))
	var control *mqttClient // on Mosquitto: an account with the hub's rights
	if user, pass := f.InjectorMQTTAccount(); user != "" {
		control = mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{})
		control.subscribe(topics.DeviceFilter(schema.TopicCrashReports))
	}

	f.Apply(t, crashApp(f.ShellImage))
	// The hub has the crash report (through the crashreports topic: the
	// agent puts no log on events).
	awaitf(t, e2eConverge, func() bool {
		code, body := doAs(t, h, tok.admin, http.MethodGet, "/v1/devices/dev-1/crashreports", "")
		return code == http.StatusOK && strings.Contains(body, crashLogMark)
	}, "dev-1's crash report at the hub")
	if control != nil {
		control.await("crash report with the log on the crashreports topic (the control)", func(m mqttMsg) bool {
			return m.Topic == topics.Device("dev-1", schema.TopicCrashReports) && strings.Contains(string(m.Payload), crashLogMark)
		})
	}
	// The monitor got the crash's event, pointing at the report; the
	// crash report went out before it, so by now it would have come too.
	awaitf(t, e2eConverge, func() bool { return monitorCrashEvent(mq.received()) }, "the crash's event with crashReport:true on the monitor's subscription")
	awaitf(t, mqttWait, func() bool {
		for _, m := range mq.received() {
			if m.Topic == topics.Device("dev-1", schema.TopicStatus) && strings.Contains(string(m.Payload), f.ShellImage) {
				return true
			}
		}
		return false
	}, "dev-1's status, with the image that runs, on the monitor's subscription")
	for _, m := range mq.received() {
		if strings.HasSuffix(m.Topic, "/"+schema.TopicCrashReports) || strings.HasSuffix(m.Topic, "/"+schema.TopicDesired) {
			t.Errorf("the monitor received a message on %s", m.Topic)
		}
		for _, s := range crashSecrets {
			if strings.Contains(string(m.Payload), s) {
				t.Errorf("the monitor received %q on %s: %.400s", s, m.Topic, m.Payload)
			}
		}
	}
	for _, m := range od.received() {
		t.Errorf("device old-1 received a message on %s", m.Topic)
	}

	privilegeRouteMatrix(t, f, tok)

	// An admin still reads the tail.
	if out := f.CLI(t, "logs", "dev-1/crasher", "--previous"); !strings.Contains(out, crashLogMark) {
		t.Errorf("fleet logs --previous:\n%s", out)
	}
	if out := f.CLI(t, "describe", "pod", "dev-1/crasher"); !strings.Contains(out, crashLogMark) || !strings.Contains(out, "exited 3") {
		t.Errorf("fleet describe pod shows no crash report:\n%s", out)
	}

	privilegeLegacyEvent(t, f, tok, od)
}

// monitorCrashEvent reports whether msgs hold an event about crasher's
// exit that points at its crash report.
func monitorCrashEvent(msgs []mqttMsg) bool {
	for _, m := range msgs {
		if m.Topic != topics.Device("dev-1", schema.TopicEvents) {
			continue
		}
		var ev schema.Event
		if json.Unmarshal(m.Payload, &ev) != nil {
			continue
		}
		for _, e := range append([]schema.Event{ev}, ev.More...) {
			if e.Pod == "crasher" && e.CrashReport && e.ExitCode != nil && *e.ExitCode == 3 {
				return true
			}
		}
	}
	return false
}

// privilegeRouteMatrix hits every route of the hub's API with each role
// (and none, and a wrong token) against the real handlers and data, and
// checks the codes hub/API.md gives and that no answer to a monitor holds
// a crashSecret. want is the code for admin, viewer and monitor; 0 means
// "not 401 or 403" (a route whose admin answer depends on the device),
// -1 "not tried" (an admin's would change the fleet).
func privilegeRouteMatrix(t *testing.T, f *Fleet, tok roleTokens) {
	routes := privilegeRoutes()
	roles := []struct{ name, token string }{{"admin", tok.admin}, {"viewer", tok.viewer}, {"monitor", tok.monitor}}
	for _, r := range routes {
		for i, role := range roles {
			if r.want[i] < 0 {
				continue
			}
			code, body := doAs(t, f.Hub, role.token, r.method, r.path, r.body)
			switch want := r.want[i]; {
			case want == 0 && (code == 401 || code == 403):
				t.Errorf("%s %s as %s: %d %.300s, want it let through", r.method, r.path, role.name, code, body)
			case want != 0 && code != want:
				t.Errorf("%s %s as %s: %d %.300s, want %d", r.method, r.path, role.name, code, body, want)
			}
			if role.name == "monitor" {
				for _, s := range crashSecrets {
					if s == "logTail" && strings.HasPrefix(r.path, "/v1/openapi.") {
						continue // the API's description names the field; it holds no data
					}
					if strings.Contains(body, s) {
						t.Errorf("monitor %s %s: the answer holds %q: %.400s", r.method, r.path, s, body)
					}
				}
			}
			if strings.Contains(r.path, "events") && strings.Contains(body, "logTail") {
				t.Errorf("%s %s as %s: an event with a logTail: %.400s", r.method, r.path, role.name, body)
			}
		}
		if code, body := doAs(t, f.Hub, "", r.method, r.path, r.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d %.200s, want 401", r.method, r.path, code, body)
		}
	}
	privilegeRouteExtras(t, f, tok)
}

// privilegeRoute is a request and the code admin, viewer and monitor get.
type privilegeRoute struct {
	method, path, body string
	want               [3]int
}

// privilegeRoutes are every route of the hub's API, against
// privilegeCrashReports' fleet.
func privilegeRoutes() []privilegeRoute {
	dev := deviceYAML("dev-1", map[string]string{"site": "lab"})
	return []privilegeRoute{
		{"GET", "/v1/devices", "", [3]int{200, 200, 200}},
		{"GET", "/v1/devices/dev-1", "", [3]int{200, 200, 200}},
		{"GET", "/v1/deployments", "", [3]int{200, 200, 200}},
		{"GET", "/v1/deployments/crasher", "", [3]int{200, 200, 200}},
		{"GET", "/v1/deployments/crasher/status", "", [3]int{200, 200, 200}},
		{"GET", "/v1/deployments/crasher/revisions", "", [3]int{200, 200, 403}},
		{"GET", "/v1/deployments/crasher/revisions/1", "", [3]int{200, 200, 403}},
		{"GET", "/v1/configmaps", "", [3]int{200, 200, 403}},
		{"GET", "/v1/configmaps/cfg", "", [3]int{200, 200, 403}},
		{"GET", "/v1/secrets", "", [3]int{200, 200, 403}},
		{"GET", "/v1/secrets/creds", "", [3]int{200, 200, 403}},
		{"GET", "/v1/credentials", "", [3]int{200, 200, 403}},
		{"GET", "/v1/bootstrap-tokens", "", [3]int{200, 200, 403}},
		{"GET", "/v1/mosquitto/passwd", "", [3]int{200, 403, 403}},
		{"GET", "/v1/mosquitto/acl", "", [3]int{200, 200, 403}},
		{"GET", "/v1/audit", "", [3]int{200, 403, 403}},
		{"GET", "/v1/devices/dev-1/pods/crasher/log?previous=true", "", [3]int{200, 403, 403}},
		{"GET", "/v1/devices/dev-1/crashreports", "", [3]int{200, 403, 403}},
		{"GET", "/v1/devices/dev-1/events", "", [3]int{200, 200, 200}},
		{"GET", "/v1/events", "", [3]int{200, 200, 200}},
		{"GET", "/v1/events?type=Warning&limit=0", "", [3]int{200, 200, 200}},
		{"GET", "/v1/info", "", [3]int{200, 200, 200}},
		{"GET", "/metrics", "", [3]int{200, 200, 200}},
		{"GET", "/v1/top", "", [3]int{200, 200, 200}},
		{"GET", "/v1/devices/dev-1/top", "", [3]int{200, 200, 200}},
		{"GET", "/v1/dashboard/session", "", [3]int{200, 200, 200}},
		{"GET", "/v1/dashboard/summary", "", [3]int{200, 200, 200}},
		{"GET", "/v1/dashboard/devices", "", [3]int{200, 200, 200}},
		{"GET", "/v1/openapi.yaml", "", [3]int{200, 200, 200}},
		{"GET", "/v1/openapi.json", "", [3]int{200, 200, 200}},
		{"GET", "/v1/nope", "", [3]int{404, 404, 404}},
		{"POST", "/v1/apply?dryRun=server", dev, [3]int{200, 403, 403}},
		{"POST", "/v1/devices?dryRun=server", deviceYAML("pi3", nil), [3]int{201, 403, 403}},
		{"PUT", "/v1/devices/dev-1?dryRun=server", dev, [3]int{200, 403, 403}},
		{"DELETE", "/v1/devices/dev-1?dryRun=server", "", [3]int{200, 403, 403}},
		{"POST", "/v1/deployments/crasher/rollback?resourceVersion=1", `{}`, [3]int{409, 403, 403}},
		{"POST", "/v1/devices/nope/token", "", [3]int{404, 403, 403}},
		{"POST", "/v1/devices/nope/certificate", "", [3]int{0, 403, 403}},
		{"POST", "/v1/devices/dev-1/pods/crasher/exec", "", [3]int{0, 403, 403}},
		{"POST", "/v1/signing-key/rotate", "", [3]int{-1, 403, 403}}, // an admin's would rotate the key
		{"POST", "/v1/credentials", `{"name":"x","role":"nope"}`, [3]int{400, 403, 403}},
		{"DELETE", "/v1/credentials/nope", "", [3]int{404, 403, 403}},
		{"POST", "/v1/bootstrap-tokens", `{"uses":-1}`, [3]int{400, 403, 403}},
		{"DELETE", "/v1/bootstrap-tokens/abcdef", "", [3]int{404, 403, 403}},
	}
}

// privilegeRouteExtras: a wrong token, the crash pointer on events for
// every role, and the streams a monitor may read.
func privilegeRouteExtras(t *testing.T, f *Fleet, tok roleTokens) {
	roles := []struct{ name, token string }{{"admin", tok.admin}, {"viewer", tok.viewer}, {"monitor", tok.monitor}}
	// A wrong token: 401 (a few routes only, under the hub's limit on
	// failed logins from one address).
	for _, p := range []string{"/v1/events", "/v1/devices/dev-1/crashreports", "/v1/secrets/creds"} {
		if code, body := doAs(t, f.Hub, strings.Repeat("w", 43), http.MethodGet, p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d %.200s, want 401", p, code, body)
		}
	}
	// The events carry the pointer, for every role.
	for _, role := range roles {
		_, body := doAs(t, f.Hub, role.token, http.MethodGet, "/v1/devices/dev-1/events", "")
		if !strings.Contains(body, `"crashReport":true`) {
			t.Errorf("%s: dev-1's events have no crashReport pointer: %.600s", role.name, body)
		}
	}
	// The streams a monitor may read: a watch and the dashboard's.
	for _, path := range []string{"/v1/devices?watch=true", "/v1/deployments?watch=true", "/v1/dashboard/stream"} {
		code, body := streamAs(t, f.Hub, tok.monitor, path, 2*time.Second)
		if code != http.StatusOK || body == "" {
			t.Errorf("monitor GET %s: %d %.300s, want 200 and something", path, code, body)
		}
		for _, s := range crashSecrets {
			if strings.Contains(body, s) {
				t.Errorf("monitor GET %s: the stream holds %q", path, s)
			}
		}
	}
}

// streamAs reads a streaming answer for d and returns what came.
func streamAs(t *testing.T, h *Hub, token, path string, d time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // ends with the deadline
	return resp.StatusCode, string(b)
}

// privilegeLegacyEvent plays an agent from before the crashreports
// topic, whose crash event carries its logTail: the hub keeps the crash
// report (for admins) and keeps and serves the event without the log,
// with the pointer, for every role.
func privilegeLegacyEvent(t *testing.T, f *Fleet, tok roleTokens, od *mqttClient) {
	const mark = "LEGACY-TAIL-MARK"
	ev, _ := json.Marshal(schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		ID:       "0123456789abcdef01234567", Device: "old-1", Time: time.Now().UTC(), Type: schema.EventWarning,
		Reason: "BackOff", Pod: "web", Container: "app", Message: "back-off", LogTail: "panic: " + mark + "\n",
	})
	od.mustPublish(topics.Device("old-1", schema.TopicEvents), false, ev)
	awaitf(t, mqttWait, func() bool {
		code, body := doAs(t, f.Hub, tok.admin, http.MethodGet, "/v1/devices/old-1/crashreports", "")
		return code == http.StatusOK && strings.Contains(body, mark)
	}, "the older agent's crash report at the hub")
	for _, role := range []struct{ name, token string }{{"admin", tok.admin}, {"viewer", tok.viewer}, {"monitor", tok.monitor}} {
		for _, path := range []string{"/v1/events", "/v1/devices/old-1/events"} {
			code, body := doAs(t, f.Hub, role.token, http.MethodGet, path, "")
			if code != http.StatusOK || !strings.Contains(body, `"crashReport":true`) || !strings.Contains(body, "old-1") {
				t.Errorf("%s GET %s: %d %.600s, want the older agent's event with its pointer", role.name, path, code, body)
			}
			if strings.Contains(body, mark) || strings.Contains(body, "logTail") {
				t.Errorf("%s GET %s: the older agent's log tail is served: %.600s", role.name, path, body)
			}
		}
	}
}
