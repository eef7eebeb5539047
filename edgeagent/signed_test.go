package edgeagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

func signingKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedJSON is desiredJSON signed as the hub signs it.
func signedJSON(t *testing.T, k ed25519.PrivateKey, e *schema.KeyEndorsement, device string, gen int64, pods ...schema.Pod) []byte {
	t.Helper()
	b, err := schema.SignDesiredState(desiredJSON(t, device, "s1", gen, pods...), k, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitRefusal publishes payload, waits for an event of reason and a
// status message containing msg, and checks that the runtime did nothing
// meanwhile.
func awaitRefusal(t *testing.T, b *testBroker, rt *runtime.Fake, payload []byte, reason, msg string) {
	t.Helper()
	before := rt.Calls()
	n := strings.Count(strings.Join(b.eventReasons("pi-1"), " "), reason)
	b.publishDesired("pi-1", payload)
	b.await(reason+" event", func() bool {
		return strings.Count(strings.Join(b.eventReasons("pi-1"), " "), reason) > n
	})
	b.await("status saying "+msg, func() bool {
		st, _ := b.lastStatus("pi-1")
		return strings.Contains(st.Message, msg)
	})
	if c := rt.Calls(); c.Create != before.Create || c.Remove != before.Remove || c.Stop != before.Stop {
		t.Fatalf("%s: the runtime changed: %+v -> %+v", reason, before, c)
	}
}

func runningImage(t *testing.T, rt *runtime.Fake) string {
	t.Helper()
	l, err := rt.List(t.Context())
	if err != nil || len(l) != 1 {
		t.Fatalf("running %+v, %v", l, err)
	}
	return l[0].Image
}

// TestAgentSignedDesiredState: the agent pins the hub's key on the first
// signed state, refuses unsigned, forged, other devices' and replayed
// states (event, status message, containers untouched), rolls over to a
// key the pinned one endorses, and keeps the pin across a restart.
func TestAgentSignedDesiredState(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	rt := runtime.NewFake(runtime.FakeOptions{})
	dir := t.TempDir()
	a, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
	k1, k2, rogue := signingKey(t), signingKey(t), signingKey(t)

	gen1 := signedJSON(t, k1, nil, "pi-1", 1, podOf("web", schema.RestartAlways, "web:1"))
	b.publishDesired("pi-1", gen1)
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	b.await("HubSigningKeyPinned event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "HubSigningKeyPinned") })
	if p, err := trust.Load(dir); err != nil || !p.Key().Equal(k1.Public()) {
		t.Fatalf("pinned %v, %v", p.Key(), err)
	}
	gen2 := signedJSON(t, k1, nil, "pi-1", 2, podOf("web", schema.RestartAlways, "web:2"))
	b.publishDesired("pi-1", gen2)
	b.awaitApplied("pi-1", 2, 1, schema.PhaseRunning)

	evil := podOf("evil", schema.RestartAlways, "evil:1")
	awaitRefusal(t, b, rt, desiredJSON(t, "pi-1", "s1", 10, evil), "DesiredStateUnsigned", "refused an unsigned desired state")

	awaitRefusal(t, b, rt, signedJSON(t, rogue, nil, "pi-1", 11, evil), "DesiredStateBadSignature", "bad signature")

	forged := signedJSON(t, k1, nil, "pi-1", 12, evil)
	forged = []byte(strings.Replace(string(forged), `"generation":12`, `"generation":13`, 1))
	awaitRefusal(t, b, rt, forged, "DesiredStateBadSignature", "bad signature")

	// The rogue's key endorsed by itself is not a rotation.
	awaitRefusal(t, b, rt, signedJSON(t, rogue, new(schema.EndorseSigningKey(rogue, rogue.Public().(ed25519.PublicKey))), "pi-1", 14, evil), "DesiredStateBadSignature", "bad signature")

	awaitRefusal(t, b, rt, signedJSON(t, k1, nil, "pi-2", 15, evil), "DesiredStateOtherDevice", `addressed to device "pi-2"`)

	// The genuine earlier state, replayed.
	awaitRefusal(t, b, rt, gen1, "DesiredStateReplayed", "refused a replayed desired state: generation 1 is older than generation 2")

	if img := runningImage(t, rt); img != "web:2" {
		t.Fatalf("running %s after the refusals, want web:2", img)
	}
	if s := a.Stats(); s.Unsigned != 1 || s.BadSignature != 3 || s.Replayed != 1 || s.OtherDevice != 1 {
		t.Fatalf("stats %+v", s)
	}

	// The hub rotates to k2, endorsed by k1: the same generation again,
	// re-signed, rolls the pin over; then k2's next state applies.
	e := schema.EndorseSigningKey(k1, k2.Public().(ed25519.PublicKey))
	b.publishDesired("pi-1", signedJSON(t, k2, &e, "pi-1", 2, podOf("web", schema.RestartAlways, "web:2")))
	b.await("HubSigningKeyRotated event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "HubSigningKeyRotated") })
	b.publishDesired("pi-1", signedJSON(t, k2, &e, "pi-1", 3, podOf("web", schema.RestartAlways, "web:3")))
	st := b.awaitApplied("pi-1", 3, 1, schema.PhaseRunning)
	if st.Message != "" {
		t.Errorf("status message after a good state: %q", st.Message)
	}
	// The fourth bad signature within a minute: its event is held back
	// by the per-reason rate limit (a rogue cannot flood the events);
	// status and the counters still say it.
	b.publishDesired("pi-1", signedJSON(t, k1, nil, "pi-1", 4, evil))
	b.await("the fourth refusal", func() bool {
		st, _ := b.lastStatus("pi-1")
		return a.Stats().BadSignature == 4 && strings.Contains(st.Message, "signed by key "+schema.SigningKeyID(k1.Public().(ed25519.PublicKey)))
	})
	if img := runningImage(t, rt); img != "web:3" {
		t.Fatalf("running %s, want web:3", img)
	}
	stop()

	// A restarted agent keeps the pin: the rogue's state is refused, k2's
	// applies.
	raw, err := os.ReadFile(filepath.Join(dir, trust.PinFile))
	if err != nil || strings.TrimSpace(string(raw)) != schema.EncodeSigningKey(k2.Public().(ed25519.PublicKey)) {
		t.Fatalf("pin file %q, %v", raw, err)
	}
	a, _ = runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, dir))
	awaitRefusal(t, b, rt, signedJSON(t, rogue, nil, "pi-1", 20, evil), "DesiredStateBadSignature", "bad signature")
	b.publishDesired("pi-1", signedJSON(t, k2, &e, "pi-1", 21, podOf("web", schema.RestartAlways, "web:21")))
	b.awaitApplied("pi-1", 21, 1, schema.PhaseRunning)
	if img := runningImage(t, rt); img != "web:21" {
		t.Fatalf("running %s, want web:21", img)
	}
	// The retained k1 state (if the new agent subscribed before the
	// rogue's state replaced it) is refused too.
	if s := a.Stats(); s.BadSignature < 1 || s.BadSignature > 2 || s.Accepted != 1 {
		t.Fatalf("stats after restart %+v", s)
	}
}

// TestAgentExplicitHubKey: with --hub-signing-key the agent never pins a
// rogue's key on first use.
func TestAgentExplicitHubKey(t *testing.T) {
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	rt := runtime.NewFake(runtime.FakeOptions{})
	hubKey, rogue := signingKey(t), signingKey(t)
	o := fastOptions(t, "pi-1", "tcp://"+b.addr, rt, t.TempDir())
	o.HubSigningKey = hubKey.Public().(ed25519.PublicKey)
	runAgent(t, o)
	awaitRefusal(t, b, rt, signedJSON(t, rogue, nil, "pi-1", 1, podOf("evil", schema.RestartAlways, "evil:1")), "DesiredStateBadSignature", "bad signature")
	awaitRefusal(t, b, rt, desiredJSON(t, "pi-1", "s1", 1, podOf("evil", schema.RestartAlways, "evil:1")), "DesiredStateUnsigned", "unsigned")
	b.publishDesired("pi-1", signedJSON(t, hubKey, nil, "pi-1", 1, podOf("web", schema.RestartAlways, "web:1")))
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	if img := runningImage(t, rt); img != "web:1" {
		t.Fatalf("running %s", img)
	}
}
