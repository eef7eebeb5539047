package test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/hub/homeassistant/hatest"
	"github.com/fleetmq/fleet/schema"
)

// haPrefix is Home Assistant's default discovery prefix.
const haPrefix = "homeassistant"

// TestE2EHomeAssistant: a real fleet-hub run with --homeassistant-discovery
// and real agents on containerd, seen as Home Assistant sees it: a client
// with a monitor credential subscribed to homeassistant/# (and to the
// status and online topics the configs point at).
//
//   - Every config passes Home Assistant's documented schema rules
//     (hatest.Check), its availability is the device's online topic, its
//     state topic the device's own status (or online) topic, its device
//     block names the device and its agent version, and its
//     value_template renders, against the status payload the agent really
//     published, to what the API says of the device.
//   - No payload holds a token.
//   - unique_ids are the same after a hub restart.
//   - A stopped agent's last will (offline) is the availability payload
//     that makes every entity of its device unavailable.
//   - A device added later gets its configs; deleting a device clears
//     every one of its configs (empty retained payloads), live and for a
//     new subscriber.
//
// It runs on the embedded broker and on Mosquitto (the ACL the hub
// renders must let the hub write and the monitor read homeassistant/#).
func TestE2EHomeAssistant(t *testing.T) {
	for _, kind := range []string{BrokerEmbedded, BrokerMosquitto} {
		t.Run(kind, func(t *testing.T) { testHomeAssistant(t, kind) })
	}
}

func testHomeAssistant(t *testing.T, kind string) {
	f := StartFleet(t, FleetOptions{Agents: 2, Broker: kind, DevicePrefix: "ha-" + kind[:3],
		Labels: func(int) map[string]string { return e2eAgents }, HubArgs: []string{"--homeassistant-discovery"}})
	devs := f.Devices()
	const dep = "e2e-ha"
	// No deleteOnCleanup: one device is deleted below, so its agent never
	// hears of the deployment's removal; the containerd harness removes
	// every container at the end.
	f.applyDeps(t, e2eDep{Name: dep})
	f.AwaitRollout(t, dep, len(devs), e2eConverge)
	f.AwaitDevices(t, e2eConverge, "pod ready in the status", podReported(dep, func(p schema.PodStatus) bool { return p.Ready }), devs...)

	monToken := addMonitor(t, f.Hub, "home-assistant")
	f.SyncMosquittoAccounts(t)
	ha := newHAView(t, f, monToken)

	want := []string{"online", "pods_running", "pods_desired", "converged", "restarts", "memory_available", "disk_free"}
	uids := map[string][]string{}
	for _, dev := range devs {
		configs := ha.awaitConfigs(dev, want)
		uids[dev] = checkHAConfigs(t, f, ha, dev, configs, map[string]string{
			"pods_running": "1", "pods_desired": "1", "converged": "True", "restarts": "0",
		}, monToken)
	}

	// A hub restart publishes the same unique_ids.
	f.RestartHub(t)
	ha = newHAView(t, f, monToken)
	for _, dev := range devs {
		configs := ha.awaitConfigs(dev, want)
		var got []string
		for _, c := range configs {
			got = append(got, c.String("unique_id"))
		}
		slices.Sort(got)
		if !slices.Equal(got, uids[dev]) {
			t.Errorf("%s: unique_ids after the hub restart %v, before %v", dev, got, uids[dev])
		}
	}

	// A device added later (no agent yet: no figures) gets its configs.
	late := "ha-late-" + kind[:3]
	f.AddDevice(t, late, nil)
	lateConfigs := ha.awaitConfigs(late, want[:5])
	checkHAConfigs(t, f, ha, late, lateConfigs, nil, monToken)

	// Deleting devices clears every config of theirs, as Home Assistant
	// sees it live and as a new subscriber finds it.
	gone := []string{late, devs[1]}
	for _, dev := range gone {
		f.CLI(t, "delete", "device", dev)
	}
	for _, dev := range gone {
		ha.awaitCleared(dev)
	}
	// An agent that stops makes its entities unavailable: its last will
	// on the online topic is every config's payload_not_available.
	f.KillAgent(t, devs[0])
	offline := topics.Device(devs[0], schema.TopicOnline)
	ha.await(devs[0]+" offline", func() bool {
		ha.mu.Lock()
		defer ha.mu.Unlock()
		return string(ha.latest[offline]) == schema.Offline
	})
	for _, c := range ha.configs(devs[0]) {
		avail := c.Payload["availability"].([]any)[0].(map[string]any)
		if avail["topic"] != offline || avail["payload_not_available"] != schema.Offline {
			t.Errorf("%s: availability %v does not make it unavailable now", c.ObjectID, avail)
		}
	}

	fresh := newHAView(t, f, monToken)
	fresh.awaitConfigs(devs[0], want) // the retained set is there…
	for _, dev := range gone {        // …without the deleted devices'
		if held := fresh.configs(dev); len(held) != 0 {
			t.Errorf("a new subscriber still gets %d configs of deleted device %s", len(held), dev)
		}
	}
}

