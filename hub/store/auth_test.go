package store

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestDeviceTokens(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	ctx := ctxT(t)
	if _, err := s.IssueToken(ctx, "pi"); !errors.Is(err, ErrNotFound) {
		t.Errorf("token for a missing device: %v", err)
	}
	if _, err := s.Create(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	tok1, err := s.IssueToken(ctx, "pi")
	if err != nil {
		t.Fatal(err)
	}
	if len(tok1) < 40 {
		t.Errorf("token %d chars, want 256 bits", len(tok1))
	}
	checks := []struct {
		device, token string
		want          bool
	}{
		{"pi", tok1, true},
		{"pi", tok1 + "x", false},
		{"pi", "", false},
		{"other", tok1, false},
	}
	for _, c := range checks {
		if got := s.VerifyToken(c.device, c.token); got != c.want {
			t.Errorf("VerifyToken(%s, …) = %v, want %v", c.device, got, c.want)
		}
	}
	tok2, err := s.IssueToken(ctx, "pi")
	if err != nil {
		t.Fatal(err)
	}
	if s.VerifyToken("pi", tok1) || !s.VerifyToken("pi", tok2) {
		t.Error("rotation: old token still valid or new one not")
	}
	raw := rawValue(t, s, TokenKey("pi"))
	if bytes.Contains(raw, []byte(tok2)) || !bytes.Contains(raw, []byte("sha256")) {
		t.Errorf("stored token record %s", raw)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	assertNotOnDisk(t, dir, tok1, tok2)
	s2 := openTest(t, Options{Dir: dir})
	if !s2.VerifyToken("pi", tok2) {
		t.Error("token not valid after reopen")
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	ctx := ctxT(t)
	admin, err := s.IssueCredential(ctx, AdminCredential, RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	mon, err := s.IssueCredential(ctx, "grafana", RoleMonitor)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := s.Authenticate(admin); !ok || c.Role != RoleAdmin || c.Name != AdminCredential {
		t.Errorf("admin: %+v %v", c, ok)
	}
	if c, ok := s.Authenticate(mon); !ok || c.Role != RoleMonitor {
		t.Errorf("monitor: %+v %v", c, ok)
	}
	for _, bad := range []string{"", "x", admin[:len(admin)-1]} {
		if _, ok := s.Authenticate(bad); ok {
			t.Errorf("Authenticate(%q) succeeded", bad)
		}
	}
	if !s.HasCredential(AdminCredential) || s.HasCredential("nobody") {
		t.Error("HasCredential")
	}
	if _, err := s.IssueCredential(ctx, "x", "root"); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("unknown role: %v", err)
	}
	if err := s.DeleteCredential(ctx, "grafana"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Authenticate(mon); ok {
		t.Error("deleted credential still works")
	}
	if err := s.DeleteCredential(ctx, "grafana"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	assertNotOnDisk(t, dir, admin, mon)
}

func rawValue(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	var v []byte
	err := s.View(t.Context(), func(t *Txn) error {
		var err error
		v, err = t.Get(key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// assertNotOnDisk greps every file of the closed store for the secrets.
func assertNotOnDisk(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec)) {
				t.Errorf("%s contains a plaintext token", p)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk %s: %v (%d files)", dir, err, files)
	}
}
