package hub

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/schema"
)

func hubSigningKey(t *testing.T, h *testHub) (ed25519.PublicKey, string) {
	t.Helper()
	code, b := h.do(t, h.token, "GET", "/v1/info", "")
	var info schema.HubInfo
	if err := json.Unmarshal(b, &info); code != 200 || err != nil {
		t.Fatalf("info: %d %s %v", code, b, err)
	}
	key, err := schema.ParseSigningKey(info.SigningKey)
	if err != nil || info.SigningKeyID != schema.SigningKeyID(key) {
		t.Fatalf("info signing key %q id %q: %v", info.SigningKey, info.SigningKeyID, err)
	}
	return key, info.SigningKeyID
}

// desiredPayloads subscribes as device pi and returns its desired-state
// payloads as they come.
func desiredPayloads(t *testing.T, h *testHub) <-chan []byte {
	t.Helper()
	_, b := h.do(t, h.token, "POST", "/v1/devices/pi/token", "")
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(b, &cred); err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 64)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.Info().MQTTURL).SetClientID("pi").SetUsername("pi").SetPassword(cred.Token).
		SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	tok := c.Subscribe(schema.Topics{}.Device("pi", schema.TopicDesired), 1, func(_ paho.Client, m paho.Message) {
		out <- append([]byte(nil), m.Payload()...)
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return out
}

// nextSigned waits for a payload signed by key and returns its signature.
func nextSigned(t *testing.T, payloads <-chan []byte, key ed25519.PublicKey) *schema.DesiredStateSignature {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case p := <-payloads:
			if _, sig, err := schema.VerifyDesiredState(p, key); err == nil {
				return sig
			}
		case <-timeout:
			t.Fatalf("no desired state signed by key %s", schema.SigningKeyID(key))
		}
	}
}

// TestHubSignsDesiredStates: the hub makes its key on first start (0600),
// shows it in /v1/info and the enrollment answer, signs every desired
// state it publishes, and rotates (online through the API, offline with
// RotateSigningKey) to a new key endorsed by the old one, republishing
// every state.
func TestHubSignsDesiredStates(t *testing.T) {
	dir := t.TempDir()
	h := startHub(t, Options{DataDir: dir})
	fi, err := os.Stat(filepath.Join(dir, pki.SigningKeyName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key file: %v %v", fi, err)
	}
	k1, _ := hubSigningKey(t, h)

	if code, b := h.do(t, h.token, "POST", "/v1/apply", `apiVersion: fleet/v1
kind: Device
metadata: {name: pi, labels: {role: web}}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {role: web}}
  template: {spec: {containers: [{name: web, image: nginx:1}]}}
`); code != 200 {
		t.Fatalf("apply: %d %s", code, b)
	}
	payloads := desiredPayloads(t, h)
	if sig := nextSigned(t, payloads, k1); sig.Endorsement != "" {
		t.Fatalf("endorsement before any rotation: %+v", sig)
	}

	// The enrollment answer carries the key. Over plain MQTT the agent
	// pins it only when it is the key it was given (its join string):
	// with none, an answer over an unverified connection pins nothing.
	bt := createBootstrapToken(t, h, `{}`)
	stateDir := t.TempDir()
	if _, err := enroll.Enroll(t.Context(), enroll.Options{
		Broker: h.Info().MQTTURL, BootstrapToken: bt.Token, Device: "pi-2", StateDir: stateDir, Timeout: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	if p, err := trust.Load(stateDir); err != nil || p.Key() != nil {
		t.Fatalf("pinned at a plain enrollment with no key given: %v %v", p.Key(), err)
	}
	bt = createBootstrapToken(t, h, `{}`)
	stateDir = t.TempDir()
	if _, err := enroll.Enroll(t.Context(), enroll.Options{
		Broker: h.Info().MQTTURL, BootstrapToken: bt.Token, Device: "pi-3", StateDir: stateDir, Timeout: 10 * time.Second,
		SigningKey: k1,
	}); err != nil {
		t.Fatal(err)
	}
	if p, err := trust.Load(stateDir); err != nil || !p.Key().Equal(k1) {
		t.Fatalf("pinned at enrollment with the key given: %v %v", p.Key(), err)
	}

	// Offline rotation needs the hub stopped.
	if _, _, err := RotateSigningKey(dir); err == nil {
		t.Fatal("rotated the signing key of a running hub's data dir")
	}
	// Online: the API rotates and republishes at once.
	if code, b := h.do(t, h.token, "POST", "/v1/signing-key/rotate", ""); code != 200 || !strings.Contains(string(b), `"signingKeyId"`) {
		t.Fatalf("rotate: %d %s", code, b)
	}
	k2, _ := hubSigningKey(t, h)
	if k2.Equal(k1) {
		t.Fatal("the key did not change")
	}
	sig := nextSigned(t, payloads, k2)
	if err := sig.VerifyEndorsement(k1, k2); err != nil {
		t.Fatalf("endorsement: %v", err)
	}
	h.stopForTest(t)

	// Offline: the next start signs with the new key, endorsed by k2,
	// and republishes.
	oldID, newID, err := RotateSigningKey(dir)
	if err != nil || oldID != schema.SigningKeyID(k2) || newID == oldID {
		t.Fatalf("offline rotation: %s -> %s, %v", oldID, newID, err)
	}
	h = startHub(t, Options{DataDir: dir})
	k3, id3 := hubSigningKey(t, h)
	if id3 != newID {
		t.Fatalf("hub signs with %s, rotated to %s", id3, newID)
	}
	sig = nextSigned(t, desiredPayloads(t, h), k3)
	if err := sig.VerifyEndorsement(k2, k3); err != nil {
		t.Fatalf("endorsement after the offline rotation: %v", err)
	}
	if strings.Contains(h.logs.String(), "PRIVATE KEY") {
		t.Error("a private key was logged")
	}
}
