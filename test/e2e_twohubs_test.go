package test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// startSecondHub starts another fleet-hub on the same etcd prefix as a,
// with its own data dir holding a copy of a's key files (README "Running
// several hubs").
func startSecondHub(t *testing.T, a *Hub, args []string) *Hub {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, pki.SigningKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dir, f))
	}
	return StartHub(t, HubOptions{DataDir: dir, Args: args})
}

// TestE2ETwoHubsShareEtcd: two real fleet-hub processes serve one fleet
// on one real 3-member etcd cluster at once. What is applied through hub A
// is what `fleet get` through hub B shows, with the same resourceVersion;
// `fleet get -w` through B streams A's changes;
// an operator credential created through A works on B's HTTP API, a
// device token created through B works on A's embedded broker (the
// leader's: the standby's refuses devices), and each stops working once
// the other hub revokes or replaces it. (Leadership itself is
// TestE2EHubFailover's.)
func TestE2ETwoHubsShareEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	args := etcdArgs(c, "/fleet/twohubs/")
	a := StartHub(t, HubOptions{Args: args})
	b := startSecondHub(t, a, args)
	if a.CAHash != b.CAHash || a.SigningKey != b.SigningKey {
		t.Fatalf("the hubs present different keys: CA %s / %s, signing %s / %s", a.CAHash, b.CAHash, a.SigningKey, b.SigningKey)
	}
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	cliA := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + a.AdminConfig()}}
	cliB := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + b.AdminConfig()}}

	// A watch through B, started before anything exists.
	w := cliB.start("get", "deployments", "-w", "-o", "json", "--output-watch-events")
	defer w.stop()
	type event struct {
		Type   string            `json:"type"`
		Object schema.Deployment `json:"object"`
	}
	events := make(chan event, 16)
	go func() {
		defer close(events)
		for {
			var ev event
			if err := w.dec.Decode(&ev); err != nil {
				return
			}
			events <- ev
		}
	}()
	next := func(what string) event {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("%s: the watch through hub B ended (stderr: %s)", what, w.stderr.String())
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no event from the watch through hub B within 30 s", what)
		}
		return event{}
	}

	manifest := cliA.write("web.yaml", webYAML("web", "nginx:1", map[string]string{"site": "a"}))
	if out := cliA.ok("apply", "-f", manifest); out != "deployment/web created\n" {
		t.Fatalf("apply through hub A: %q", out)
	}
	var onA schema.Deployment
	cliA.json(&onA, "get", "deployment", "web", "-o", "json")
	rv := onA.Metadata.ResourceVersion

	var got schema.Deployment
	cliB.json(&got, "get", "deployment", "web", "-o", "json")
	if got.Metadata.ResourceVersion != rv || got.Metadata.UID != onA.Metadata.UID || got.Spec.Template.Spec.Containers[0].Image != "nginx:1" {
		t.Fatalf("fleet get through hub B: %+v, want what hub A stored (resourceVersion %s)", got.Metadata, rv)
	}
	if ev := next("A's create"); ev.Type != schema.WatchAdded || ev.Object.Metadata.Name != "web" || ev.Object.Metadata.ResourceVersion != rv {
		t.Fatalf("watch through hub B: %s %s at %s, want ADDED web at %s", ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion, rv)
	}
	changed := cliA.write("web2.yaml", webYAML("web", "nginx:2", map[string]string{"site": "a"}))
	cliA.ok("apply", "-f", changed)
	cliA.json(&onA, "get", "deployment", "web", "-o", "json")
	ev := next("A's change")
	if ev.Type != schema.WatchModified || ev.Object.Metadata.ResourceVersion != onA.Metadata.ResourceVersion ||
		ev.Object.Spec.Template.Spec.Containers[0].Image != "nginx:2" {
		t.Fatalf("watch through hub B: %s %s at %s, want MODIFIED web (nginx:2) at %s", ev.Type, ev.Object.Metadata.Name,
			ev.Object.Metadata.ResourceVersion, onA.Metadata.ResourceVersion)
	}
	// And the other way: applied through B, seen through A.
	cliB.ok("apply", "-f", cliB.write("api.yaml", webYAML("api", "nginx:1", map[string]string{"site": "b"})))
	if out := cliA.ok("get", "deployments", "-o", "name"); !strings.Contains(out, "deployment/api") || !strings.Contains(out, "deployment/web") {
		t.Fatalf("fleet get deployments through hub A after an apply through B:\n%s", out)
	}
	if ev := next("B's own create"); ev.Type != schema.WatchAdded || ev.Object.Metadata.Name != "api" {
		t.Fatalf("watch through hub B: %s %s, want ADDED api", ev.Type, ev.Object.Metadata.Name)
	}

	t.Run("OperatorCredential", func(t *testing.T) {
		var cred schema.Credential
		body := mustDo(t, a, http.MethodPost, "/v1/credentials", []byte(`{"name":"ops","role":"viewer"}`), http.StatusCreated)
		if err := json.Unmarshal(body, &cred); err != nil || cred.Token == "" {
			t.Fatalf("create credential through hub A: %v %s", err, body)
		}
		onB := func() int {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code, _, err := hubRequest(ctx, b.URL, cred.Token, http.MethodGet, "/v1/deployments", nil)
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		start := time.Now()
		awaitf(t, 10*time.Second, func() bool { return onB() == http.StatusOK }, "hub B accepts the credential created through hub A")
		t.Logf("credential created through hub A accepted by hub B after %v", time.Since(start).Round(time.Millisecond))
		mustDo(t, a, http.MethodDelete, "/v1/credentials/ops", nil, http.StatusOK)
		start = time.Now()
		awaitf(t, 10*time.Second, func() bool { return onB() == http.StatusUnauthorized }, "hub B refuses the credential deleted through hub A")
		t.Logf("credential deleted through hub A refused by hub B after %v", time.Since(start).Round(time.Millisecond))
	})

	// Devices connect to the leader's broker only (the standby's refuses
	// them): A started first and leads, so the token goes through B.
	t.Run("DeviceToken", func(t *testing.T) {
		token := addDevice(t, b, "pi-1", map[string]string{"site": "a"})
		var dev *mqttClient
		awaitf(t, 10*time.Second, func() bool {
			var err error
			dev, err = dialMQTT(t, a.MQTTURL, "pi-1", token, dialOpts{})
			return err == nil
		}, "hub A's broker accepts the device token issued through hub B")
		// Replaced through B: A drops the session and refuses the old token.
		fresh := issueToken(t, b, "pi-1")
		dev.awaitLost(10 * time.Second)
		awaitf(t, 10*time.Second, func() bool {
			_, err := dialMQTT(t, a.MQTTURL, "pi-1", token, dialOpts{})
			return err != nil
		}, "hub A's broker refuses the token hub B replaced")
		awaitf(t, 10*time.Second, func() bool {
			_, err := dialMQTT(t, a.MQTTURL, "pi-1", fresh, dialOpts{})
			return err == nil
		}, "hub A's broker accepts the new token")
		// Deleted through B: refused by A.
		mustDo(t, b, http.MethodDelete, "/v1/devices/pi-1", nil, http.StatusOK)
		awaitf(t, 10*time.Second, func() bool {
			_, err := dialMQTT(t, a.MQTTURL, "pi-1", fresh, dialOpts{})
			return err != nil
		}, "hub A's broker refuses the device hub B deleted")
		if code, _ := a.Do(t, http.MethodGet, "/v1/devices/pi-1", nil); code != http.StatusNotFound {
			t.Fatalf("GET the deleted device through hub A: %d, want 404", code)
		}
	})
}
