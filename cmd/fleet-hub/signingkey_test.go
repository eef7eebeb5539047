package main

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/pki"
)

func TestRotateSigningKeyCommand(t *testing.T) {
	dir := t.TempDir()
	_, out, err := runRoot(t, []string{"rotate-signing-key", "--data-dir", dir}, nil)
	if err != nil || !strings.Contains(out, "created key") {
		t.Fatalf("first rotation: %v %q", err, out)
	}
	s, err := pki.LoadOrCreateSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := s.KeyID()
	_, out, err = runRoot(t, []string{"rotate-signing-key"}, map[string]string{"FLEET_HUB_DATA_DIR": dir})
	if err != nil || !strings.Contains(out, "signing key rotated: "+first+" -> ") {
		t.Fatalf("rotation: %v %q", err, out)
	}
	if s, err = pki.LoadOrCreateSigner(dir); err != nil || s.KeyID() == first {
		t.Fatalf("after rotation: key %s (was %s), %v", s.KeyID(), first, err)
	}
}
