package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// fillStore writes one of everything a hub keeps: objects of every kind,
// deployment revisions, tokens, credentials, a bootstrap token, rollout
// state, Secrets, audit entries. It returns the tokens to check.
func fillStore(t *testing.T, s *store.Store) map[string]string {
	ctx := ctxT(t)
	tokens := map[string]string{}
	for i := range 5 {
		name := fmt.Sprintf("d%d", i)
		if _, err := s.Create(ctx, Device(name), false); err != nil {
			t.Fatal(err)
		}
		tok, err := s.IssueToken(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
	}
	for i := range 3 {
		for v := range 3 {
			if _, _, err := s.Apply(ctx, Deployment(fmt.Sprintf("w%d", i), fmt.Sprintf("nginx:%d", v)), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Enough keys for several batches of a migration.
	var bulk []schema.Object
	for i := range 250 {
		bulk = append(bulk, Device(fmt.Sprintf("bulk%03d", i)))
	}
	if _, err := s.ApplyAll(ctx, bulk, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindDevice, "d4", "", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, secret("creds", "migrated-secret"), false); err != nil {
		t.Fatal(err)
	}
	cred, err := s.IssueCredential(ctx, "ops", "admin")
	if err != nil {
		t.Fatal(err)
	}
	tokens["cred:ops"] = cred
	if _, _, err := s.CreateBootstrapToken(ctx, store.BootstrapTokenSpec{TTL: time.Hour, Uses: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, func(tx *store.Txn) error { return tx.Set(store.RolloutKey("w0"), []byte(`{"wave":2}`)) }); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.AppendAudit(ctx, schema.AuditEntry{Actor: "ops", Action: fmt.Sprintf("apply-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return tokens
}

// objectsOf is every object of every kind as the API reads it (JSON,
// resourceVersion, uid, generation and all), and the revision.
func objectsOf(t *testing.T, s *store.Store) (map[string]string, uint64) {
	ctx := ctxT(t)
	out := map[string]string{}
	for _, kind := range []string{schema.KindDevice, schema.KindDeployment, schema.KindConfigMap, schema.KindSecret} {
		objs, _, err := s.List(ctx, kind, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			out[kind+"/"+o.GetMetadata().Name] = string(b)
		}
	}
	revs, err := s.DeploymentRevisions(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(revs)
	out["revisions/w1"] = string(b)
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out, rev
}

func sameObjects(t *testing.T, what string, a, b map[string]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d objects, want %d", what, len(b), len(a))
	}
	for k, v := range a {
		if b[k] != v {
			t.Fatalf("%s: %s differs:\n got %s\nwant %s", what, k, b[k], v)
		}
	}
}

// TestMigrateRoundTrip: Badger → etcd → Badger is lossless, compared
// object by object (resourceVersions included) and key by key.
func TestMigrateRoundTrip(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hub := t.TempDir() // one data dir: its secrets.key seals the Secrets in every copy
	badgerA := store.Options{Dir: filepath.Join(hub, "store"), GCInterval: -1}
	etcd := store.Options{Dir: filepath.Join(hub, "store"), GCInterval: -1, Etcd: &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/fleet/migrated/"}}
	badgerB := store.Options{Dir: filepath.Join(hub, "store-back"), GCInterval: -1, SecretKeyFile: filepath.Join(hub, store.SecretKeyFileName)}

	s, err := store.Open(badgerA)
	if err != nil {
		t.Fatal(err)
	}
	tokens := fillStore(t, s)
	want, wantRev := objectsOf(t, s)
	id := s.ID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var batches int
	res, err := store.Migrate(ctx, badgerA, etcd, func(int) { batches++ })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("badger → etcd: %d keys, %d bytes, revision %d, %d batches", res.Keys, res.Bytes, res.Revision, batches)
	if batches < 3 {
		t.Fatalf("%d batches for %d keys: the batching is not exercised", batches, res.Keys)
	}
	if res.Revision != wantRev || res.StoreID != id {
		t.Fatalf("migrated revision %d, store %s; want %d, %s", res.Revision, res.StoreID, wantRev, id)
	}
	checkStore := func(what string, opts store.Options) {
		t.Helper()
		s, err := store.Open(opts)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer s.Close()
		got, rev := objectsOf(t, s)
		sameObjects(t, what, want, got)
		if rev != wantRev || s.ID() != id {
			t.Fatalf("%s: revision %d, store %s; want %d, %s", what, rev, s.ID(), wantRev, id)
		}
		for dev, tok := range tokens {
			if name, ok := strings.CutPrefix(dev, "cred:"); ok {
				if _, ok := s.VerifyCredential(name, tok); !ok {
					t.Fatalf("%s: credential %s no longer valid", what, name)
				}
			} else if dev != "d4" && !s.VerifyToken(dev, tok) {
				t.Fatalf("%s: token of %s no longer valid", what, dev)
			}
		}
		if v, err := s.VerifyAudit(ctxT(t)); err != nil || !v.OK || v.Entries != 3 {
			t.Fatalf("%s: audit chain %+v, %v", what, v, err)
		}
		err = s.View(ctxT(t), func(tx *store.Txn) error {
			sec, err := tx.GetSecretData("creds")
			if err == nil && string(sec.Data["v"]) != "migrated-secret" {
				err = fmt.Errorf("secret holds %q", sec.Data["v"])
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	checkStore("on etcd", etcd)

	// Into a non-empty store: refused, nothing written.
	if _, err := store.Migrate(ctx, badgerA, etcd, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("migrate into a non-empty prefix: %v", err)
	}

	back, err := store.Migrate(ctx, etcd, badgerB, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := store.Digest(ctx, badgerA)
	if err != nil {
		t.Fatal(err)
	}
	if back.Digest != orig.Digest || back.Keys != orig.Keys {
		t.Fatalf("round trip: %d keys, digest %s; original %d keys, digest %s", back.Keys, back.Digest, orig.Keys, orig.Digest)
	}
	checkStore("back on badger", badgerB)
}

// TestMigrateBadInput: a source that is no store, and a missing one, are
// refused without creating anything.
func TestMigrateBadInput(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	_, err := store.Migrate(ctx, store.Options{Dir: missing}, store.Options{Dir: filepath.Join(dir, "dst")}, nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing source: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a missing source was created")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, store.Options{Dir: empty}, store.Options{Dir: filepath.Join(dir, "dst2")}, nil); !errors.Is(err, store.ErrForeignStore) {
		t.Fatalf("source without a store: %v", err)
	}
}
