package test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2ESignedDesiredState: on an external Mosquitto, a client with
// publish rights on a device's desired topic (a rogue publisher; the
// harness's injector account) publishes a forged desired state (valid
// JSON, a higher generation, another pod; unsigned, then with a signature
// that does not match) and replays a genuine earlier state it captured
// from the topic (lower generation, validly signed), and a state signed
// with the hub's key for another store (the generation floor survives a
// new store under the same key: a store recreated or left, captured; the
// test signs it with the hub's key from its data directory, as the hub
// did). The device runs none
// of them: its container keeps running with the same PID, it says why in
// its status message and events (read through the hub's API), and it
// applies the next genuine apply.
func TestE2ESignedDesiredState(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, Broker: BrokerMosquitto, DevicePrefix: "sig", Labels: e2eLabels})
	dev := f.Devices()[0]
	var info schema.HubInfo
	f.Get(t, "/v1/info", &info)
	hubKey, err := schema.ParseSigningKey(info.SigningKey)
	if err != nil || info.SigningKeyID != schema.SigningKeyID(hubKey) {
		t.Fatalf("GET /v1/info: signing key %q (id %q): %v", info.SigningKey, info.SigningKeyID, err)
	}

	dep := func(v string) e2eDep { return e2eDep{Name: "e2e-signed", Env: map[string]string{"V": v}} }
	f.applyDeps(t, dep("1"))
	f.AwaitContainerRunning(t, dev, "e2e-signed", f.PodHash(t, "e2e-signed"))

	// The rogue captures the genuine state from the topic.
	user, pass := f.InjectorMQTTAccount()
	rogue := mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{clientID: user})
	topic := topics.Device(dev, schema.TopicDesired)
	rogue.subscribe(topic)
	captured := rogue.await("the retained desired state", func(m mqttMsg) bool { return m.Topic == topic && m.Retained }).Payload
	if _, _, err := schema.VerifyDesiredState(captured, hubKey); err != nil {
		t.Fatalf("the hub's retained desired state does not verify with the key of /v1/info: %v\n%s", err, captured)
	}
	var genuine schema.DesiredState
	if err := json.Unmarshal(captured, &genuine); err != nil {
		t.Fatal(err)
	}

	// A newer genuine apply: the captured state is now an old one.
	f.applyDeps(t, dep("2"))
	hash := f.PodHash(t, "e2e-signed")
	f.AwaitContainerRunning(t, dev, "e2e-signed", hash)
	f.AwaitConverged(t, e2eConverge, dev)
	pids := f.TaskPIDs(t, dev)
	marks := f.eventMarks()
	a := f.Agent(t, dev)

	forged := genuine
	forged.Generation += 100
	forged.Pods = []schema.Pod{{Name: "evil", Spec: genuine.Pods[0].Spec}}
	forged.Pods[0].Spec.Containers = []schema.Container{{Name: "app", Image: f.Image, Args: []string{"sleep", "666"}}}
	forged.Signature = nil
	unsigned := mustJSON(t, forged)
	forged.Signature = genuine.Signature // a real signature, over other bytes
	badSig := mustJSON(t, forged)
	// A state the hub signed with the same key for another store (one
	// recreated, or left), captured: its generation is not above the
	// device's. Signed here with the hub's own key, read from its data
	// directory, as a captured one would be.
	otherStore := forged
	otherStore.Signature, otherStore.Store = nil, "recreated-"+genuine.Store
	otherStore.Generation = f.Device(t, dev).Status.ObservedGeneration
	storeReplay, err := schema.SignDesiredState(mustJSON(t, otherStore), readHubSigningKey(t, f.Hub.DataDir), nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, step := range []struct {
		name     string
		payload  []byte
		retained bool
		reason   string
		message  string
	}{
		{"forged, unsigned", unsigned, false, "DesiredStateUnsigned", "refused an unsigned desired state"},
		// Retained, as a rogue would to outlast the hub's state.
		{"forged, bad signature", badSig, true, "DesiredStateBadSignature", "refused a desired state with a bad signature"},
		{"replayed genuine state", captured, true, "DesiredStateReplayed",
			"refused a replayed desired state: generation " + strconv.FormatInt(genuine.Generation, 10)},
		// The generation floor survives a new store under the same key.
		{"another store's state, same key", storeReplay, true, "DesiredStateReplayed",
			"refused a replayed desired state: generation " + strconv.FormatInt(otherStore.Generation, 10) + " of store " + otherStore.Store + " is not above"},
	} {
		mark := a.LogMark()
		rogue.mustPublish(topic, step.retained, step.payload)
		runsEvil := func() bool {
			for _, c := range f.Containers(t, dev) {
				if c.Pod == "evil" {
					return true
				}
			}
			return false
		}
		awaitf(t, 30*time.Second, func() bool { return strings.Contains(a.Logs()[mark:], step.message) || runsEvil() },
			"%s: the device neither refused nor ran it", step.name)
		if runsEvil() {
			t.Fatalf("%s: the device runs the rogue's pod evil", step.name)
		}
		a.AwaitLog(t, mark, step.message, 30*time.Second)
		awaitf(t, 30*time.Second, func() bool {
			d := f.Device(t, dev)
			return d.Status != nil && strings.Contains(d.Status.Message, step.message)
		}, "%s: the hub does not show the device's status message %q", step.name, step.message)
		awaitf(t, 30*time.Second, func() bool {
			return slices.Contains(eventReasons(t, f, dev), step.reason)
		}, "%s: no %s event at the hub", step.name, step.reason)
	}
	// What an operator sees.
	if out := f.CLI(t, "describe", "device", dev); !strings.Contains(out, "Message:") || !strings.Contains(out, "refused a replayed desired state") ||
		!strings.Contains(out, "DesiredStateBadSignature") {
		t.Errorf("fleet describe device %s does not say why:\n%s", dev, out)
	}
	samePIDs(t, "after the forged and replayed states", pids, f.TaskPIDs(t, dev))
	if evs := f.eventsSince(dev, marks[dev]); len(evs) > 0 {
		t.Errorf("containerd saw %s", fmtEvents(evs))
	}
	if d := f.Device(t, dev); d.Status.ObservedGeneration != d.Status.DesiredGeneration {
		t.Errorf("the device reports generation %d, the hub's is %d", d.Status.ObservedGeneration, d.Status.DesiredGeneration)
	}

	// The next genuine apply runs, and clears the refusal.
	f.applyDeps(t, dep("3"))
	f.AwaitContainerRunning(t, dev, "e2e-signed", f.PodHash(t, "e2e-signed"))
	f.AwaitDevices(t, e2eConverge, "converged, with no refusal left", func(d schema.Device) bool {
		return Converged(d) && d.Status.Message == ""
	}, dev)
}

// eventReasons lists the reasons of the device's events the hub holds.
func eventReasons(t *testing.T, f *Fleet, device string) []string {
	t.Helper()
	var evs struct{ Items []schema.Event }
	f.Get(t, "/v1/devices/"+device+"/events", &evs)
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	return out
}
