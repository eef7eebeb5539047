package trust_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func signed(t *testing.T, k ed25519.PrivateKey, e *schema.KeyEndorsement) []byte {
	t.Helper()
	b, err := schema.SignDesiredState([]byte(`{"device":"pi-1","generation":1,"pods":[]}`), k, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFirstUseRotationAndRefusals(t *testing.T) {
	dir := t.TempDir()
	p, err := trust.Load(dir)
	if err != nil || p.Key() != nil {
		t.Fatalf("empty dir: %v %v", p.Key(), err)
	}
	k1, k2, rogue := newKey(t), newKey(t), newKey(t)

	// No key pinned: unsigned passes (a hub that does not sign).
	if v, err := p.Check([]byte(`{"device":"pi-1"}`)); err != nil || v.Signed {
		t.Fatalf("unsigned before pin: %+v %v", v, err)
	}
	// First signed state: checked with its own key, pinned on Commit.
	v, err := p.Check(signed(t, k1, nil))
	if err != nil || !v.FirstUse || !v.Key.Equal(pub(k1)) {
		t.Fatalf("first use: %+v %v", v, err)
	}
	if changed, err := p.Commit(v); !changed || err != nil {
		t.Fatalf("commit: %v %v", changed, err)
	}
	if changed, _ := p.Commit(v); changed {
		t.Fatal("second commit of the same verdict pinned again")
	}

	for name, payload := range map[string][]byte{
		"unsigned":            []byte(`{"device":"pi-1","generation":2}`),
		"rogue key":           signed(t, rogue, nil),
		"self-endorsed":       signed(t, rogue, new(schema.EndorseSigningKey(rogue, pub(rogue)))),
		"endorsed by another": signed(t, k2, new(schema.EndorseSigningKey(rogue, pub(k2)))),
	} {
		_, err := p.Check(payload)
		want := trust.ErrBadSignature
		if name == "unsigned" {
			want = trust.ErrUnsigned
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	// A bad signature by the pinned key.
	bad := signed(t, k1, nil)
	bad[5] ^= 1
	if _, err := p.Check(bad); !errors.Is(err, trust.ErrBadSignature) {
		t.Errorf("tampered: %v", err)
	}

	// Rotation: k2 endorsed by the pinned k1.
	v, err = p.Check(signed(t, k2, new(schema.EndorseSigningKey(k1, pub(k2)))))
	if err != nil || !v.Rotated {
		t.Fatalf("rotation: %+v %v", v, err)
	}
	if changed, err := p.Commit(v); !changed || err != nil {
		t.Fatalf("commit rotation: %v %v", changed, err)
	}
	// k1 is no longer trusted; the pin survives a reload.
	if _, err := p.Check(signed(t, k1, nil)); !errors.Is(err, trust.ErrBadSignature) {
		t.Errorf("old key after rotation: %v", err)
	}
	p2, err := trust.Load(dir)
	if err != nil || !p2.Key().Equal(pub(k2)) {
		t.Fatalf("reloaded pin %v, %v", p2.Key(), err)
	}
}

func TestReadKeyArgAndCorruptPin(t *testing.T) {
	k := pub(newKey(t))
	dir := t.TempDir()
	file := filepath.Join(dir, "hub.pub")
	if err := os.WriteFile(file, []byte(schema.EncodeSigningKey(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{schema.EncodeSigningKey(k), "@" + file} {
		got, err := trust.ReadKeyArg(arg)
		if err != nil || !got.Equal(k) {
			t.Errorf("%s: %v %v", arg, got, err)
		}
	}
	if _, err := trust.ReadKeyArg("@" + filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file read")
	}
	if err := os.WriteFile(filepath.Join(dir, trust.PinFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.Load(dir); err == nil {
		t.Fatal("a corrupt pin file loaded: the agent would trust anyone")
	}
}
