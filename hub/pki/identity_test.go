package pki

import "testing"

// TestSignatureIdentityFollowsTheKey: the identity under which the
// controller reuses signatures stays put while the key does (across a
// reload of the key files) and changes with a rotation.
func TestSignatureIdentityFollowsTheKey(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadOrCreateSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := s.SignatureIdentity()
	again, err := LoadOrCreateSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.SignatureIdentity(); got != id {
		t.Errorf("reloaded signer's identity %q, want %q", got, id)
	}
	if _, _, err := s.Rotate(); err != nil {
		t.Fatal(err)
	}
	rotated := s.SignatureIdentity()
	if rotated == id || rotated[:len(s.KeyID())] != s.KeyID() {
		t.Errorf("identity after a rotation %q (was %q; key %s)", rotated, id, s.KeyID())
	}
}
