package test

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/schema"
)

// TestE2EDeviceKeyStolenToken: a real hub and a real agent on containerd,
// whose pod uses a Secret. A thief holding the device's token (while the
// agent is away, then while it is connected, then after a hub restart)
// connects as the device and publishes a status carrying a key of its
// own. The hub refuses the key
// (fleet_hub_device_key_refused_total, a Warning DeviceKeyRefused event in
// `fleet describe device` and `fleet events`), and every desired state the
// thief reads afterwards, the re-sealings of new Secret values included,
// stays sealed to the device's real key: the thief's key opens none of
// them, the real agent's opens them and its container gets each value.
// Bad keys (malformed, over the payload limit, 1 MB) are refused without
// being stored. Then `fleet device rekey` and the agent's genuinely new
// key: its Secrets are sealed to the new key, once.
func TestE2EDeviceKeyStolenToken(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1})
	const dev, dep = "dev-1", "e2e-devkey"
	a := f.Agent(t, dev)
	manifest := func(v string) string {
		return `apiVersion: fleet/v1
kind: Secret
metadata: {name: e2e-devkey-creds}
stringData: {token: ` + v + `}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: ` + dep + `}
spec:
  selector: {matchLabels: {fleet/device: ` + dev + `}}
  template:
    spec:
      containers:
      - name: app
        image: ` + f.Image + `
        args: [sleep, forever]
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: e2e-devkey-creds, key: token}}
`
	}
	awaitValue := func(v string) {
		t.Helper()
		f.AwaitContainers(t, dev, e2eConverge, "running with TOKEN="+v, func(cs []Container) bool {
			for _, c := range cs {
				if c.Pod == dep && c.PID != 0 && environ(t, c.PID)["TOKEN"] == v {
					return true
				}
			}
			return false
		})
	}
	value := "e2e-" + randomHex(t, 12)
	f.Apply(t, manifest(value))
	f.AwaitRollout(t, dep, 1, e2eConverge)
	awaitValue(value)
	realKey := agentKey(t, a)

	// The thief: the device's own name and token, a key of its own.
	thief := mustDialMQTT(t, f.BrokerURL, dev, f.Token(dev), dialOpts{})
	desiredTopic := topics.Device(dev, schema.TopicDesired)
	thief.subscribe(desiredTopic)
	ds := thief.awaitDesired(dev, func(ds schema.DesiredState) bool { return len(ds.Secrets) == 1 })
	checkSealed(t, "before the theft", ds, realKey, value)
	refused := 0.0
	steal := func(when string) {
		t.Helper()
		key := newThiefKey(t)
		mark := len(thief.received())
		thief.mustPublish(topics.Device(dev, schema.TopicStatus), false, thiefStatus(t, dev, ds, key.PublicKey()))
		refused++
		awaitf(t, mqttWait, func() bool { return metric(t, f.Hub, "fleet_hub_device_key_refused_total") >= refused },
			"%s: fleet_hub_device_key_refused_total did not reach %v", when, refused)
		// A new value: the hub seals it again, after the thief's status,
		// to the device's real key.
		value += "-x"
		f.Apply(t, manifest(value))
		next := awaitDesiredSince(t, thief, mark, func(d schema.DesiredState) bool {
			return len(d.Secrets) == 1 && d.Secrets[0].Version != ds.Secrets[0].Version
		})
		checkSealed(t, when, next, realKey, value)
		if _, err := key.Open(next.Secrets[0].Data["token"]); err == nil {
			t.Errorf("%s: the thief's key opens the Secret", when)
		}
		ds = next
	}

	// 1. While the agent is away.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	steal("agent away")
	a.Start(t)
	awaitValue(value)
	// 2. While the agent is connected.
	steal("agent connected")
	awaitValue(value)
	for _, out := range []string{f.CLI(t, "describe", "device", dev), f.CLI(t, "events", "--for", "device/"+dev, "--types", "Warning")} {
		if !strings.Contains(out, "DeviceKeyRefused") {
			t.Errorf("no DeviceKeyRefused event:\n%s", out)
		}
	}
	if out := f.CLI(t, "events", "--for", "device/"+dev, "-o", "json"); !strings.Contains(out, "fleet device rekey "+dev) {
		t.Errorf("the DeviceKeyRefused event does not name the way out:\n%s", out)
	}
	for _, m := range thief.received() {
		var d schema.DesiredState
		if m.Topic == desiredTopic && json.Unmarshal(m.Payload, &d) == nil {
			for _, s := range d.Secrets {
				if s.KeyID != realKey.ID() {
					t.Errorf("generation %d: Secret sealed to key %s, not the device's %s", d.Generation, s.KeyID, realKey.ID())
				}
			}
		}
	}

	// 3. The binding is in the store: after a hub restart the thief's key
	// is refused as before (the counter starts again at zero).
	f.RestartHub(t)
	thief = mustDialMQTT(t, f.BrokerURL, dev, f.Token(dev), dialOpts{})
	thief.subscribe(desiredTopic)
	ds = awaitDesiredSince(t, thief, 0, func(d schema.DesiredState) bool { return len(d.Secrets) == 1 && d.Generation >= ds.Generation })
	refused = 0
	steal("after a hub restart")
	awaitValue(value)

	badKeys(t, f, dev, ds)
	if n := metric(t, f.Hub, "fleet_hub_device_key_refused_total"); n != refused {
		t.Errorf("fleet_hub_device_key_refused_total = %v after the bad keys, want %v (they are malformed, not refused keys)", n, refused)
	}

	// 4. fleet device rekey, and a real new key: the agent's state lost
	// its device.key and the agent makes another.
	mark := len(thief.received())
	out := f.CLI(t, "device", "rekey", dev)
	if !strings.Contains(out, "device/"+dev+" rekeyed") || !strings.Contains(out, realKey.ID()) {
		t.Errorf("fleet device rekey: %s", out)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(a.StateDir, devicekey.FileName)); err != nil {
		t.Fatal(err)
	}
	a.Start(t)
	newKey := awaitAgentKey(t, a, realKey.PublicKey())
	next := awaitDesiredSince(t, thief, mark, func(d schema.DesiredState) bool {
		return len(d.Secrets) == 1 && d.Secrets[0].KeyID == newKey.ID()
	})
	checkSealed(t, "after the rekey", next, newKey, value)
	awaitValue(value)
	f.AwaitDevices(t, e2eConverge, "converged on the new key", Converged, dev)
	if reasons := strings.Join(eventReasons(t, f, dev), ","); !strings.Contains(reasons, "DeviceKeyRebound") {
		t.Errorf("no DeviceKeyRebound event: %s", reasons)
	}
	// Once: the thief's next key is refused again.
	ds = next
	realKey = newKey
	steal("after the rekey")
}

