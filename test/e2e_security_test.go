package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// e2eIntruder is a registered device with no agent: the tests speak MQTT
// with its credentials.
const e2eIntruder = "e2e-mallory"

// intruder registers e2eIntruder once and returns its token.
func (f *Fleet) intruder(t testing.TB) string {
	t.Helper()
	if tok := f.Token(e2eIntruder); tok != "" {
		return tok
	}
	return f.AddDevice(t, e2eIntruder, map[string]string{"role": "intruder"})
}

// e2eIsolation: a device's credential used to read another device's
// desired state, to write its desired state, to speak on its status,
// online and events topics, to log in as it or to take over its MQTT
// session gets nothing: the hub's view of the other device, its agent's
// connection and its containers do not change.
func e2eIsolation(t *testing.T, f *Fleet) {
	devs := f.Devices()
	victim := devs[1]
	va := f.Agent(t, victim)
	tok := f.intruder(t)
	const secret = "s3cr3t-e2e-value"
	f.deleteOnCleanup(t, "e2e-secret")
	f.applyDeps(t, e2eDep{Name: "e2e-secret", Selector: map[string]string{schema.LabelDevice: victim}, Env: map[string]string{"SECRET": secret}})
	f.AwaitRollout(t, "e2e-secret", 1, e2eConverge)
	before := f.AwaitConverged(t, e2eConverge, devs...)[victim]
	pids := f.TaskPIDs(t, victim)
	marks := f.eventMarks()
	logMark := va.LogMark()
	embedded := f.Mosquitto == nil

	// Reading: every filter that would cover the victim's topics.
	m := mustDialMQTT(t, f.BrokerURL, e2eIntruder, tok, dialOpts{})
	for _, filter := range []string{
		topics.Device(victim, schema.TopicDesired),
		topics.DeviceFilter(schema.TopicDesired),
		"fleet/v1/devices/" + victim + "/#",
		"fleet/v1/devices/+/+",
		"fleet/v1/#",
		"#",
		topics.Device(victim, schema.TopicStatus),
		topics.Device(victim, schema.TopicOnline),
	} {
		// The embedded broker refuses the subscription; Mosquitto grants
		// it but delivers nothing its ACL does not let the client read.
		if code := m.subscribe(filter); embedded && code != 0x80 {
			t.Errorf("SUBSCRIBE %s as %s: SUBACK %#x, want 0x80", filter, e2eIntruder, code)
		}
	}
	// Its own desired state, subscribed last, arrives (retained) after
	// anything the filters above would have delivered.
	own := topics.Device(e2eIntruder, schema.TopicDesired)
	m.subscribe(own)
	m.await("its own desired state", func(msg mqttMsg) bool { return msg.Topic == own })

	// Writing: the victim's desired state (an empty one that would remove
	// its pod), and its status, online and events, QoS 0 (QoS 1 to a
	// forbidden topic ends the connection on the embedded broker).
	forged := map[string][]byte{
		schema.TopicDesired: mustJSON(t, schema.DesiredState{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
			Device:   victim, Generation: before.Status.DesiredGeneration + 1000, Pods: []schema.Pod{},
		}),
		schema.TopicStatus: statusPayload(victim, 999, ""),
		schema.TopicOnline: []byte(schema.Offline),
		schema.TopicEvents: mustJSON(t, schema.Event{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
			Device:   victim, Time: time.Now().UTC(), Type: schema.EventWarning, Reason: "Forged", Message: "forged by " + e2eIntruder,
		}),
	}
	for _, kind := range []string{schema.TopicDesired, schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		if err := m.publish(topics.Device(victim, kind), 0, kind != schema.TopicEvents, forged[kind]); err != nil {
			t.Fatalf("publish to %s's %s: %v", victim, kind, err)
		}
	}
	// Its own status, after the forgeries on the same connection: once
	// the hub shows it, the hub has handled everything before it.
	m.mustPublish(topics.Device(e2eIntruder, schema.TopicStatus), true, statusPayload(e2eIntruder, 7, ""))
	f.AwaitDevices(t, 30*time.Second, "reporting generation 7", func(d schema.Device) bool {
		return d.Status != nil && d.Status.ObservedGeneration == 7
	}, e2eIntruder)

	for _, msg := range m.received() {
		if msg.Topic != own || bytes.Contains(msg.Payload, []byte(secret)) {
			t.Errorf("%s received %s: %.200s", e2eIntruder, msg.Topic, msg.Payload)
		}
	}

	// Logging in as the victim, and taking over its session by client ID.
	if c, err := dialMQTT(t, f.BrokerURL, victim, tok, dialOpts{}); err == nil {
		c.c.Disconnect(0)
		t.Errorf("logged in as %s with %s's token", victim, e2eIntruder)
	}
	// The agent's client ID is its name plus a random suffix kept in its
	// state dir. The embedded broker refuses another identity even the
	// real ID; Mosquitto hands a client ID to whoever presents it, so
	// there the intruder tries what it can guess: the device name.
	victimID := victim
	if embedded {
		b, err := os.ReadFile(filepath.Join(va.StateDir, "v1", "client-id"))
		if err != nil {
			t.Fatalf("read %s's client id: %v", victim, err)
		}
		victimID = strings.TrimSpace(string(b))
	}
	if c, err := dialMQTT(t, f.BrokerURL, e2eIntruder, tok, dialOpts{clientID: victimID}); err == nil {
		// Mosquitto accepts it and closes any older connection with that
		// client ID: harmless only if that is not the victim's agent,
		// which the check of the victim's connection below tells.
		c.c.Disconnect(0)
		if embedded {
			t.Errorf("the embedded broker let %s connect with client ID %s", e2eIntruder, victimID)
		}
	}

	// The hub's view of the victim, its agent and its containers.
	after := f.AwaitConverged(t, e2eConverge, devs...)[victim]
	if after.Status.ObservedGeneration != before.Status.ObservedGeneration || after.Status.DesiredGeneration != before.Status.DesiredGeneration ||
		!after.Status.Online || podHashes(after) != podHashes(before) {
		t.Errorf("the hub's view of %s changed:\nbefore %+v\nafter  %+v", victim, before.Status, after.Status)
	}
	var evs struct{ Items []schema.Event }
	f.Get(t, "/v1/devices/"+victim+"/events", &evs)
	for _, e := range evs.Items {
		if e.Reason == "Forged" {
			t.Errorf("a forged event reached %s's events: %+v", victim, e)
		}
	}
	logs := va.Logs()[logMark:]
	if strings.Contains(logs, "mqtt connection lost") {
		t.Errorf("%s's agent was disconnected: %s's client with client ID %q took over its MQTT session "+
			"(Mosquitto hands a client ID to whoever presents it):\n%s", victim, e2eIntruder, victim, logs)
	}
	for _, bad := range []string{`msg="received desired state"`, "removing container"} {
		if strings.Contains(logs, bad) {
			t.Errorf("%s's agent logged %q:\n%s", victim, bad, logs)
		}
	}
	samePIDs(t, victim, pids, f.TaskPIDs(t, victim))
	if evs := f.eventsSince(victim, marks[victim]); len(evs) > 0 {
		t.Errorf("%s: containerd saw %s", victim, fmtEvents(evs))
	}
}

