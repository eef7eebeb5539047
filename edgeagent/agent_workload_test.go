package edgeagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// TestAgentReportsItsPublicKey: the agent makes its key at the first
// start (0600 in the state directory), keeps it across restarts and
// reports its public half in every status.
func TestAgentReportsItsPublicKey(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1))
	dir := t.TempDir()
	a, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), dir))
	st := b.awaitApplied("pi-1", 1, 0, schema.PhaseRunning)
	key, err := devicekey.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.PublicKey == "" || st.PublicKey != key.PublicKey() || a.PublicKey() != key.PublicKey() {
		t.Fatalf("status publicKey %q, agent %q, key file %q", st.PublicKey, a.PublicKey(), key.PublicKey())
	}
	if fi, err := os.Stat(filepath.Join(dir, devicekey.FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		t.Errorf("status invalid: %v", err)
	}
	stop()
	a, _ = runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), dir))
	if a.PublicKey() != key.PublicKey() {
		t.Fatalf("the restarted agent has another key")
	}
}

// TestAgentWithUnusableKeyKeepsRunning: a damaged key file is not
// replaced (the hub would seal to a key the operator did not choose);
// the agent runs its pods, reports no key, and says why in status and in
// an event.
func TestAgentWithUnusableKeyKeepsRunning(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, devicekey.FileName), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, podOf("web", schema.RestartAlways, "nginx:1")))
	runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, runtime.NewFake(runtime.FakeOptions{}), dir))
	st := b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	if st.PublicKey != "" || !strings.Contains(st.Message, "device key unusable") {
		t.Errorf("status publicKey %q, message %q", st.PublicKey, st.Message)
	}
	b.await("a DeviceKeyUnusable event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "DeviceKeyUnusable") })
	if b, _ := os.ReadFile(filepath.Join(dir, devicekey.FileName)); string(b) != "damaged" {
		t.Errorf("the key file was replaced")
	}
}
