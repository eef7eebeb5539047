package armtest

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallBrokerList: install.sh --broker takes several brokers,
// comma-separated, and writes them into agent.yaml as the agent's
// broker key; a malformed entry is refused naming its position, and a
// CA or CA hash needs every broker to be TLS. Bad usage writes nothing.
func TestInstallBrokerList(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	list := "ssl://hub1.example:8883,ssl://hub2.example:8883,ssl://10.0.0.3:8883"
	hash := "sha256:" + strings.Repeat("5a", 32)
	base := []string{"--root", root, "--device", "pi-11", "--token", "tok", "--binary", agent, "--arch", "arm64"}

	before := snapshot(t, root)
	for _, tc := range []struct {
		broker string
		extra  []string
		want   string
	}{
		{broker: "ssl://hub1:8883,http://hub2", want: "--broker: broker 2 of 2, http://hub2: want tcp://"},
		{broker: "ssl://hub1:8883,,ssl://hub3:8883", want: "--broker: broker 2 of 3 is empty"},
		{broker: "ssl://hub1:8883,", want: "--broker: broker 2 of 2 is empty"},
		{broker: "ssl://hub1:8883,tcp://hub2:1883", extra: []string{"--ca-hash", hash}, want: "--ca-hash needs TLS brokers"},
		{broker: "ssl://hub1:8883,tcp://hub2:1883", extra: []string{"--ca", "/dev/null"}, want: "--ca needs TLS brokers"},
	} {
		args := append(append([]string{"--broker", tc.broker}, base...), tc.extra...)
		r := runInstall(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("install.sh --broker %s %v: exit %d, stderr %q; want 2 and %q", tc.broker, tc.extra, r.code, r.stderr, tc.want)
		}
	}
	if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
		t.Fatalf("bad usage changed the tree:\n%s", strings.Join(d, "\n"))
	}

	mustInstall(t, append([]string{"--broker", list, "--ca-hash", hash}, base...)...)
	conf := readFile(t, filepath.Join(root, "etc/fleet/agent.yaml"))
	if !bytes.Contains(conf, []byte("broker: '"+list+"'\n")) || !bytes.Contains(conf, []byte("ca-hash: '"+hash+"'\n")) {
		t.Fatalf("agent.yaml does not carry the broker list and the CA hash:\n%s", conf)
	}
	checkKeysAreAgentFlags(t, []string{"broker"})
}
