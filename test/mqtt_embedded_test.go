package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// Tests of the hub's MQTT side against a real fleet-hub process with its
// embedded broker, through real MQTT clients over TCP.

func TestMQTTDesiredStateRetainedAcrossHubRestart(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi-1", map[string]string{"site": "lab"})
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))

	dev := mustDialMQTT(t, h.MQTTURL, "pi-1", tok, dialOpts{})
	if code := dev.subscribe(topics.Device("pi-1", schema.TopicDesired)); code != 1 {
		t.Fatalf("SUBACK %#x for its own desired topic", code)
	}
	ds := dev.awaitDesired("pi-1", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	if ds.Kind != schema.KindDesiredState || ds.APIVersion != schema.APIVersion || ds.Device != "pi-1" ||
		ds.Pods[0].Name != "web" || ds.Pods[0].Hash != schema.PodSpecHash(ds.Pods[0].Spec) || ds.Store == "" || ds.Generation < 1 {
		t.Fatalf("desired state %+v", ds)
	}
	if err := schema.ValidateDesiredState(&ds); err != nil {
		t.Fatalf("desired state does not validate: %v", err)
	}
	var info schema.HubInfo
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/info", nil, http.StatusOK), &info); err != nil || info.Store != ds.Store || info.ExternalBroker {
		t.Fatalf("info %+v (%v), desired store %s", info, err, ds.Store)
	}

	// A crash: the broker keeps nothing, the hub rebuilds it from the store.
	h.Kill()
	h.Restart()
	dev2 := mustDialMQTT(t, h.MQTTURL, "pi-1", tok, dialOpts{})
	dev2.subscribe(topics.Device("pi-1", schema.TopicDesired))
	m := dev2.await("retained desired after restart", func(m mqttMsg) bool { return m.Topic == topics.Device("pi-1", schema.TopicDesired) })
	var after schema.DesiredState
	if err := json.Unmarshal(m.Payload, &after); err != nil {
		t.Fatal(err)
	}
	if !m.Retained || after.Generation != ds.Generation || after.Store != ds.Store || after.Pods[0].Hash != ds.Pods[0].Hash {
		t.Errorf("after restart: retained=%v %+v; before %+v", m.Retained, after, ds)
	}

	// A change after the restart is a new, higher generation.
	applyYAML(t, h, webYAML("web", "nginx:2", map[string]string{"site": "lab"}))
	next := dev2.awaitDesired("pi-1", func(d schema.DesiredState) bool { return d.Generation > ds.Generation })
	if next.Pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("new generation %+v", next)
	}
}

