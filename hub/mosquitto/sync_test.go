package mosquitto

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestMosquittoSync: the files are written on the first sync, rewritten
// (and Mosquitto signalled) only when the accounts change, kept when
// nothing changed, and a failed signal is retried by the next sync.
func TestMosquittoSync(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1, PasswordHash: broker.MosquittoPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "mosquitto.pid")
	hubAcct := broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: "hub-secret-0123456789"}
	m := NewFileSync(st, schema.Topics{}, hubAcct, dir, pidFile, slog.New(slog.DiscardHandler))
	var signalled []int
	m.signal = func(pid int) error {
		signalled = append(signalled, pid)
		return nil
	}
	passwd := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "passwd"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// No pid file yet (Mosquitto not started): written, reload pending.
	changed, err := m.Sync(ctx)
	var reload *reloadError
	if !changed || !errors.As(err, &reload) {
		t.Fatalf("first sync: changed %v, err %v; want written and a reload error", changed, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "passwd")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("passwd: %v %v, want mode 0600", fi, err)
	}
	if !strings.HasPrefix(strings.SplitN(passwd(), "\n", 3)[1], "fleet-hub:$7$") {
		t.Fatalf("passwd has no hub account:\n%s", passwd())
	}
	if err := os.WriteFile(pidFile, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing changed, but the reload is retried.
	if changed, err := m.Sync(ctx); changed || err != nil || len(signalled) != 1 || signalled[0] != 4242 {
		t.Fatalf("retry: changed %v, err %v, signalled %v", changed, err, signalled)
	}
	// Nothing to do now, not even a signal.
	before := passwd()
	if changed, err := m.Sync(ctx); changed || err != nil || len(signalled) != 1 {
		t.Fatalf("idle sync: changed %v, err %v, signalled %v", changed, err, signalled)
	}

	// A device with a token: rewritten and signalled.
	if _, err := st.Create(ctx, &schema.Device{Metadata: schema.ObjectMeta{Name: "pi-1"}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.IssueToken(ctx, "pi-1"); err != nil {
		t.Fatal(err)
	}
	if changed, err := m.Sync(ctx); !changed || err != nil || len(signalled) != 2 {
		t.Fatalf("after a new device: changed %v, err %v, signalled %v", changed, err, signalled)
	}
	after := passwd()
	if !strings.Contains(after, "\npi-1:$7$") {
		t.Errorf("pi-1 missing:\n%s", after)
	}
	// The hub's line is kept (its hash is salted: a new one would make
	// every sync a change), also by a new sync reading the file.
	hubLine := func(s string) string { return strings.SplitN(s, "\n", 3)[1] }
	if hubLine(after) != hubLine(before) {
		t.Error("the hub account's line changed")
	}
	m2 := NewFileSync(st, schema.Topics{}, hubAcct, dir, pidFile, slog.New(slog.DiscardHandler))
	m2.signal = m.signal
	if changed, err := m2.Sync(ctx); changed || err != nil {
		t.Fatalf("a new sync over up-to-date files: changed %v, err %v", changed, err)
	}

	// A bad pid file is an error naming it; the files are written all the
	// same.
	if err := os.WriteFile(pidFile, []byte("mosquitto"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.IssueToken(ctx, "pi-1"); err != nil {
		t.Fatal(err)
	}
	changed, err = m.Sync(ctx)
	if !changed || err == nil || !strings.Contains(err.Error(), pidFile) {
		t.Fatalf("bad pid file: changed %v, err %v", changed, err)
	}
	if bytes.Equal([]byte(after), []byte(passwd())) {
		t.Error("rotated token not written")
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(4243)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Sync(ctx); err != nil || signalled[len(signalled)-1] != 4243 {
		t.Fatalf("retry after fixing the pid file: %v, signalled %v", err, signalled)
	}
}
