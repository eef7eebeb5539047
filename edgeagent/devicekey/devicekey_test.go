package devicekey

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadOrCreateSealOpen(t *testing.T) {
	dir := t.TempDir()
	k, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	again, err := LoadOrCreate(dir)
	if err != nil || again.PublicKey() != k.PublicKey() || again.ID() != k.ID() {
		t.Fatalf("reloaded key differs: %v", err)
	}
	sealed, err := Seal(k.PublicKey(), []byte("s3cr3t-value"), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("s3cr3t")) {
		t.Fatal("sealed value contains the plaintext")
	}
	got, err := again.Open(sealed)
	if err != nil || string(got) != "s3cr3t-value" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Another device cannot open it.
	other, err := Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(sealed); err == nil {
		t.Fatal("another device's key opened the value")
	}
	if _, err := Seal("not a key", nil, rand.Reader); err == nil {
		t.Fatal("sealed to a bad key")
	}
	// A damaged key file is an error that says what to do, not a new key.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("loaded a damaged key")
	}
}