// checkHAConfigs checks one device's configs against the schema rules,
// its real status payload and the API's view, and returns their sorted
// unique_ids. values are the renders expected of the status-based
// entities (nil: no status yet, nothing to render).
func checkHAConfigs(t *testing.T, f *Fleet, ha *haView, dev string, configs []hatest.Config, values map[string]string, secrets ...string) []string {
	t.Helper()
	d := f.Device(t, dev)
	online := topics.Device(dev, schema.TopicOnline)
	status := topics.Device(dev, schema.TopicStatus)
	var statusPayload []byte
	if values != nil {
		statusPayload = ha.awaitRetained(status)
	}
	var st schema.DeviceStatus
	if statusPayload != nil {
		if err := json.Unmarshal(statusPayload, &st); err != nil {
			t.Fatalf("%s: status payload: %v", dev, err)
		}
	}
	secrets = append(secrets, f.Token(dev), f.Hub.Token)
	var uids []string
	for _, c := range configs {
		where := dev + " " + c.Component + "/" + c.ObjectID
		uids = append(uids, c.String("unique_id"))
		if want := "fleet_" + d.Metadata.UID + "_" + c.ObjectID; c.String("unique_id") != want {
			t.Errorf("%s: unique_id %q, want %q (from the device's uid)", where, c.String("unique_id"), want)
		}
		if av := c.AvailabilityTopics(); len(av) != 1 || av[0] != online {
			t.Errorf("%s: availability topics %v, want [%s]", where, av, online)
		}
		avail := c.Payload["availability"].([]any)[0].(map[string]any)
		if avail["payload_available"] != schema.Online || avail["payload_not_available"] != schema.Offline {
			t.Errorf("%s: availability payloads %v", where, avail)
		}
		dv := c.Payload["device"].(map[string]any)
		if dv["name"] != dev || dv["manufacturer"] != "Fleet" || !slices.Equal(anyStrings(dv["identifiers"]), []string{"fleet_" + d.Metadata.UID}) {
			t.Errorf("%s: device block %v", where, dv)
		}
		if statusPayload != nil && dv["sw_version"] != st.Agent.Version {
			t.Errorf("%s: sw_version %v, the agent reports %q", where, dv["sw_version"], st.Agent.Version)
		}
		raw, _ := json.Marshal(c.Payload)
		for _, s := range secrets {
			if s != "" && bytes.Contains(raw, []byte(s)) {
				t.Errorf("%s: the payload carries a token", where)
			}
		}
		if c.ObjectID == "online" {
			if c.String("state_topic") != online || c.String("payload_on") != schema.Online || c.String("payload_off") != schema.Offline || c.String("device_class") != "connectivity" {
				t.Errorf("%s: %s", where, raw)
			}
			continue
		}
		if c.String("state_topic") != status {
			t.Errorf("%s: state_topic %q, want the device's status topic %s", where, c.String("state_topic"), status)
		}
		if statusPayload == nil {
			continue
		}
		got, err := hatest.Render(c.String("value_template"), statusPayload)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		want, ok := values[c.ObjectID]
		switch c.ObjectID {
		case "memory_available":
			want, ok = uintString(st.Node.MemoryAvailBytes), true
		case "disk_free":
			want, ok = uintString(st.Node.DiskFreeBytes), true
		}
		if ok && got != want {
			t.Errorf("%s: %s renders %q against the real status, want %q", where, c.String("value_template"), got, want)
		}
		if on := c.String("payload_on"); on != "" && got != on && got != c.String("payload_off") {
			t.Errorf("%s: renders %q: neither payload_on %q nor payload_off", where, got, on)
		}
	}
	if values != nil {
		// The connectivity sensor's state is on: payload_on.
		if got := ha.awaitRetained(online); string(got) != schema.Online {
			t.Errorf("%s: online topic %q", dev, got)
		}
	}
	slices.Sort(uids)
	return uids
}

func anyStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

