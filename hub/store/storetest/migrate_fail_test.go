package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// TestMigrateFailureLeavesNothing: a migration into etcd that fails
// part way (a value larger than etcd takes in one request, after several
// batches went in) leaves the destination prefix empty, so that the
// migration can be run again once the cause is fixed, and CheckEmpty
// says so; a prefix with keys is refused by CheckEmpty naming one.
func TestMigrateFailureLeavesNothing(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hub := t.TempDir()
	src := store.Options{Dir: filepath.Join(hub, "store"), GCInterval: -1}
	s, err := store.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := s.Create(ctx, Device(fmt.Sprintf("d%03d", i)), false); err != nil {
			t.Fatal(err)
		}
	}
	// Sorted after the devices' keys: written once several batches are in.
	if _, err := s.Write(ctx, func(tx *store.Txn) error { return tx.Set("v1/zz-too-big", make([]byte, 2<<20)) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dst := store.Options{Etcd: &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/fleet/half/"}}
	if err := store.CheckEmpty(ctx, dst); err != nil {
		t.Fatalf("CheckEmpty of an unused prefix: %v", err)
	}
	var batches int
	_, err = store.Migrate(ctx, src, dst, func(int) { batches++ })
	if err == nil {
		t.Fatal("a 2 MiB value went into etcd in one request")
	}
	t.Logf("migrate failed after %d batches: %v", batches, err)
	if batches < 2 {
		t.Fatalf("the migration failed after %d batches: the test does not exercise a partial copy", batches)
	}
	keys := prefixKeys(t, cli, "/fleet/half/")
	delete(keys, "/fleet/half/v1/meta/commit-id") // the etcd engine's commit marker: no data
	if len(keys) != 0 {
		t.Fatalf("the failed migration left %d keys under the prefix", len(keys))
	}
	if err := store.CheckEmpty(ctx, dst); err != nil {
		t.Fatalf("CheckEmpty after the failed migration: %v", err)
	}
	if _, err := cli.Put(ctx, "/fleet/used/v1/x", "1"); err != nil {
		t.Fatal(err)
	}
	used := store.Options{Etcd: &store.EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/fleet/used/"}}
	if err := store.CheckEmpty(ctx, used); err == nil || !strings.Contains(err.Error(), `not empty (it holds "v1/x")`) {
		t.Fatalf("CheckEmpty of a used prefix: %v", err)
	}
}
