package adminconf

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
)

// TestEnsureAndRotate: the first start creates the token and the file
// (0600); a later one rewrites the URL and keeps the token; a lost file is
// warned of, not recreated; Rotate issues a new token that replaces the
// old one.
func TestEnsureAndRotate(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	path := Path(t.TempDir())
	if err := Ensure(ctx, st, path, "http://a", []byte("CA"), log); err != nil {
		t.Fatal(err)
	}
	first, err := Read(path)
	if err != nil || first.Hub != "http://a" || first.CA != "CA" {
		t.Fatalf("first start: %+v %v", first, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", path, fi, err)
	}
	if c, ok := st.Authenticate(first.Token); !ok || c.Role != store.RoleAdmin {
		t.Fatal("the token is not the admin's")
	}
	if err := Ensure(ctx, st, path, "http://b", nil, log); err != nil {
		t.Fatal(err)
	}
	if again, _ := Read(path); again.Token != first.Token || again.Hub != "http://b" || again.CA != "" {
		t.Errorf("restart: %+v", again)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, st, path, "http://c", nil, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(logs.String(), "admin config is missing") {
		t.Errorf("a lost file: %v; logs:\n%s", err, logs.String())
	}
	if err := Rotate(ctx, st, path, "http://d"); err != nil {
		t.Fatal(err)
	}
	rotated, err := Read(path)
	if err != nil || rotated.Hub != "http://d" || rotated.Token == first.Token {
		t.Fatalf("rotated: %+v %v", rotated, err)
	}
	if _, ok := st.Authenticate(first.Token); ok {
		t.Error("the old token still works")
	}
	if strings.Contains(logs.String(), first.Token) || strings.Contains(logs.String(), rotated.Token) {
		t.Error("a token was logged")
	}
}
