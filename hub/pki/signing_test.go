package pki

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestSignerRotation: the key is made once (0600) and kept across loads;
// a rotation keeps the old key as the previous one, which endorses the new
// one in every signature, and a load after it signs the same way.
func TestSignerRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadOrCreateSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, SigningKeyName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", SigningKeyName, fi, err)
	}
	first := s.KeyID()
	if again, err := LoadOrCreateSigner(dir); err != nil || again.KeyID() != first {
		t.Fatalf("a second load: %v, key %s, want %s", err, again.KeyID(), first)
	}
	oldID, newID, err := RotateSigningKey(dir)
	if err != nil || oldID != first || newID == first {
		t.Fatalf("RotateSigningKey = %s, %s, %v; want %s and a new key", oldID, newID, err, first)
	}
	loaded, err := LoadOrCreateSigner(dir)
	if err != nil || loaded.KeyID() != newID {
		t.Fatalf("after the rotation: %v, key %s, want %s", err, loaded.KeyID(), newID)
	}
	oldID2, newID2, err := loaded.Rotate()
	if err != nil || oldID2 != newID || newID2 == newID {
		t.Fatalf("Rotate = %s, %s, %v", oldID2, newID2, err)
	}
	payload, err := loaded.SignDesiredState([]byte(`{"kind":"DesiredState"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := schema.VerifyDesiredState(payload, loaded.PublicKey()); err != nil {
		t.Errorf("a signature by the current key does not verify: %v", err)
	}
	if _, _, err := schema.VerifyDesiredState(payload, s.PublicKey()); err == nil {
		t.Error("a signature by the current key verifies against the first one")
	}
}
