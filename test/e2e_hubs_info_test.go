package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// hubInfo reads GET /v1/info from h.
func hubInfo(t *testing.T, h *Hub) schema.HubInfo {
	t.Helper()
	var info schema.HubInfo
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/info", nil, http.StatusOK), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// printedJoin is the join string a `fleet device add` printed.
func printedJoin(t *testing.T, out string) schema.JoinInfo {
	t.Helper()
	for l := range strings.SplitSeq(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "fleet-agent --join ") {
			j, err := schema.ParseJoin(strings.Fields(l)[2])
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
	}
	t.Fatalf("no `fleet-agent --join` line in:\n%s", out)
	return schema.JoinInfo{}
}

// TestE2EHubInfoBrokers: two hubs on one etcd prefix each answer GET
// /v1/info with brokers: every registered hub's broker, the leader's
// first. So `fleet device add` through the standby gives the device both
// brokers, the leader's first, in the join string and the agent's
// --broker. Once the leader is killed and its lease gone, the survivor
// names its own broker alone; a hub on Badger names none (mqttURL alone).
func TestE2EHubInfoBrokers(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true, Members: 1})
	p := startHubPair(t, c, "/fleet/info-brokers/")
	a, b := p.hubs["hub-a"], p.hubs["hub-b"]
	want := []string{a.MQTTTLSURL, b.MQTTTLSURL}
	for _, h := range []*Hub{a, b} {
		if got := hubInfo(t, h).Brokers; !slices.Equal(got, want) {
			t.Fatalf("GET /v1/info brokers through %s: %q, want %q (the leader's first)", h.URL, got, want)
		}
	}
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	cliB := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + b.AdminConfig()}}
	out := cliB.ok("device", "add", "pi-1")
	if j := printedJoin(t, out); !slices.Equal(j.Brokers, want) {
		t.Fatalf("fleet device add through the standby: join string brokers %q, want %q\n%s", j.Brokers, want, out)
	}
	if line := "--broker " + strings.Join(want, ",") + " "; !strings.Contains(out, line) {
		t.Errorf("fleet device add through the standby: no %q in:\n%s", line, out)
	}

	a.Kill()
	p.awaitLeaderIs(t, "hub-b", "hub-b", 1, 30*time.Second)
	if got := hubInfo(t, b).Brokers; !slices.Equal(got, []string{b.MQTTTLSURL}) {
		t.Fatalf("GET /v1/info brokers of the lone hub: %q, want %q", got, b.MQTTTLSURL)
	}

	lone := StartHub(t, HubOptions{})
	if info := hubInfo(t, lone); info.Brokers != nil {
		t.Fatalf("GET /v1/info brokers on Badger: %q, want none", info.Brokers)
	}
}

// TestE2EHubSigningKeyAcrossHubs: every hub of a fleet on etcd signs with
// the same key (README "Running several hubs": the key files are copied
// from the first hub). A second hub with the fleet's CA and Secrets key
// but a signing key of its own is refused at start, with an error naming
// its signing.key and the files to copy, and does not join the hubs; with the
// first hub's signing.key it starts and presents the same key. A
// rotation through the standby is refused (409: the leader publishes);
// one through the leader (POST /v1/signing-key/rotate) makes the new key
// the fleet's: the other hub, restarted with the old key, is refused
// the same way until the new files are copied.
func TestE2EHubSigningKeyAcrossHubs(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TLS: true, Members: 1})
	args := etcdArgs(c, "/fleet/signing/")
	a := StartHub(t, HubOptions{Args: append(args, "--hub-id", "hub-a")})
	dirB := filepath.Join(t.TempDir(), "fleet-data")
	for _, f := range []string{store.SecretKeyFileName, pki.CACertName, pki.CAKeyName, "admin.conf"} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	refused := func(what string) {
		t.Helper()
		out := runHubExpectingFailure(t, dirB, append(args, "--hub-id", "hub-b")...)
		for _, want := range []string{filepath.Join(dirB, pki.SigningKeyName), "the fleet's hubs sign desired states with key", "copy signing.key (and signing.key.previous"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the refused hub's error does not say %q:\n%s", what, want, out)
			}
		}
		p := newHubPair(map[string]*Hub{"hub-a": a})
		if list, err := p.hubsOf("hub-a"); err != nil || len(list.Items) != 1 {
			t.Errorf("%s: hubs after the refused one: %+v %v, want hub-a alone", what, list, err)
		}
	}
	refused("a hub with a signing key of its own")

	copyFile(t, filepath.Join(a.DataDir, pki.SigningKeyName), filepath.Join(dirB, pki.SigningKeyName))
	b := StartHub(t, HubOptions{DataDir: dirB, Args: append(args, "--hub-id", "hub-b")})
	if b.SigningKey != a.SigningKey {
		t.Fatalf("hub-b presents signing key %s, hub-a %s", b.SigningKey, a.SigningKey)
	}

	// Only the leader rotates: it is the one that publishes.
	if code, body := b.Do(t, http.MethodPost, "/v1/signing-key/rotate", nil); code != http.StatusConflict || !strings.Contains(string(body), "through the leader hub") {
		t.Fatalf("rotate through the standby: %d %s, want 409 naming the leader", code, body)
	}
	var rotated schema.HubInfo
	if err := json.Unmarshal(mustDo(t, a, http.MethodPost, "/v1/signing-key/rotate", nil, http.StatusOK), &rotated); err != nil {
		t.Fatal(err)
	}
	if rotated.SigningKey == a.SigningKey {
		t.Fatal("the rotation answered the old key")
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	refused("a hub with the key from before a rotation")
	for _, f := range []string{pki.SigningKeyName, pki.PreviousSigningKeyName} {
		copyFile(t, filepath.Join(a.DataDir, f), filepath.Join(dirB, f))
	}
	b.start()
	if b.SigningKey != rotated.SigningKey {
		t.Fatalf("hub-b with the rotated files presents %s, want %s", b.SigningKey, rotated.SigningKey)
	}
	if _, err := os.Stat(filepath.Join(dirB, pki.PreviousSigningKeyName)); err != nil {
		t.Fatal(err)
	}
}