func TestMQTTIsolation(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tokA := addDevice(t, h, "dev-a", nil)
	tokB := addDevice(t, h, "dev-b", nil)
	a := mustDialMQTT(t, h.MQTTURL, "dev-a", tokA, dialOpts{})

	// Reading another device's desired state, or anyone's through a
	// wildcard, is refused.
	for _, filter := range []string{
		topics.Device("dev-b", schema.TopicDesired),
		topics.DeviceFilter(schema.TopicDesired),
		"fleet/v1/devices/dev-b/#",
		"fleet/v1/#",
		"#",
		topics.Device("dev-b", schema.TopicStatus),
	} {
		if code := a.subscribe(filter); code != 0x80 {
			t.Errorf("dev-a subscribing to %s: SUBACK %#x, want 0x80", filter, code)
		}
	}

	// Speaking for another device: QoS 0 is dropped silently...
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		payload := statusPayload("dev-b", 99, "")
		if kind == schema.TopicOnline {
			payload = []byte("online")
		} else if kind == schema.TopicEvents {
			payload = []byte(`{"device":"dev-b","type":"Warning","reason":"Forged"}`)
		}
		if err := a.publish(topics.Device("dev-b", kind), 0, kind != schema.TopicEvents, payload); err != nil {
			t.Fatal(err)
		}
	}
	// ... and the hub's view of dev-b does not change. dev-a's own report,
	// sent after the forged ones on the same connection, proves the hub has
	// processed them.
	a.mustPublish(topics.Device("dev-a", schema.TopicStatus), true, statusPayload("dev-a", 1, ""))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "dev-a")
		return d.Status != nil && d.Status.ObservedGeneration == 1
	}, "dev-a's own status in the API")
	b := getDevice(t, h, "dev-b")
	if b.Status == nil || b.Status.ObservedGeneration != 0 || b.Status.Online || b.Status.Agent != nil {
		t.Errorf("dev-b's status changed through dev-a: %+v", b.Status)
	}
	var evs struct{ Items []schema.Event }
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/devices/dev-b/events", nil, http.StatusOK), &evs); err != nil || len(evs.Items) != 0 {
		t.Errorf("dev-b's events: %+v %v", evs, err)
	}

	// QoS 1 to a forbidden topic ends the session (MQTT 3.1.1 has no
	// negative PUBACK).
	a2 := mustDialMQTT(t, h.MQTTURL, "dev-a", tokA, dialOpts{})
	_ = a2.publish(topics.Device("dev-b", schema.TopicStatus), 1, true, statusPayload("dev-b", 98, ""))
	a2.awaitLost(mqttWait)

	// Credentials: anonymous, wrong token, another device's token.
	if _, err := dialMQTT(t, h.MQTTURL, "", "", dialOpts{}); err == nil {
		t.Error("anonymous client accepted")
	}
	if _, err := dialMQTT(t, h.MQTTURL, "dev-a", tokA+"x", dialOpts{}); err == nil {
		t.Error("wrong token accepted")
	}
	if _, err := dialMQTT(t, h.MQTTURL, "dev-a", tokB, dialOpts{}); err == nil {
		t.Error("dev-b's token accepted for dev-a")
	}
	if _, err := dialMQTT(t, h.MQTTURL, "nobody", tokA, dialOpts{}); err == nil {
		t.Error("unknown username accepted")
	}
	if _, err := dialMQTT(t, h.MQTTURL, "admin", h.Token, dialOpts{}); err == nil {
		t.Error("the admin token logged in to MQTT")
	}
	if b := getDevice(t, h, "dev-b"); b.Status == nil || b.Status.ObservedGeneration != 0 {
		t.Errorf("dev-b's status after the QoS 1 attempt: %+v", b.Status)
	}
	// A device token is no credential of the HTTP API.
	if code, _, err := hubRequest(t.Context(), h.URL, tokA, http.MethodGet, "/v1/devices", nil); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET /v1/devices with a device token: %d %v, want 401", code, err)
	}
}

func TestMQTTRevocationDisconnectsAtOnce(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", nil)
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))

	// Rotation: the API answers once the old sessions are gone.
	tok2 := issueToken(t, h, "pi")
	dev.awaitLost(2 * time.Second)
	if _, err := dialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{}); err == nil {
		t.Error("the rotated token still logs in")
	}
	dev2 := mustDialMQTT(t, h.MQTTURL, "pi", tok2, dialOpts{})
	dev2.subscribe(topics.Device("pi", schema.TopicDesired))
	dev2.await("retained desired state", func(m mqttMsg) bool { return m.Retained })

	// A monitor credential, then its deletion.
	mtok := addMonitor(t, h, "grafana")
	mon := mustDialMQTT(t, h.MQTTURL, "grafana", mtok, dialOpts{})
	if code := mon.subscribe(topics.DeviceFilter(schema.TopicStatus)); code != 1 {
		t.Fatalf("monitor SUBACK %#x", code)
	}
	if code := mon.subscribe(topics.Device("pi", schema.TopicDesired)); code != 0x80 {
		t.Errorf("monitor may read desired state: SUBACK %#x", code)
	}
	mustDo(t, h, http.MethodDelete, "/v1/credentials/grafana", nil, http.StatusOK)
	mon.awaitLost(2 * time.Second)
	if _, err := dialMQTT(t, h.MQTTURL, "grafana", mtok, dialOpts{}); err == nil {
		t.Error("a deleted credential still logs in")
	}

	// Deleting the device ends its session and clears its retained topic.
	mustDo(t, h, http.MethodDelete, "/v1/devices/pi", nil, http.StatusOK)
	dev2.awaitLost(2 * time.Second)
	if _, err := dialMQTT(t, h.MQTTURL, "pi", tok2, dialOpts{}); err == nil {
		t.Error("a deleted device still logs in")
	}
}