// e2eBadPayloads: garbage, oversized and stale payloads on every topic a
// device may publish to (its status, online and events), and duplicated or
// reordered QoS 1 deliveries, change nothing: the hub counts and ignores
// them and keeps the device's last good status, and the fleet's
// containers are untouched. On Mosquitto, where a network account can
// have the hub's rights, the same is done to a device's desired topic (a
// buggy or compromised publisher): the agent keeps running its last good
// state. (On the embedded broker only the hub, in-process, can publish
// there; the isolation scenario shows a device cannot.)
func e2eBadPayloads(t *testing.T, f *Fleet) {
	devs := f.Devices()
	tok := f.intruder(t)
	// Every agent runs a pod, at a desired generation above 1 (so that a
	// stale one exists).
	f.deleteOnCleanup(t, "e2e-steadfast")
	f.applyDeps(t, e2eDep{Name: "e2e-steadfast", Selector: map[string]string{"role": "sensor"}})
	f.applyDeps(t, e2eDep{Name: "e2e-steadfast"})
	f.AwaitRollout(t, "e2e-steadfast", 3, e2eConverge)
	f.AwaitConverged(t, e2eConverge, devs...)
	pids := f.TaskPIDs(t)
	marks := f.eventMarks()

	m := mustDialMQTT(t, f.BrokerURL, e2eIntruder, tok, dialOpts{})
	statusTopic := topics.Device(e2eIntruder, schema.TopicStatus)
	now := time.Now().UTC()
	good := deviceStatus(e2eIntruder, 5, now)
	m.mustPublish(statusTopic, true, good)
	m.mustPublish(topics.Device(e2eIntruder, schema.TopicOnline), true, []byte(schema.Online))
	base := f.AwaitDevices(t, 30*time.Second, "reporting generation 5", func(d schema.Device) bool {
		return d.Status != nil && d.Status.ObservedGeneration == 5 && d.Status.Online
	}, e2eIntruder)[e2eIntruder]

	malformed := func(kind string) float64 {
		return metric(t, f.Hub, fmt.Sprintf(`fleet_mqtt_malformed_payloads_total{topic_kind=%q}`, kind))
	}
	baseCounts := map[string]float64{}
	for _, k := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		baseCounts[k] = malformed(k)
	}

	// Duplicated and reordered deliveries: the same report again, then an
	// older one arriving late.
	m.mustPublish(statusTopic, true, good)
	m.mustPublish(statusTopic, true, deviceStatus(e2eIntruder, 4, now.Add(-time.Minute)))

	big := []byte(`{"apiVersion":"fleet/v1","kind":"DeviceStatus","device":"` + e2eIntruder + `","pad":"` + strings.Repeat("x", 100<<10) + `"}`)
	garbage := map[string][][]byte{
		schema.TopicStatus: {
			[]byte("\x00\xff\xfe garbage"), []byte("{"), []byte("null"), []byte("[]"), []byte(`"a string"`),
			[]byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000)),
			[]byte(`{"apiVersion":"fleet/v1","kind":"DeviceStatus","device":"` + e2eIntruder + `","observedGeneration":-3,"time":"2025-01-01T00:00:00Z","agent":{},"pods":[]}`),
			deviceStatus(devs[0], 99, now), // another device's report on this device's topic
			big,
		},
		schema.TopicOnline: {[]byte("maybe"), []byte("\xff\xfe"), []byte(strings.Repeat("online", 20000))},
		schema.TopicEvents: {
			[]byte("{"), []byte(`{"device":"` + e2eIntruder + `"}`),
			mustJSON(t, schema.Event{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
				Device: devs[0], Time: now, Type: schema.EventWarning, Reason: "Forged"}),
			big,
		},
	}
	for _, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		for _, p := range garbage[kind] {
			// Not retained: a retained bad payload would be counted again
			// by every hub that subscribes later.
			m.mustPublish(topics.Device(e2eIntruder, kind), false, p)
		}
	}
	// More than the broker's packet limit: the broker drops the client.
	// (A second connection with the same username: close the first, which
	// Mosquitto with one session per username would otherwise drop.)
	m.c.Disconnect(250)
	huge := mustDialMQTT(t, f.BrokerURL, e2eIntruder, tok, dialOpts{})
	_ = huge.publish(statusTopic, 1, false, bytes.Repeat([]byte("x"), 300<<10)) // refused either way
	huge.awaitLost(30 * time.Second)

	// Every bad payload was counted (so handled), in order after the
	// duplicate and the stale report.
	for kind, ps := range garbage {
		want := baseCounts[kind] + float64(len(ps))
		awaitf(t, 30*time.Second, func() bool { return malformed(kind) >= want }, "%s: %v malformed payloads counted, want %v", kind, malformed(kind), want)
	}
	got := f.Device(t, e2eIntruder)
	if !got.Status.Online || got.Status.Agent == nil || *got.Status.Agent != *base.Status.Agent || got.Status.DesiredGeneration != base.Status.DesiredGeneration {
		t.Errorf("%s's status after bad payloads: %+v; want the last good one: %+v", e2eIntruder, got.Status, base.Status)
	}
	if got.Status.ObservedGeneration != 5 {
		t.Errorf("%s: the hub shows observedGeneration %d: a report older than the last (generation 4, time a minute earlier), "+
			"delivered late, replaced the newer one (generation 5)", e2eIntruder, got.Status.ObservedGeneration)
	}
	var evs struct{ Items []schema.Event }
	f.Get(t, "/v1/devices/"+devs[0]+"/events", &evs)
	for _, e := range evs.Items {
		if e.Reason == "Forged" {
			t.Errorf("a forged event reached %s: %+v", devs[0], e)
		}
	}

	if f.Mosquitto != nil {
		e2eBadDesired(t, f, devs[0])
	}

	f.AwaitConverged(t, e2eConverge, devs...)
	samePIDs(t, "after bad payloads", pids, f.TaskPIDs(t))
	for _, d := range devs {
		if evs := f.eventsSince(d, marks[d]); len(evs) > 0 {
			t.Errorf("%s: containerd saw %s", d, fmtEvents(evs))
		}
	}
}

