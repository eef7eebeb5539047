package test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// signedRequestsManifest: a pod with a shell on every device, saying
// hello once, then idling.
func signedRequestsManifest(image string) string {
	return `apiVersion: fleet/v1
kind: Deployment
metadata: {name: target}
spec:
  selector: {matchLabels: {agent: "yes"}}
  template:
    spec:
      containers:
      - name: main
        image: ` + image + `
        command: [/bin/sh, -c, 'echo hello from target; trap "exit 0" TERM; while true; do sleep 1; done']
`
}

// TestE2ESignedRequests: on an external Mosquitto, a rogue publisher with
// the hub's rights (the harness's injector account, as a compromised
// broker or a leaked hub account would be) publishes exec requests
// straight on sreq-1's requests topic: unsigned; a genuine one it
// captured, replayed; the same, mutated; a genuine one captured from
// sreq-2's topic (for another device); and, signed with the hub's own key
// (read from its data directory, to isolate the time checks from the
// signature check), an expired one and one expiring far ahead; one with a
// malformed signature member, and one of 200 KiB. Each
// command would leave a marker file in the container: none does, the
// genuine command ran once, and each request was answered with code
// Unauthenticated, which the hub records as a RequestRefused event. The
// real fleet exec, logs and top through the hub still work. A device
// that pinned another key refuses the hub's own requests: fleet exec,
// logs and top fail with RequestRefused, in the audit trail.
func TestE2ESignedRequests(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Broker: BrokerMosquitto, DevicePrefix: "sreq", Shell: true, Labels: e2eLabels})
	dev, dev2 := f.Devices()[0], f.Devices()[1]
	f.Apply(t, signedRequestsManifest(f.ShellImage))
	f.AwaitRollout(t, "target", 2, e2eConverge)

	user, pass := f.InjectorMQTTAccount()
	rogue := mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{clientID: user})
	reqTopic, respTopic := topics.Device(dev, schema.TopicRequests), topics.Device(dev, schema.TopicResponses)
	rogue.subscribe(reqTopic)
	rogue.subscribe(respTopic)
	rogue.subscribe(topics.Device(dev2, schema.TopicRequests))

	// Genuine execs, through the hub; the rogue captures their requests.
	capture := func(device, cmd string) []byte {
		t.Helper()
		out, stderr, err := f.RunCLI(t, "", "exec", device+"/target", "--", "/bin/sh", "-c", cmd)
		if err != nil {
			t.Fatalf("fleet exec %s -- %s: %v\n%s%s", device, cmd, err, out, stderr)
		}
		topic := topics.Device(device, schema.TopicRequests)
		return rogue.await("the genuine exec request on "+topic, func(m mqttMsg) bool {
			return m.Topic == topic && bytes.Contains(m.Payload, []byte(`"op":"exec"`)) && bytes.Contains(m.Payload, []byte(jsonEscape(cmd)))
		}).Payload
	}
	genuine := capture(dev, "echo run >> /tmp/genuine-runs")
	otherDevice := capture(dev2, "echo run >> /tmp/dev2-runs")
	if _, _, err := schema.SplitSignedRequest(genuine); err != nil {
		t.Fatalf("the hub's exec request is not signed: %v\n%s", err, genuine)
	}

	attacks := forgedExecs(t, f, dev, genuine, otherDevice)
	dropped := hubMetric(t, f, `fleet_remote_responses_dropped_total{reason="forged_request_refused"}`)
	awaitRefusals(t, rogue, reqTopic, respTopic, attacks)

	// Nothing ran: no marker, the genuine command once, nothing of sreq-2's.
	out := f.CLI(t, "exec", dev+"/target", "--", "/bin/sh", "-c", "ls /tmp; echo ---; cat /tmp/genuine-runs")
	if strings.Contains(out, "pwned") || strings.Contains(out, "dev2-runs") || !strings.HasSuffix(out, "---\nrun\n") {
		t.Errorf("%s's /tmp after the forged requests (want no pwned-* or dev2-runs, genuine-runs once):\n%s", dev, out)
	}
	awaitf(t, 30*time.Second, func() bool {
		return hubMetric(t, f, `fleet_remote_responses_dropped_total{reason="forged_request_refused"}`) >= dropped+float64(len(attacks))
	}, "the hub counting the device's refusals of requests it did not send: fleet_remote_responses_dropped_total %v, was %v before",
		hubMetricsOf(t, f, "fleet_remote_responses_dropped_total"), dropped)
	awaitf(t, 30*time.Second, func() bool {
		for _, e := range hubEventsOf(t, f, dev) {
			if e.Reason == "RequestRefused" && e.Type == schema.EventWarning && strings.Contains(e.Message, "the hub did not send") {
				return true
			}
		}
		return false
	}, "no RequestRefused Warning event on %s at the hub", dev)

	// The real thing still works: logs and top.
	if out := f.CLI(t, "logs", dev+"/target"); !strings.Contains(out, "hello from target") {
		t.Errorf("fleet logs %s/target = %q", dev, out)
	}
	if out := f.CLI(t, "top", "pods", dev+"/target", "-o", "json"); !strings.Contains(out, `"pod": "target"`) && !strings.Contains(out, `"pod":"target"`) {
		t.Errorf("fleet top pods %s/target:\n%s", dev, out)
	}

	refusedThroughHub(t, f)
}