func TestMQTTDeleteAndRecreateDeviceContinuesGeneration(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", map[string]string{"site": "lab"})
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))
	first := dev.awaitDesired("pi", func(d schema.DesiredState) bool { return len(d.Pods) == 1 })

	mustDo(t, h, http.MethodDelete, "/v1/devices/pi", nil, http.StatusOK)
	dev.awaitLost(2 * time.Second)
	tok = addDevice(t, h, "pi", map[string]string{"site": "lab"})
	dev = mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.subscribe(topics.Device("pi", schema.TopicDesired))
	again := dev.awaitDesired("pi", func(d schema.DesiredState) bool { return len(d.Pods) == 1 })
	if again.Generation <= first.Generation || again.Store != first.Store {
		t.Errorf("re-created device: generation %d (store %s) after %d (store %s): an agent would ignore it",
			again.Generation, again.Store, first.Generation, first.Store)
	}
}

func TestMQTTMalformedStatusIsCountedAndChangesNothing(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", nil)
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	statusTopic := topics.Device("pi", schema.TopicStatus)
	dev.mustPublish(statusTopic, true, statusPayload("pi", 5, ""))
	dev.mustPublish(topics.Device("pi", schema.TopicOnline), true, []byte("online"))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "pi")
		return d.Status != nil && d.Status.ObservedGeneration == 5 && d.Status.Online
	}, "first status")
	good := getDevice(t, h, "pi").Status

	const series = `fleet_mqtt_malformed_payloads_total{topic_kind="status"}`
	before := metric(t, h, series)
	bad := [][]byte{
		[]byte("not json at all"),
		[]byte(`{"device":"pi","observedGeneration":"five","pods":[]}`),                                                      // mistyped
		bytes.Replace(statusPayload("pi", 6, ""), []byte(`"pods":[]`), []byte(`"pods":[{"name":"x","phase":"Dancing"}]`), 1), // invalid
		statusPayload("someone-else", 7, ""),                                                                                 // names another device
		append(append([]byte(`{"device":"pi","pad":"`), bytes.Repeat([]byte("x"), 70<<10)...), '"', '}'),                     // oversized
	}
	for _, p := range bad {
		dev.mustPublish(statusTopic, false, p)
	}
	dev.mustPublish(topics.Device("pi", schema.TopicOnline), true, []byte("perhaps"))
	awaitf(t, mqttWait, func() bool { return metric(t, h, series) == before+float64(len(bad)) },
		"%s to reach %v", series, before+float64(len(bad)))
	awaitf(t, mqttWait, func() bool { return metric(t, h, `fleet_mqtt_malformed_payloads_total{topic_kind="online"}`) == 1 }, "online counted")
	got := getDevice(t, h, "pi").Status
	if got.ObservedGeneration != good.ObservedGeneration || !got.Online || got.Agent == nil || got.Agent.Arch != "arm64" {
		t.Errorf("status after malformed payloads: %+v, want %+v", got, good)
	}
	if n := metric(t, h, "fleet_status_messages_total"); n != 1 {
		t.Errorf("fleet_status_messages_total = %v, want 1", n)
	}

	// Events: a good one is kept for `fleet describe`, a bad one counted.
	dev.mustPublish(topics.Device("pi", schema.TopicEvents), false, []byte(`{"apiVersion":"fleet/v1","kind":"Event","device":"pi","time":"2025-01-01T00:00:00Z","type":"Warning","reason":"BackOff","pod":"web","message":"restarting"}`))
	dev.mustPublish(topics.Device("pi", schema.TopicEvents), false, []byte(`{"device":"pi","type":"Loud"}`))
	awaitf(t, mqttWait, func() bool { return metric(t, h, `fleet_mqtt_malformed_payloads_total{topic_kind="events"}`) == 1 }, "bad event counted")
	var evs struct {
		Kind  string
		Items []schema.Event
	}
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/devices/pi/events", nil, http.StatusOK), &evs); err != nil ||
		evs.Kind != "EventList" || len(evs.Items) != 1 || evs.Items[0].Reason != "BackOff" {
		t.Errorf("events: %+v %v", evs, err)
	}
}

