package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestBackupInspectRestoreOfAStoppedHub backs up a stopped hub's data
// directory, inspects the file and restores it, then checks the refusals.
func TestBackupInspectRestoreOfAStoppedHub(t *testing.T) {
	t.Setenv(backup.EnvPassphrase, "")
	dir := t.TempDir()
	data := filepath.Join(dir, "fleet-data")
	st, err := store.Open(store.Options{Dir: filepath.Join(data, "store")})
	if err != nil {
		t.Fatal(err)
	}
	dev := &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}, Metadata: schema.ObjectMeta{Name: "pi-1"}}
	if _, _, err := st.Apply(t.Context(), dev, false); err != nil {
		t.Fatal(err)
	}
	id := st.ID()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// An age key, not a passphrase: scrypt under the race detector takes
	// seconds per file (the passphrase path is hub/backup's and the e2e's).
	ident, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(idFile, []byte("# test key\n"+ident.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rcpt := ident.Recipient().String()
	file := filepath.Join(dir, "hub.age")

	if _, _, err := runRoot(t, []string{"backup", "--data-dir", data, "--to", file}, nil); err == nil || !strings.Contains(err.Error(), "never written in clear") {
		t.Fatalf("backup without a key: %v", err)
	}
	_, out, err := runRoot(t, []string{"backup", "--data-dir", data, "--to", file, "--recipient", rcpt}, nil)
	if err != nil || !strings.Contains(out, "stopped hub") || !strings.Contains(out, "1 devices") {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v %v", fi, err)
	}
	if _, _, err := runRoot(t, []string{"backup", "--data-dir", data, "--to", file, "--recipient", rcpt}, nil); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("backup over an existing file: %v", err)
	}

	_, out, err = runRoot(t, []string{"backup", "inspect", file, "--identity-file", idFile, "-o", "json"}, nil)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	var m backup.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Hub.StoreID != id || m.Objects["devices"] != 1 {
		t.Errorf("inspect -o json: %+v %v\n%s", m, err, out)
	}
	_, out, err = runRoot(t, []string{"backup", "inspect", file, "--identity-file", idFile}, nil)
	if err != nil || !strings.Contains(out, "Store ID:") || !strings.Contains(out, id) || strings.Contains(out, "PRIVATE") {
		t.Errorf("inspect: %v\n%s", err, out)
	}
	if _, _, err := runRoot(t, []string{"backup", "inspect", file, "--identity-file", idFile, "-o", "wide"}, nil); err == nil {
		t.Error("inspect -o wide was accepted")
	}

	to := filepath.Join(dir, "restored")
	_, out, err = runRoot(t, []string{"restore", "--from", file, "--data-dir", to, "--identity-file", idFile}, nil)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "is lost") || !strings.Contains(out, "ago") {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(to, "store")); err != nil {
		t.Errorf("restored store: %v", err)
	}
	if _, _, err := runRoot(t, []string{"restore", "--from", file, "--data-dir", to, "--identity-file", idFile}, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore over the restored dir: %v", err)
	}
	if _, _, err := runRoot(t, []string{"restore", "--data-dir", filepath.Join(dir, "x"), "--identity-file", idFile}, nil); err == nil || !strings.Contains(err.Error(), "--from") {
		t.Errorf("restore without --from: %v", err)
	}
}

func TestServeHubNeedsABackupKey(t *testing.T) {
	t.Setenv(backup.EnvPassphrase, "")
	err := serveHub(newRootCmd(func(string) string { return "" }, nil), settings{LogLevel: "info", AuditMaxBytes: "100Mi", Backup: backupSettings{Dir: t.TempDir()}})
	if err == nil || !strings.Contains(err.Error(), "--backup-dir") {
		t.Errorf("serve with --backup-dir and no key: %v", err)
	}
}
