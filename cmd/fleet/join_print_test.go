package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// joinLines returns the join string printed in out and the fleet-agent
// and install.sh lines that use it, failing if any is missing.
func joinLines(t *testing.T, out string) (join, agent, install string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, schema.JoinPrefix):
			join = l
		case strings.HasPrefix(l, "fleet-agent --join "):
			agent = l
		case strings.HasPrefix(l, "sudo ./install.sh --join "):
			install = l
		}
	}
	if join == "" || agent == "" || install == "" {
		t.Fatalf("no join string, or no line using it, in:\n%s", out)
	}
	return join, agent, install
}

func hubSigningKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return schema.EncodeSigningKey(pub)
}

// TestDeviceAddPrintsJoinString: besides its command line (which now
// pins the signing key too), `fleet device add` prints a join string
// that carries the broker, the CA hash, the signing key, the device and
// its token, and the command lines that take it.
func TestDeviceAddPrintsJoinString(t *testing.T) {
	e := newEnv(t)
	key, hash := hubSigningKey(t), "sha256:"+strings.Repeat("5a", 32)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://10.0.0.5:8883", CAHash: hash, SigningKey: key})
	out := e.ok("", "device", "add", "pi-1")
	tok := e.hub.DeviceToken("pi-1")
	if want := "  fleet-agent --broker ssl://10.0.0.5:8883 --device pi-1 --token-file /etc/fleet/token --ca-hash " + hash + " --hub-signing-key " + key + "   (write the token there, mode 0600)\n"; !strings.Contains(out, want) {
		t.Errorf("no %q in:\n%s", want, out)
	}
	join, agent, install := joinLines(t, out)
	j, err := schema.ParseJoin(join)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Brokers) != 1 || j.Brokers[0] != "ssl://10.0.0.5:8883" || j.CAHash != hash || j.SigningKey != key || j.Device != "pi-1" || j.Token != tok || j.BootstrapToken != "" {
		t.Fatalf("join string carries %+v", j)
	}
	if agent != "fleet-agent --join "+join || install != "sudo ./install.sh --join "+join {
		t.Errorf("command lines:\n%s\n%s", agent, install)
	}
	// rotate-token prints the new token's join string.
	out = e.ok("", "device", "rotate-token", "pi-1")
	join, _, _ = joinLines(t, out)
	if j, err := schema.ParseJoin(join); err != nil || j.Token != e.hub.DeviceToken("pi-1") || j.Token == tok {
		t.Fatalf("rotate-token join string: %+v, %v", j, err)
	}
}

// TestTokenCreatePrintsJoinString: `fleet token create` prints a join
// string with the bootstrap token instead of a device's.
func TestTokenCreatePrintsJoinString(t *testing.T) {
	e := newEnv(t)
	key, hash := hubSigningKey(t), "sha256:"+strings.Repeat("5a", 32)
	useRealAPI(t, e, hash, schema.HubInfo{MQTTURL: "ssl://0.0.0.0:8883", CAHash: hash, SigningKey: key})

	out := e.ok("", "token", "create", "--uses", "1")
	join, agent, install := joinLines(t, out)
	j, err := schema.ParseJoin(join)
	if err != nil {
		t.Fatal(err)
	}
	if j.Brokers[0] != "ssl://127.0.0.1:8883" || j.CAHash != hash || j.SigningKey != key || j.Device != "" || j.Token != "" ||
		!strings.Contains(out, "Token (shown once, store it safely): "+j.BootstrapToken+"\n") {
		t.Fatalf("join string carries %+v\n%s", j, out)
	}
	if agent != "fleet-agent --join "+join+" --name-from serial" || install != "sudo ./install.sh --join "+join+" --name-from serial" {
		t.Errorf("command lines:\n%s\n%s", agent, install)
	}
}