func TestMQTTDeploymentStatusAndArchLabel(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{Args: []string{"--stale-after", "90s"}})
	toks := map[string]string{}
	for _, n := range []string{"ok", "broken", "off"} {
		toks[n] = addDevice(t, h, n, map[string]string{"site": "lab"})
	}
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))

	connect := func(name string) (*mqttClient, schema.DesiredState) {
		c := mustDialMQTT(t, h.MQTTURL, name, toks[name], dialOpts{will: &mqttMsg{Topic: topics.Device(name, schema.TopicOnline), Payload: []byte("offline"), Retained: true}})
		c.subscribe(topics.Device(name, schema.TopicDesired))
		ds := c.awaitDesired(name, func(d schema.DesiredState) bool { return len(d.Pods) == 1 })
		c.mustPublish(topics.Device(name, schema.TopicOnline), true, []byte("online"))
		return c, ds
	}
	okc, ds := connect("ok")
	okc.mustPublish(topics.Device("ok", schema.TopicStatus), true, statusPayload("ok", ds.Generation, ds.Store, runningPods(ds)...))
	brokenc, ds2 := connect("broken")
	failed := runningPods(ds2)
	failed[0].Phase, failed[0].Ready = schema.PhaseFailed, false
	brokenc.mustPublish(topics.Device("broken", schema.TopicStatus), true, statusPayload("broken", ds2.Generation, ds2.Store, failed...))
	// "off" never connects: pending, not failed.

	want := schema.DeploymentStatus{ObservedGeneration: 1, Targeted: 3, Updated: 2, Ready: 1, Failed: 1, Pending: 1, Revision: 1}
	awaitf(t, mqttWait, func() bool {
		s := getDeployment(t, h, "web").Status
		return s != nil && reflect.DeepEqual(*s, want)
	}, "deployment status %+v (got %+v)", want, getDeployment(t, h, "web").Status)
	if d := getDevice(t, h, "ok"); d.Status == nil || !d.Status.Converged || !d.Status.Online || d.Status.DesiredGeneration != ds.Generation {
		t.Errorf("device ok: %+v", d.Status)
	}
	if d := getDevice(t, h, "off"); d.Status == nil || d.Status.Converged || d.Status.Online {
		t.Errorf("device off: %+v", d.Status)
	}

	// The list carries the same status.
	var list schema.DeploymentList
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/deployments", nil, http.StatusOK), &list); err != nil || len(list.Items) != 1 || list.Items[0].Status == nil || !reflect.DeepEqual(*list.Items[0].Status, want) {
		t.Errorf("list: %+v %v", list, err)
	}
	var devs schema.DeviceList
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/devices?labelSelector=site%3Dlab", nil, http.StatusOK), &devs); err != nil || len(devs.Items) != 3 {
		t.Fatalf("device list: %v", err)
	}
	for _, d := range devs.Items {
		if d.Status == nil || d.Status.DesiredGeneration == 0 {
			t.Errorf("listed device %s without status: %+v", d.Metadata.Name, d.Status)
		}
	}

	// A monitor reads the retained deployment status.
	mtok := addMonitor(t, h, "dash")
	mon := mustDialMQTT(t, h.MQTTURL, "dash", mtok, dialOpts{})
	if code := mon.subscribe(topics.DeploymentStatus("+")); code != 1 {
		t.Fatalf("monitor SUBACK %#x", code)
	}
	mon.await("deployment status", func(m mqttMsg) bool {
		var s struct {
			Name string `json:"name"`
			schema.DeploymentStatus
		}
		return m.Topic == topics.DeploymentStatus("web") && json.Unmarshal(m.Payload, &s) == nil && s.Name == "web" && reflect.DeepEqual(s.DeploymentStatus, want)
	})

	// The failing device goes offline (its will): pending, never failed.
	brokenc.c.Disconnect(0) // a clean disconnect sends no will: say it
	b2 := mustDialMQTT(t, h.MQTTURL, "broken", toks["broken"], dialOpts{})
	b2.mustPublish(topics.Device("broken", schema.TopicOnline), true, []byte("offline"))
	want = schema.DeploymentStatus{ObservedGeneration: 1, Targeted: 3, Updated: 2, Ready: 1, Failed: 0, Pending: 2, Revision: 1}
	awaitf(t, mqttWait, func() bool {
		s := getDeployment(t, h, "web").Status
		return s != nil && reflect.DeepEqual(*s, want)
	}, "offline device pending: %+v", getDeployment(t, h, "web").Status)

	// The agent reported arm64: the hub labels the device, and a selector
	// can use it.
	awaitf(t, mqttWait, func() bool { return getDevice(t, h, "ok").Metadata.Labels[schema.LabelArch] == "arm64" }, "fleet/arch label")
	applyYAML(t, h, webYAML("arm-only", "tool:1", map[string]string{schema.LabelArch: "arm64", "site": "lab"}))
	okc.awaitDesired("ok", func(d schema.DesiredState) bool { return len(d.Pods) == 2 })
	if l := getDevice(t, h, "off").Metadata.Labels[schema.LabelArch]; l != "" {
		t.Errorf("device that never reported got fleet/arch=%s", l)
	}
}

