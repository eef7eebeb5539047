package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// openPair opens two stores, as two hubs would, on one prefix of c.
func openPair(t *testing.T, c *etcdtest.Cluster, prefix string) (*Store, *Store) {
	t.Helper()
	dirs := []string{t.TempDir(), t.TempDir()}
	var out []*Store
	for i, dir := range dirs {
		if i == 1 {
			key, err := os.ReadFile(filepath.Join(dirs[0], SecretKeyFileName))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, SecretKeyFileName), key, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, openTest(t, Options{Dir: filepath.Join(dir, "store"), GCInterval: -1,
			Etcd: &EtcdOptions{Endpoints: c.Endpoints(), Prefix: prefix}}))
	}
	return out[0], out[1]
}

// TestFollowerCompactedResyncs: a hub whose etcd watch fell behind etcd's
// compaction (it was cut off while the other hub wrote) cannot replay what
// it missed: every watch on it ends with ErrExpired, its token cache is
// reloaded (a token issued meanwhile works), and its feed goes on from
// the new snapshot.
func TestFollowerCompactedResyncs(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	a, b := openPair(t, c, "/follow/")
	ctx := ctxT(t)
	w, err := b.Watch(ctx, "", revision(t, b))
	if err != nil {
		t.Fatal(err)
	}
	// Cut b off: its follower stops where it is.
	b.follow.stop()
	if _, err := a.Create(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	tok, err := a.IssueToken(ctx, "pi")
	if err != nil {
		t.Fatal(err)
	}
	cli := a.eng.(*etcdEngine).cli
	resp, err := cli.Get(ctx, "/follow/"+keyRevision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if b.VerifyToken("pi", tok) {
		t.Fatal("a stopped follower saw the token")
	}
	// Back: the follower watches from where it stopped, which is gone.
	fctx, cancel := context.WithCancel(context.Background())
	b.follow.cancel, b.follow.done = cancel, make(chan struct{})
	go b.follow.run(fctx)

	ev, ok := recv(t, w)
	if !ok || ev.Type != EventError || !errors.Is(ev.Err, ErrExpired) {
		t.Fatalf("watch on the hub that missed commits: %+v (open %v), want ERROR with ErrExpired", ev, ok)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !b.VerifyToken("pi", tok) {
		if time.Now().After(deadline) {
			t.Fatal("the resynced hub does not accept the token issued while it was cut off")
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	// Its feed goes on: a new watch sees the next change, once.
	w2, err := b.Watch(ctx, schema.KindDeployment, revision(t, b))
	if err != nil {
		t.Fatal(err)
	}
	o, err := a.Create(ctx, newDeployment("web", "nginx:1"), false)
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok := recv(t, w2); !ok || ev.Type != EventAdded || ev.Name != "web" || ev.Revision == 0 || o.GetMetadata().ResourceVersion != strconv.FormatUint(ev.Revision, 10) {
		t.Fatalf("watch after the resync: %+v, want ADDED web at %s", ev, o.GetMetadata().ResourceVersion)
	}
	// A watch from before the resync is refused.
	if _, err := b.Watch(ctx, "", 1); !errors.Is(err, ErrExpired) {
		t.Fatalf("watch from revision 1 after the resync: %v, want ErrExpired", err)
	}
}

// TestFollowerDeviceIndexNeverStale: on etcd a write transaction's
// DeviceUID answers from the follower's index only when the follower has
// applied the transaction's snapshot; a follower that is behind (here:
// stopped) never makes it answer from an older state.
func TestFollowerDeviceIndexNeverStale(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	a, b := openPair(t, c, "/index/")
	ctx := ctxT(t)
	created, err := a.Create(ctx, newDevice("pi", nil), false)
	if err != nil {
		t.Fatal(err)
	}
	uidOn := func(s *Store, name string) (string, bool, bool) {
		t.Helper()
		var uid string
		var ok, fromIndex bool
		_, err := s.Write(ctx, func(tx *Txn) error {
			uid, ok = tx.DeviceUID(name)
			_, _, fromIndex = tx.followedUID(name)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return uid, ok, fromIndex
	}
	// Caught up (a write through b waits for its follower): the index
	// answers.
	if _, err := b.Create(ctx, newDeployment("sync", "nginx:1"), false); err != nil {
		t.Fatal(err)
	}
	if uid, ok, fromIndex := uidOn(b, "pi"); !ok || uid != created.GetMetadata().UID || !fromIndex {
		t.Fatalf("caught-up store: uid %q found %v from the index %v, want %s from the index", uid, ok, fromIndex, created.GetMetadata().UID)
	}
	b.follow.stop()
	if _, err := a.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	re, err := a.Create(ctx, newDevice("pi2", nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, fromIndex := uidOn(b, "pi"); ok || fromIndex {
		t.Fatalf("store behind a delete: found %v (from the index: %v), want not found, read from etcd", ok, fromIndex)
	}
	if uid, ok, _ := uidOn(b, "pi2"); !ok || uid != re.GetMetadata().UID {
		t.Fatalf("store behind a create: uid %q found %v, want %s", uid, ok, re.GetMetadata().UID)
	}
	// Close waits for a follower; give it a running one back.
	fctx, cancel := context.WithCancel(context.Background())
	b.follow.cancel, b.follow.done = cancel, make(chan struct{})
	go b.follow.run(fctx)
}
