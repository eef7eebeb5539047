package hub

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/nacl/box"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestHubSealsSecretsToTheReportedKey runs a hub and a device speaking
// MQTT: the device reports its public key in its status, and receives in
// its desired state the Secret its pod uses, sealed to that key, with the
// ConfigMap. The key file is in the data directory (0600); the store's
// files and the hub's logs never hold the value.
func TestHubSealsSecretsToTheReportedKey(t *testing.T) {
	const value = "hub-e2e-s3cr3t-91f2"
	dir := t.TempDir()
	h := startHub(t, Options{DataDir: dir})
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pubKey := base64.StdEncoding.EncodeToString(pub[:])

	manifest := `apiVersion: fleet/v1
kind: Device
metadata: {name: pi, labels: {role: gw}}
---
apiVersion: fleet/v1
kind: Secret
metadata: {name: creds}
stringData: {token: ` + value + `}
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: gw}
data: {mode: fast}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: gw}
spec:
  selector: {matchLabels: {role: gw}}
  template:
    spec:
      containers:
      - name: app
        image: busybox:1.36
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: creds, key: token}}
        envFrom:
        - configMapRef: {name: gw}
`
	if code, b := h.do(t, h.token, "POST", "/v1/apply", manifest); code != 200 || strings.Contains(string(b), value) {
		t.Fatalf("apply: %d %s", code, b)
	}
	_, b := h.do(t, h.token, "POST", "/v1/devices/pi/token", "")
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(b, &cred); err != nil {
		t.Fatal(err)
	}
	states := make(chan schema.DesiredState, 16)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.Info().MQTTURL).SetClientID("pi").SetUsername("pi").SetPassword(cred.Token).
		SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	tok := c.Subscribe(schema.Topics{}.Device("pi", schema.TopicDesired), 1, func(_ paho.Client, m paho.Message) {
		var ds schema.DesiredState
		if json.Unmarshal(m.Payload(), &ds) == nil {
			states <- ds
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	next := func(what string, ok func(schema.DesiredState) bool) schema.DesiredState {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case ds := <-states:
				if ok(ds) {
					return ds
				}
			case <-timeout:
				t.Fatalf("no desired state %s", what)
			}
		}
	}
	// Without a key: the pod and the ConfigMap, no Secret.
	first := next("with the pod", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	if len(first.Secrets) != 0 || len(first.ConfigMaps) != 1 || first.ConfigMaps[0].Data["mode"] != "fast" {
		t.Fatalf("before the key: %+v", first)
	}
	st, err := json.Marshal(schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   "pi", ObservedGeneration: first.Generation, Store: first.Store, Time: time.Now().UTC(),
		Agent: schema.AgentInfo{Version: "test", OS: "linux", Arch: "arm64"}, PublicKey: pubKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tok := c.Publish(schema.Topics{}.Device("pi", schema.TopicStatus), 1, true, st); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish status: %v", tok.Error())
	}
	ds := next("with the secret", func(ds schema.DesiredState) bool { return len(ds.Secrets) == 1 })
	sec := ds.Secrets[0]
	if ds.Generation != first.Generation+1 || sec.Name != "creds" || sec.KeyID != schema.DeviceKeyID(pubKey) {
		t.Fatalf("sealed secret: generation %d, %+v", ds.Generation, sec)
	}
	got, ok := box.OpenAnonymous(nil, sec.Data["token"], pub, priv)
	if !ok || string(got) != value {
		t.Fatalf("the device cannot open its secret: %q %v", got, ok)
	}

	// The monitor role does not see it; the admin sees keys and sizes.
	_, b = h.do(t, h.token, "POST", "/v1/credentials", `{"name":"mon","role":"monitor"}`)
	var mon schema.Credential
	if err := json.Unmarshal(b, &mon); err != nil {
		t.Fatal(err)
	}
	if code, b := h.do(t, mon.Token, "GET", "/v1/secrets/creds", ""); code != 403 {
		t.Errorf("monitor reads a secret: %d %s", code, b)
	}
	if code, b := h.do(t, h.token, "GET", "/v1/secrets/creds", ""); code != 200 || !strings.Contains(string(b), `"keys":{"token":19}`) || strings.Contains(string(b), value) {
		t.Errorf("admin get: %d %s", code, b)
	}

	fi, err := os.Stat(filepath.Join(dir, store.SecretKeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	// Stop the hub (the test's cleanup would) and look at its files.
	c.Disconnect(0)
	h.stopForTest(t)
	assertNoPlaintext(t, filepath.Join(dir, "store"), value, base64.StdEncoding.EncodeToString([]byte(value)))
	if strings.Contains(h.logs.String(), value) {
		t.Error("the secret value was logged")
	}
}