func TestMQTTApplyPublishesOnlyWhatChanges(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	const n = 1000
	for batch := range 2 {
		docs := make([]string, 0, n/2)
		for i := batch * n / 2; i < (batch+1)*n/2; i++ {
			docs = append(docs, deviceYAML(fmt.Sprintf("d%04d", i), map[string]string{"fleet": "big"}))
		}
		applyYAML(t, h, strings.Join(docs, "---\n"))
	}
	const published = "fleet_desired_publishes_total"
	awaitf(t, mqttWait, func() bool { return metric(t, h, published) == n }, "first desired states of %d devices", n)

	// One device to look at the messages themselves.
	tok := issueToken(t, h, "d0500")
	dev := mustDialMQTT(t, h.MQTTURL, "d0500", tok, dialOpts{})
	dev.subscribe(topics.Device("d0500", schema.TopicDesired))
	first := dev.awaitDesired("d0500", func(schema.DesiredState) bool { return true })

	start := time.Now()
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"fleet": "big"}))
	awaitf(t, mqttWait, func() bool { return metric(t, h, published) >= 2*n }, "%d more desired states", n)
	t.Logf("apply -> %d retained desired states published (seen through /metrics) in %v", n, time.Since(start))
	dev.awaitDesired("d0500", func(d schema.DesiredState) bool { return d.Generation == first.Generation+1 && len(d.Pods) == 1 })

	// The same apply again changes nothing and publishes nothing; a
	// device added afterwards (one publish) proves the hub got that far.
	resp := applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"fleet": "big"}))
	if resp.Results[0].Action != schema.ActionUnchanged {
		t.Fatalf("re-apply: %+v", resp.Results[0])
	}
	applyYAML(t, h, deviceYAML("late", map[string]string{"fleet": "small"}))
	awaitf(t, mqttWait, func() bool { return metric(t, h, published) >= 2*n+1 }, "the late device's desired state")
	if got := metric(t, h, published); got != 2*n+1 {
		t.Errorf("%s = %v, want %d: the identical re-apply published something", published, got, 2*n+1)
	}
	if g := getDevice(t, h, "d0500").Status.DesiredGeneration; g != first.Generation+1 {
		t.Errorf("generation %d after an identical re-apply, want %d", g, first.Generation+1)
	}
}