// badKeys: statuses with a malformed key, a key past the hub's payload
// limit and a 1 MB key are refused, counted as malformed, never stored;
// the hub keeps running and the device's status is untouched.
func badKeys(t *testing.T, f *Fleet, dev string, ds schema.DesiredState) {
	t.Helper()
	malformed := `fleet_mqtt_malformed_payloads_total{topic_kind="status"}`
	before := metric(t, f.Hub, malformed)
	mark := len(f.Hub.Logs())
	c := mustDialMQTT(t, f.BrokerURL, dev, f.Token(dev), dialOpts{})
	big := strings.Repeat("A", 1<<20)
	for _, k := range []string{"not-a-key!", big[:200<<10]} {
		c.mustPublish(topics.Device(dev, schema.TopicStatus), false, thiefStatus(t, dev, ds, k))
	}
	awaitf(t, mqttWait, func() bool { return metric(t, f.Hub, malformed) >= before+2 },
		"the malformed and oversized keys were not counted as malformed statuses")
	if logs := f.Hub.Logs()[mark:]; !strings.Contains(logs, "publicKey") {
		t.Errorf("the hub's log does not name the publicKey field:\n%s", logs)
	}
	// 1 MB: past the broker's packet limit, the connection is closed.
	// The status really is that big, and it reached the broker: the
	// broker cut the client off for the packet's size.
	tooLarge := `fleet_mqtt_clients_cut_off_total{reason="packet_too_large"}`
	cutBefore := metric(t, f.Hub, tooLarge)
	hugeStatus := thiefStatus(t, dev, ds, big)
	if len(hugeStatus) < 1<<20 {
		t.Fatalf("the 1 MB key's status is %d bytes", len(hugeStatus))
	}
	huge := mustDialMQTT(t, f.BrokerURL, dev, f.Token(dev), dialOpts{})
	_ = huge.publish(topics.Device(dev, schema.TopicStatus), 0, false, hugeStatus)
	huge.awaitLost(mqttWait)
	awaitf(t, mqttWait, func() bool { return metric(t, f.Hub, tooLarge) >= cutBefore+1 },
		"the broker counted no client cut off for a packet too large: the 1 MB status never reached it")
	var d schema.Device
	f.Get(t, "/v1/devices/"+dev, &d)
	raw, _ := json.Marshal(d)
	if strings.Contains(string(raw), "not-a-key") || strings.Contains(string(raw), big[:1024]) {
		t.Errorf("the device's status holds a bad key: %.300s", raw)
	}
	if !f.Hub.running() {
		t.Fatal("the hub stopped")
	}
}