// refusedThroughHub: a device that pinned another key than the hub's
// refuses the hub's own requests; fleet exec, logs and top say so
// (RequestRefused), and the audit trail has the refusals.
func refusedThroughHub(t *testing.T, f *Fleet) {
	const name = "sreq-wrongkey"
	tok := f.AddDevice(t, name, map[string]string{"agent": "no"})
	_, other, _ := ed25519.GenerateKey(nil)
	StartAgent(t, AgentOptions{
		Device: name, Broker: f.BrokerURL, Token: tok, ContainerdSocket: f.Containerd.Socket(),
		Args: []string{"--hub-signing-key", schema.EncodeSigningKey(other.Public().(ed25519.PublicKey))},
	})
	awaitf(t, time.Minute, func() bool {
		d := f.Device(t, name)
		return d.Status != nil && d.Status.Online
	}, "%s online", name)
	for _, args := range [][]string{
		{"exec", name + "/target", "--", "touch", "/tmp/x"},
		{"logs", name + "/target"},
		{"top", "pods", name + "/target"},
	} {
		out, stderr, err := f.RunCLI(t, "", args...)
		if err == nil || !strings.Contains(stderr, schema.ReasonRequestRefused) || !strings.Contains(stderr, "not by the pinned hub key") {
			t.Errorf("fleet %s: err %v, stdout %q, stderr %q: want a RequestRefused error saying why", strings.Join(args, " "), err, out, stderr)
		}
	}
	var l schema.AuditList
	f.Get(t, "/v1/audit?limit=0", &l)
	seen := map[string]bool{}
	for _, e := range l.Items {
		if strings.HasSuffix(e.Action, "-refused") && strings.HasPrefix(e.Object, "devices/"+name) && e.Result == "502" {
			seen[e.Action] = true
		}
	}
	for _, a := range []string{"exec-refused", "logs-refused", "top-refused"} {
		if !seen[a] {
			t.Errorf("no %s entry for %s in the audit trail (have %v)", a, name, seen)
		}
	}
}

// attack is a request a rogue publishes, and what its refusal must say.
type attack struct {
	name, why string
	payload   []byte
}

// forgedExecs makes the rogue's exec requests to dev: each command would
// leave /tmp/pwned-* in the container.
func forgedExecs(t *testing.T, f *Fleet, dev string, genuine, otherDevice []byte) []attack {
	t.Helper()
	hubKey := readHubSigningKey(t, f.Hub.DataDir)
	forge := func(marker string, auth *schema.RequestAuth, key ed25519.PrivateKey) []byte {
		t.Helper()
		r := schema.Request{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest},
			ID:       randomHex(t, schema.RequestIDBytes), Device: dev, Op: schema.OpExec, Window: 8,
			Deadline: time.Now().Add(time.Minute).UTC(),
			Exec:     &schema.ExecOptions{Pod: "target", Command: []string{"/bin/sh", "-c", "echo PWNED > /tmp/pwned-" + marker}},
		}
		if auth != nil {
			r.RequestAuth = *auth
		} else if r.RequestAuth, _ = schema.NewRequestAuth(time.Now()); r.Nonce == "" {
			t.Fatal("no nonce")
		}
		b := mustJSON(t, r)
		if key == nil {
			return b
		}
		signed, err := schema.SignRequest(b, key)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	nonce := func(expires time.Time) *schema.RequestAuth {
		a, _ := schema.NewRequestAuth(time.Now())
		a.Expires = expires.UTC()
		return &a
	}
	return []attack{
		{"unsigned", "not signed", forge("unsigned", nil, nil)},
		{"replayed", "replayed", genuine},
		{"mutated", "does not verify", mutate(t, genuine, "genuine-runs", "pwned-mutate")},
		{"another device's", "for another device", otherDevice},
		{"expired", "expired", forge("expired", nonce(time.Now().Add(-schema.MaxRequestClockSkew-time.Minute)), hubKey)},
		{"far-future", "too far ahead", forge("future", nonce(time.Now().Add(time.Hour)), hubKey)},
		{"malformed-signature", "signature member", mutate(t, genuine, `"alg":"ed25519"`, `"alg":"ed25519","x":1`)},
		{"huge", "not signed", pad(forge("huge", nil, nil), 200<<10)}, // the broker takes at most 256 KiB
	}
}

