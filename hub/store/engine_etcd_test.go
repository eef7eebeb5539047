package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleetmq/fleet/test/etcdtest"
)

// TestEtcdEngineWatchFromRevision: the etcd engine's watch delivers every
// change after a revision, in order, once; from a compacted revision it
// fails with ErrExpired, as a store watch from too old a revision does.
func TestEtcdEngineWatchFromRevision(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	e, err := openEtcd(EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/engine/"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var revs []uint64
	for i := range 6 {
		var rev uint64
		err := engineUpdate(ctx, e, func(b engineTxn) error {
			if _, _, err := b.get("v1/x/counter"); err != nil {
				return err
			}
			if i == 4 {
				return b.del("v1/x/k1")
			}
			return b.set(fmt.Sprintf("v1/x/k%d", i), []byte(fmt.Sprint(i)))
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.cli.Get(ctx, "/engine/v1/meta/commit-id")
		if err != nil {
			t.Fatal(err)
		}
		rev = uint64(resp.Kvs[0].ModRevision)
		revs = append(revs, rev)
	}
	ch := e.watch(ctx, "v1/x/", revs[1])
	want := []string{"v1/x/k2", "v1/x/k3", "v1/x/k1 deleted", "v1/x/k5"}
	var last uint64
	for i, w := range want {
		select {
		case b := <-ch:
			if b.Err != nil {
				t.Fatal(b.Err)
			}
			// One commit, whole: its one key under the prefix.
			if len(b.Changes) != 1 {
				t.Fatalf("commit %d: %+v, want one change", i, b.Changes)
			}
			c := b.Changes[0]
			got := c.Key
			if c.Deleted {
				got += " deleted"
				if !c.HadPrev || string(c.Prev) != "1" {
					t.Fatalf("delete of k1: previous value %q (%v), want \"1\"", c.Prev, c.HadPrev)
				}
			}
			if got != w || b.Rev <= last || b.Rev != revs[i+2] {
				t.Fatalf("change %d: %s at %d, want %s at %d", i, got, b.Rev, w, revs[i+2])
			}
			last = b.Rev
		case <-ctx.Done():
			t.Fatalf("waited for %s", w)
		}
	}
	if _, err := e.cli.Compact(ctx, int64(revs[4])); err != nil {
		t.Fatal(err)
	}
	old := e.watch(ctx, "v1/x/", revs[1])
	select {
	case b := <-old:
		if !errors.Is(b.Err, ErrExpired) {
			t.Fatalf("watch from a compacted revision: %+v, want ErrExpired", b)
		}
	case <-ctx.Done():
		t.Fatal("no answer from a watch on a compacted revision")
	}
}

// TestEtcdEngineWatchProgress: when nothing changes under the prefix, the
// watch still says how far it is (a batch without changes), so a watch
// resumed later starts there and not from a revision compacted since.
func TestEtcdEngineWatchProgress(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	e, err := openEtcd(EtcdOptions{Endpoints: c.Endpoints(), Prefix: "/quiet/"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start, err := e.cli.Get(ctx, "/quiet/")
	if err != nil {
		t.Fatal(err)
	}
	ch := e.watch(ctx, "", uint64(start.Header.Revision))
	// Another fleet writes; this prefix stays quiet.
	other, err := e.cli.Put(ctx, "/other/v1/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	for {
		// The watch's stream is the require-leader one (engine_etcd.go).
		if err := e.cli.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // ask again: the stream may not be up yet
		case b := <-ch:
			if b.Err != nil || len(b.Changes) != 0 {
				t.Fatalf("quiet prefix: %+v, want progress only", b)
			}
			if b.Rev >= uint64(other.Header.Revision) {
				return
			}
		case <-ctx.Done():
			t.Fatal("no progress from the watch of a quiet prefix")
		}
	}
}