func TestMQTTMonitorWithMosquittoSub(t *testing.T) {
	t.Parallel()
	sub := sysdeps.Require(t, "mosquitto_sub")
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "pi", nil)
	dev := mustDialMQTT(t, h.MQTTURL, "pi", tok, dialOpts{})
	dev.mustPublish(topics.Device("pi", schema.TopicStatus), true, statusPayload("pi", 3, ""))
	mtok := addMonitor(t, h, "grafana")
	u, err := url.Parse(h.MQTTURL)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), sub, "-h", u.Hostname(), "-p", u.Port(), "-u", "grafana", "-P", mtok,
		"-t", topics.DeviceFilter(schema.TopicStatus), "-C", "1", "-W", "10", "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), topics.Device("pi", schema.TopicStatus)+" ") || !strings.Contains(string(out), `"observedGeneration":3`) {
		t.Errorf("mosquitto_sub printed %q", out)
	}
}

// TestMQTTFleetEvents: GET /v1/events merges the events the hub heard from
// every selected device, oldest first, filtered by type and cut to the
// newest limit; bad parameters are a 400 naming them.
func TestMQTTFleetEvents(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	devs := map[string]map[string]string{"pi-a": {"site": "lab"}, "pi-b": {"site": "lab"}, "pi-c": {"site": "hall"}}
	// Each device's events, at the times the agents stamped: the list
	// interleaves them.
	at := map[string][]string{
		"pi-a": {"2025-01-01T00:00:01Z Normal Pulled", "2025-01-01T00:00:04Z Warning BackOff"},
		"pi-b": {"2025-01-01T00:00:02Z Normal Started", "2025-01-01T00:00:05Z Warning ErrImagePull"},
		"pi-c": {"2025-01-01T00:00:03Z Normal Started"},
	}
	for name, labels := range devs {
		tok := addDevice(t, h, name, labels)
		c := mustDialMQTT(t, h.MQTTURL, name, tok, dialOpts{})
		for _, e := range at[name] {
			f := strings.Fields(e)
			c.mustPublish(topics.Device(name, schema.TopicEvents), false,
				fmt.Appendf(nil, `{"apiVersion":"fleet/v1","kind":"Event","device":%q,"time":%q,"type":%q,"reason":%q,"pod":"web"}`, name, f[0], f[1], f[2]))
		}
	}
	list := func(query string) []string {
		t.Helper()
		var l schema.EventList
		if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/events"+query, nil, http.StatusOK), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "EventList" || l.Items == nil {
			t.Fatalf("GET /v1/events%s: %+v", query, l)
		}
		var out []string
		for _, ev := range l.Items {
			out = append(out, ev.Device+":"+ev.Reason)
		}
		return out
	}
	awaitf(t, mqttWait, func() bool { return len(list("")) == 5 }, "5 events")
	for query, want := range map[string]string{
		"":                                   "pi-a:Pulled pi-b:Started pi-c:Started pi-a:BackOff pi-b:ErrImagePull",
		"?labelSelector=site%3Dlab":          "pi-a:Pulled pi-b:Started pi-a:BackOff pi-b:ErrImagePull",
		"?type=Warning":                      "pi-a:BackOff pi-b:ErrImagePull",
		"?limit=2":                           "pi-a:BackOff pi-b:ErrImagePull",
		"?limit=0&type=Normal":               "pi-a:Pulled pi-b:Started pi-c:Started",
		"?labelSelector=fleet/device%3Dpi-c": "pi-c:Started",
		"?labelSelector=site%3Dnowhere":      "",
	} {
		if got := strings.Join(list(query), " "); got != want {
			t.Errorf("GET /v1/events%s: %s, want %s", query, got, want)
		}
	}
	for query, field := range map[string]string{"?type=Loud": "type", "?limit=-1": "limit", "?limit=many": "limit", "?labelSelector=site!": "labelSelector"} {
		if b := mustDo(t, h, http.MethodGet, "/v1/events"+query, nil, http.StatusBadRequest); !strings.Contains(string(b), field) {
			t.Errorf("GET /v1/events%s: %s, want the field %s named", query, b, field)
		}
	}
}