// e2eBadDesired publishes, with an account that has the hub's rights, bad
// desired states to device's topic (not retained, so the hub's retained
// state stays): garbage, a stale generation with no pods, one addressed
// to another device, a duplicate and a cleared topic. The agent logs each
// and keeps its containers. The agent has pinned the hub's signing key
// (hub/API.md, "Signed desired state"), so what the injector makes is
// refused for its signature before anything else: garbage is unsigned,
// and the edited states carry the genuine state's signature, which no
// longer verifies.
func e2eBadDesired(t *testing.T, f *Fleet, device string) {
	t.Helper()
	a := f.Agent(t, device)
	user, pass := f.InjectorMQTTAccount()
	h := mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{clientID: user})
	topic := topics.Device(device, schema.TopicDesired)
	h.subscribe(topic)
	current := h.await("the retained desired state", func(m mqttMsg) bool { return m.Topic == topic && m.Retained })
	var ds schema.DesiredState
	if err := json.Unmarshal(current.Payload, &ds); err != nil {
		t.Fatal(err)
	}
	stale := ds
	stale.Generation--
	stale.Pods = []schema.Pod{}
	other := ds
	other.Device = f.Devices()[1]
	other.Generation += 100
	other.Pods = []schema.Pod{}

	mark := a.LogMark()
	for _, step := range []struct {
		payload []byte
		log     string
	}{
		{[]byte("\x00garbage"), "refused an unsigned desired state"},
		{mustJSON(t, stale), "refused a desired state with a bad signature"},
		{mustJSON(t, other), "refused a desired state with a bad signature"},
		{current.Payload, `msg="desired state unchanged"`},
		{[]byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"` + device + `","generation":"many"}`), "refused an unsigned desired state"},
	} {
		h.mustPublish(topic, false, step.payload)
		a.AwaitLog(t, mark, step.log, 30*time.Second)
		mark = a.LogMark()
	}
	var evs struct{ Items []schema.Event }
	awaitf(t, 30*time.Second, func() bool {
		f.Get(t, "/v1/devices/"+device+"/events", &evs)
		for _, e := range evs.Items {
			if e.Reason == "DesiredStateUnsigned" {
				return true
			}
		}
		return false
	}, "%s: no DesiredStateUnsigned event at the hub", device)
	if logs := a.Logs()[mark:]; strings.Contains(logs, "removing container") {
		t.Errorf("%s removed containers after bad desired states:\n%s", device, logs)
	}
}

// deviceStatus is a valid DeviceStatus reported at time at.
func deviceStatus(device string, gen int64, at time.Time) []byte {
	b, _ := json.Marshal(schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   device, ObservedGeneration: gen, Time: at,
		Agent: schema.AgentInfo{Version: "e2e", OS: "linux", Arch: "arm64"},
		Pods:  []schema.PodStatus{},
	})
	return b
}

// podHashes summarises the pods a device reports.
func podHashes(d schema.Device) string {
	var b strings.Builder
	if d.Status != nil {
		for _, p := range d.Status.Pods {
			fmt.Fprintf(&b, "%s@%s:%s,%v;", p.Name, p.Hash, p.Phase, p.Ready)
		}
	}
	return b.String()
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
