package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// backupOfAHub makes a stopped Badger hub with a device, its token and a
// Secret, backs it up with an age key and returns the file, the key
// file, the store ID and the device's token.
func backupOfAHub(t *testing.T) (file, idFile, id, token string) {
	t.Helper()
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
	if token, err = st.IssueToken(t.Context(), "pi-1"); err != nil {
		t.Fatal(err)
	}
	sec := &schema.Secret{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: "creds"}, StringData: map[string]string{"v": "restored-secret"}}
	if _, _, err := st.Apply(t.Context(), sec, false); err != nil {
		t.Fatal(err)
	}
	id = st.ID()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ident, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile = filepath.Join(dir, "key.txt")
	if err := os.WriteFile(idFile, []byte(ident.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "hub.age")
	if _, out, err := runRoot(t, []string{"backup", "--data-dir", data, "--to", file, "--recipient", ident.Recipient().String()}, nil); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	return file, idFile, id, token
}

// TestRestoreIntoEtcd: fleet-hub restore --store etcd://… puts a backup's
// store into an empty etcd prefix (the key files into --data-dir, no
// local store), where a hub opens it with the same store ID, objects,
// token and sealed Secret; a used prefix and an unreachable cluster are
// refused before anything is written.
func TestRestoreIntoEtcd(t *testing.T) {
	file, idFile, id, token := backupOfAHub(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	url := "etcd://" + strings.Join(c.HostPorts(), ",")
	to := filepath.Join(t.TempDir(), "restored")
	_, out, err := runRoot(t, []string{"restore", "--from", file, "--data-dir", to, "--identity-file", idFile,
		"--store", url, "--etcd-prefix", "/fleet/restored/"}, nil)
	if err != nil {
		t.Fatalf("restore into etcd: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if !strings.Contains(out, id) || !strings.Contains(out, "copy checked") ||
		!strings.Contains(out, "start it with: fleet-hub --data-dir "+to+" --store "+url+" --etcd-prefix /fleet/restored/") {
		t.Fatalf("restore output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(to, "store")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a local store was left beside the etcd one: %v", err)
	}
	if _, err := os.Stat(filepath.Join(to, store.SecretKeyFileName)); err != nil {
		t.Fatalf("the key files were not restored: %v", err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(to, "store"), GCInterval: -1,
		Etcd: &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/fleet/restored/", FleetIDFile: filepath.Join(to, store.FleetIDFileName)}})
	if err != nil {
		t.Fatalf("open the restored store on etcd: %v", err)
	}
	defer st.Close()
	if st.ID() != id {
		t.Fatalf("store ID %s, want %s", st.ID(), id)
	}
	if _, err := st.Get(t.Context(), schema.KindDevice, "pi-1"); err != nil {
		t.Fatalf("device: %v", err)
	}
	if !st.VerifyToken("pi-1", token) {
		t.Fatal("the device's token does not verify on the restored store")
	}
	err = st.View(t.Context(), func(tx *store.Txn) error {
		sec, err := tx.GetSecretData("creds")
		if err == nil && string(sec.Data["v"]) != "restored-secret" {
			err = errors.New("the Secret holds " + string(sec.Data["v"]))
		}
		return err
	})
	if err != nil {
		t.Fatalf("Secret: %v", err)
	}
	if from, err := st.RestoredFrom(t.Context()); err != nil || from != "hub.age" {
		t.Fatalf("restored from %q, %v; want hub.age", from, err)
	}

	// The prefix is used now: refused, nothing written anywhere.
	again := filepath.Join(t.TempDir(), "again")
	_, _, err = runRoot(t, []string{"restore", "--from", file, "--data-dir", again, "--identity-file", idFile,
		"--store", url, "--etcd-prefix", "/fleet/restored/"}, nil)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("restore into a used prefix: %v", err)
	}
	if _, err := os.Stat(again); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore created its data dir: %v", err)
	}
	_, _, err = runRoot(t, []string{"restore", "--from", file, "--data-dir", again, "--identity-file", idFile,
		"--store", "etcd://127.0.0.1:1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("restore into an unreachable cluster: %v", err)
	}
	if _, err := os.Stat(again); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore created its data dir: %v", err)
	}
	if _, _, err := runRoot(t, []string{"restore", "--from", file, "--data-dir", again, "--identity-file", idFile, "--store", "mysql://x"}, nil); err == nil || !strings.Contains(err.Error(), "--store") {
		t.Fatalf("restore --store mysql://x: %v", err)
	}
}