// awaitDesiredSince waits for a desired state of c's device, received
// after the first mark messages, that satisfies pred.
func awaitDesiredSince(t *testing.T, c *mqttClient, mark int, pred func(schema.DesiredState) bool) schema.DesiredState {
	t.Helper()
	deadline := time.NewTimer(e2eConverge)
	defer deadline.Stop()
	for {
		msgs := c.received()
		for _, m := range msgs[mark:] {
			var d schema.DesiredState
			if m.Topic == topics.Device(c.name, schema.TopicDesired) && json.Unmarshal(m.Payload, &d) == nil && pred(d) {
				return d
			}
		}
		mark = len(msgs)
		select {
		case <-c.wake:
		case <-deadline.C:
			t.Fatalf("%s: no such desired state within %v", c.name, e2eConverge)
		}
	}
}

// checkSealed: ds carries the Secret sealed to key, which opens it to v.
func checkSealed(t *testing.T, when string, ds schema.DesiredState, key *devicekey.Key, v string) {
	t.Helper()
	if len(ds.Secrets) != 1 {
		t.Fatalf("%s: generation %d carries %d Secrets", when, ds.Generation, len(ds.Secrets))
	}
	s := ds.Secrets[0]
	if s.KeyID != key.ID() {
		t.Errorf("%s: generation %d sealed to key %s, not the device's %s", when, ds.Generation, s.KeyID, key.ID())
	}
	got, err := key.Open(s.Data["token"])
	if err != nil || string(got) != v {
		t.Errorf("%s: the device's key opens the Secret to %q, %v; want %q", when, got, err, v)
	}
}

// agentKey reads the agent's device key from its state directory.
func agentKey(t *testing.T, a *Agent) *devicekey.Key {
	t.Helper()
	if _, err := os.Stat(filepath.Join(a.StateDir, devicekey.FileName)); err != nil {
		t.Fatalf("the agent has no device key: %v", err)
	}
	k, err := devicekey.LoadOrCreate(a.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// awaitAgentKey waits for the agent to have written a key other than old.
func awaitAgentKey(t *testing.T, a *Agent, old string) *devicekey.Key {
	t.Helper()
	var k *devicekey.Key
	awaitf(t, e2eConverge, func() bool {
		b, err := os.ReadFile(filepath.Join(a.StateDir, devicekey.FileName))
		if err != nil || len(b) == 0 {
			return false
		}
		k = agentKey(t, a)
		return k.PublicKey() != old
	}, "the agent made no new device key")
	return k
}

func newThiefKey(t *testing.T) *devicekey.Key {
	t.Helper()
	k, err := devicekey.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// thiefStatus is a status for the device at ds's generation, all pods
// running, carrying key.
func thiefStatus(t *testing.T, dev string, ds schema.DesiredState, key string) []byte {
	t.Helper()
	return mustJSON(t, schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   dev, ObservedGeneration: ds.Generation, Store: ds.Store, Time: time.Now().UTC(),
		Agent:     schema.AgentInfo{Version: "thief", OS: "linux", Arch: "arm64"},
		PublicKey: key, Pods: runningPods(ds),
	})
}