// awaitRefusals publishes every attack on the device's requests topic,
// at once (before any deadline the hub set passes), and checks each
// answer: a Done of code Unauthenticated saying why.
func awaitRefusals(t *testing.T, rogue *mqttClient, reqTopic, respTopic string, attacks []attack) {
	t.Helper()
	ids := make([]string, len(attacks))
	for i, a := range attacks {
		var r struct{ ID string }
		if err := json.Unmarshal(a.payload, &r); err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
		rogue.mustPublish(reqTopic, false, a.payload)
	}
	refusals := func() map[string]*schema.Response {
		out := map[string]*schema.Response{}
		for _, m := range rogue.received() {
			if r, err := schema.DecodeResponse(m.Payload); m.Topic == respTopic && err == nil && r.Done && r.Code != "" {
				out[r.ID] = r
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	got := refusals()
	for len(got) < len(ids) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling with a deadline
		got = refusals()
	}
	for i, a := range attacks {
		r := got[ids[i]]
		switch {
		case r == nil:
			t.Errorf("%s request: no refusal on %s within 30 s", a.name, respTopic)
		case r.Code != schema.CodeUnauthenticated || !strings.Contains(r.Error, a.why):
			t.Errorf("%s request: answered %s %q, want %s saying %q", a.name, r.Code, r.Error, schema.CodeUnauthenticated, a.why)
		}
	}
}

// pad adds a member of n bytes to a request.
func pad(p []byte, n int) []byte {
	return append(p[:len(p)-1:len(p)-1], []byte(`,"pad":"`+strings.Repeat("p", n)+`"}`)...)
}

// mutate changes old to new in a captured request, its ID to a fresh
// one (so that its refusal is told from the original's) and its nonce to
// a fresh one (so that only the signature stands between it and the
// device: the nonce check would refuse a reused one as a replay).
func mutate(t *testing.T, payload []byte, old, new string) []byte {
	t.Helper()
	var r struct{ ID, Nonce string }
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatal(err)
	}
	if r.Nonce == "" {
		t.Fatalf("the captured request has no nonce: %s", payload)
	}
	p := bytes.Replace(payload, []byte(old), []byte(new), 1)
	fresh := bytes.Replace(p, []byte(`"nonce":"`+r.Nonce+`"`), []byte(`"nonce":"`+randomHex(t, schema.RequestNonceBytes)+`"`), 1)
	if bytes.Equal(fresh, p) {
		t.Fatalf("no nonce member to replace in %s", payload)
	}
	p = fresh
	return bytes.Replace(p, []byte(r.ID), []byte(randomHex(t, schema.RequestIDBytes)), 1)
}

// readHubSigningKey reads the hub's signing key from its data directory.
func readHubSigningKey(t *testing.T, dataDir string) ed25519.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("signing.key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("signing.key holds a %T", k)
	}
	return key
}

// jsonEscape is s as it appears inside a JSON string.
func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// hubMetricsOf returns the hub's /metrics lines of a metric.
func hubMetricsOf(t *testing.T, f *Fleet, name string) []string {
	t.Helper()
	_, body, err := f.Request(t.Context(), http.MethodGet, "/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return out
}

// hubEventsOf returns the device's events the hub holds.
func hubEventsOf(t *testing.T, f *Fleet, device string) []schema.Event {
	t.Helper()
	var evs struct{ Items []schema.Event }
	f.Get(t, "/v1/devices/"+device+"/events", &evs)
	return evs.Items
}