func uintString(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// haView is what a Home Assistant sees: the latest retained payload of
// every discovery, status and online topic.
type haView struct {
	t          *testing.T
	cl         *mqttClient
	subscribed map[string]bool
	mu         sync.Mutex
	latest     map[string][]byte
	wake       chan struct{}
}

// subscribe makes one SUBSCRIBE, as Home Assistant makes one per topic
// (at worst), and fails on a refusal.
func (v *haView) subscribe(filter string, qos byte) {
	v.t.Helper()
	if v.subscribed[filter] {
		return
	}
	tok := v.cl.c.Subscribe(filter, qos, nil)
	if !tok.WaitTimeout(mqttWait) || tok.Error() != nil {
		v.t.Fatalf("monitor subscribe %s: %v", filter, tok.Error())
	}
	if code := tok.(*paho.SubscribeToken).Result()[filter]; code > 2 {
		v.t.Fatalf("monitor subscribe %s: refused (%#x)", filter, code)
	}
	v.subscribed[filter] = true
}

// follow subscribes to the state and availability topics of configs at
// their qos, as Home Assistant does once it has read them.
func (v *haView) follow(configs []hatest.Config) {
	v.t.Helper()
	for _, c := range configs {
		qos, _ := c.Payload["qos"].(float64)
		v.subscribe(c.String("state_topic"), byte(qos))
		for _, a := range c.AvailabilityTopics() {
			v.subscribe(a, byte(qos))
		}
	}
}

// newHAView connects with the monitor credential and subscribes as Home
// Assistant does.
func newHAView(t *testing.T, f *Fleet, token string) *haView {
	t.Helper()
	v := &haView{t: t, latest: map[string][]byte{}, wake: make(chan struct{}, 1)}
	cl := mustDialMQTT(t, f.BrokerURL, "home-assistant", token, dialOpts{})
	cl.mu.Lock()
	cl.onMsg = func(m mqttMsg) {
		v.mu.Lock()
		v.latest[m.Topic] = m.Payload
		v.mu.Unlock()
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	cl.mu.Unlock()
	// As Home Assistant does: the discovery topics first, then each
	// entity's state and availability topics as configs arrive (follow).
	v.cl = cl
	v.subscribed = map[string]bool{}
	v.subscribe(haPrefix+"/#", 0)
	return v
}

// configs returns the device's current configs (non-empty retained
// payloads under its node_id), checked against the schema rules.
func (v *haView) configs(dev string) []hatest.Config {
	v.t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []hatest.Config
	for topic, payload := range v.latest {
		if !strings.HasPrefix(topic, haPrefix+"/") || !strings.Contains(topic, "/fleet_"+dev+"/") || len(payload) == 0 {
			continue
		}
		c, err := hatest.Check(haPrefix, topic, payload)
		if err != nil {
			v.t.Fatalf("Home Assistant would refuse: %v\n%s", err, payload)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b hatest.Config) int { return strings.Compare(a.ObjectID, b.ObjectID) })
	return out
}

// await polls cond on every message, within e2eConverge.
func (v *haView) await(what string, cond func() bool) {
	v.t.Helper()
	deadline := time.NewTimer(e2eConverge)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-v.wake:
		case <-deadline.C:
			v.t.Fatalf("not within %v: %s", e2eConverge, what)
		}
	}
}

// awaitConfigs waits until the device's configs are exactly the entities
// want, and returns them.
func (v *haView) awaitConfigs(dev string, want []string) []hatest.Config {
	v.t.Helper()
	sorted := slices.Sorted(slices.Values(want))
	var got []hatest.Config
	v.await("configs "+strings.Join(sorted, ",")+" of "+dev, func() bool {
		got = v.configs(dev)
		ids := make([]string, len(got))
		for i, c := range got {
			ids[i] = c.ObjectID
		}
		return slices.Equal(ids, sorted)
	})
	v.follow(got)
	return got
}

// awaitCleared waits until every config of the device the view saw has
// an empty retained payload.
func (v *haView) awaitCleared(dev string) {
	v.t.Helper()
	v.await("configs of "+dev+" cleared", func() bool { return len(v.configs(dev)) == 0 })
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for topic, payload := range v.latest {
		if strings.Contains(topic, "/fleet_"+dev+"/") && len(payload) == 0 {
			n++
		}
	}
	if n == 0 {
		v.t.Errorf("%s: no empty retained payload seen", dev)
	}
}

// awaitRetained waits for a payload on topic and returns the latest.
func (v *haView) awaitRetained(topic string) []byte {
	v.t.Helper()
	var p []byte
	v.await("a message on "+topic, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		var ok bool
		p, ok = v.latest[topic]
		return ok
	})
	return p
}
