package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Several hubs on one etcd prefix: each one follows every commit, its
// own and the others', through etcd's watch, so that what it keeps in
// memory is what etcd holds.
//
// On etcd, the follower is the only writer of the store's feed (watch.go):
// every hub sees every change of every hub in etcd's commit order, which
// is the store revision order, with the same revisions and the same
// object JSON. A write through this hub returns once the follower has
// published it, so a Watch started after a Write still sees it, as on
// Badger. The token and credential cache (auth.go) takes every change
// too: a token issued or revoked through one hub is honoured or refused
// by every other within the watch's delay. The device uid index
// (deviceuids.go) is not used on etcd: a transaction reads the Device.

// followWait bounds how long a write through this hub waits for its own
// commit to come back from etcd's watch before it returns anyway (it is
// committed; only this hub's watchers see it later).
const followWait = 10 * time.Second

// follower feeds the store's memory from the engine's watch.
type follower struct {
	s      *Store
	w      engineWatcher
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards engineRev and storeRev, the last commit applied, and uids.
	mu        sync.Mutex
	engineRev uint64
	storeRev  uint64
	// uids is the device uid index (deviceuids.go) as of engineRev.
	uids map[string]string
}

// revisionReader is a transaction that knows its snapshot's engine
// revision (etcd's).
type revisionReader interface{ snapshotRev() uint64 }

// followSnapshot is what the follower loads, all at one engine revision.
type followSnapshot struct {
	engineRev uint64
	storeRev  uint64
	auth      map[string][]byte
	uids      map[string]string
}

// readFollowSnapshot reads the store revision, every token and
// credential and every device's uid at one engine revision.
func readFollowSnapshot(ctx context.Context, e engine) (followSnapshot, error) {
	snap := followSnapshot{auth: map[string][]byte{}, uids: map[string]string{}}
	err := engineView(ctx, e, func(b engineTxn) error {
		var err error
		if snap.storeRev, err = readRevision(b); err != nil {
			return err
		}
		rr, ok := b.(revisionReader)
		if !ok {
			return fmt.Errorf("%s transactions do not tell their revision", e.kind())
		}
		snap.engineRev = rr.snapshotRev()
		for _, p := range []string{prefixTokens, prefixCredentials} {
			err := b.scan(p, false, func(key string, val []byte) error {
				snap.auth[key] = append([]byte(nil), val...)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return scanDeviceUIDs(b, snap.uids)
	})
	if err != nil {
		return snap, fmt.Errorf("read the store to follow it: %w", err)
	}
	return snap, nil
}

// startFollower loads the auth cache at one engine revision, starts the
// feed at that revision and follows every commit after it.
func (s *Store) startFollower(w engineWatcher, ring, queue int) error {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	snap, err := readFollowSnapshot(ctx, s.eng)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.auth.applyAt(snap.auth, snap.engineRev)
	s.maxRev.Store(snap.storeRev)
	s.feed = newFeed(snap.storeRev, ring, queue)
	fctx, fcancel := context.WithCancel(context.Background())
	f := &follower{s: s, w: w, cancel: fcancel, done: make(chan struct{}),
		engineRev: snap.engineRev, storeRev: snap.storeRev, uids: snap.uids}
	s.follow = f
	go f.run(fctx)
	return nil
}

// stop ends the follower and waits for it.
func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// run watches from the last applied commit until ctx ends, watching
// again (with jittered backoff) after an error; a watch etcd has
// compacted away restarts the feed from a new snapshot.
func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		f.mu.Lock()
		from := f.engineRev
		f.mu.Unlock()
		err := f.follow(ctx, from)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrExpired) {
			f.s.log.Warn("store follower: missed commits (compacted): every watch ends with ErrExpired", "err", err)
			if err = f.resync(ctx); err == nil {
				backoff = 100 * time.Millisecond
				continue
			}
		}
		if err != nil {
			f.s.log.Warn("store follower: watching etcd again", "from", from, "err", err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, 5*time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// follow applies every commit after engine revision from until the watch
// ends; it returns why.
func (f *follower) follow(ctx context.Context, from uint64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for b := range f.w.watch(wctx, "", from) {
		if b.Err != nil {
			return b.Err
		}
		f.apply(b)
	}
	return errors.New("etcd watch closed")
}

// resync starts over from a new snapshot: the feed forgets its events
// (every watcher ends with ErrExpired) and the auth cache is reloaded.
func (f *follower) resync(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	snap, err := readFollowSnapshot(rctx, f.s.eng)
	if err != nil {
		return err
	}
	f.s.auth.replaceAt(snap.auth, snap.engineRev)
	f.mu.Lock()
	f.engineRev, f.storeRev, f.uids = snap.engineRev, snap.storeRev, snap.uids
	f.mu.Unlock()
	f.s.raiseMaxRev(snap.storeRev)
	f.s.feed.restart(snap.storeRev, fmt.Errorf("this hub missed commits (its etcd watch was compacted): list again: %w", ErrExpired))
	return nil
}

// apply takes one commit: its token and credential changes go to the auth
// cache, and, if it bumped the store revision, its object changes go to
// the feed as events of that revision.
func (f *follower) apply(b engineBatch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.Rev <= f.engineRev {
		return
	}
	f.engineRev = b.Rev
	var auth map[string][]byte
	var storeRev uint64
	for _, c := range b.Changes {
		switch {
		case c.Key == keyRevision && !c.Deleted:
			if len(c.Value) == 8 {
				storeRev = binary.BigEndian.Uint64(c.Value)
			}
		case isAuthKey(c.Key):
			if auth == nil {
				auth = map[string][]byte{}
			}
			if c.Deleted {
				auth[c.Key] = nil
			} else {
				auth[c.Key] = c.Value
			}
		}
	}
	f.s.auth.applyAt(auth, b.Rev)
	if storeRev == 0 {
		return // no store revision: a cache write, an audit entry, a fence
	}
	if storeRev <= f.storeRev {
		f.s.log.Warn("store follower: a commit that does not move the revision forward", "revision", storeRev, "after", f.storeRev, "etcdRevision", b.Rev)
		return
	}
	f.storeRev = storeRev
	evs := make([]Event, 0, len(b.Changes))
	for _, c := range b.Changes {
		ev, ok, err := changeEvent(c, storeRev)
		if err != nil {
			f.s.log.Warn("store follower: an object change that does not decode", "key", c.Key, "revision", storeRev, "err", err)
			continue
		}
		if ok {
			evs = append(evs, ev)
		}
	}
	applyDeviceUIDs(f.uids, evs)
	f.s.raiseMaxRev(storeRev)
	f.s.feed.publish(storeRev, evs)
}

// deviceUID answers Txn.DeviceUID from the index when it is exact for a
// transaction whose snapshot's last commit is at engine revision
// lastCommit: the follower has applied it. (Had it applied commits after
// the snapshot, the transaction cannot commit: it runs again.) known is
// false when the follower is behind.
func (f *follower) deviceUID(name string, lastCommit uint64) (uid string, ok, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.engineRev < lastCommit {
		return "", false, false
	}
	uid, ok = f.uids[name]
	return uid, ok, true
}

// changeEvent is the watch event of one object key's change, as the
// writing transaction emitted it (objects.go); ok is false for a key that
// is no object.
func changeEvent(c engineChange, rev uint64) (Event, bool, error) {
	rest, ok := strings.CutPrefix(c.Key, prefixObjects)
	if !ok {
		return Event{}, false, nil
	}
	res, name, ok := strings.Cut(rest, "/")
	kind, known := KindForResource(res)
	if !ok || !known || name == "" {
		return Event{}, false, nil
	}
	var prev []byte
	if c.HadPrev {
		var err error
		if prev, err = publicRaw(kind, c.Prev); err != nil {
			return Event{}, false, err
		}
	}
	if !c.Deleted {
		obj, err := publicRaw(kind, c.Value)
		if err != nil {
			return Event{}, false, err
		}
		typ := EventModified
		if !c.HadPrev {
			typ = EventAdded
		}
		return Event{Type: typ, Kind: kind, Name: name, Object: obj, Prev: prev}, true, nil
	}
	obj, err := deletedObject(kind, name, c.Prev, rev)
	if err != nil {
		return Event{}, false, err
	}
	return Event{Type: EventDeleted, Kind: kind, Name: name, Object: obj, Prev: prev}, true, nil
}

// deletedObject is the object of a DELETED event: the object as it was,
// with the deletion's resourceVersion (DeleteObject's encoding).
func deletedObject(kind, name string, prevRaw []byte, rev uint64) ([]byte, error) {
	rv := strconv.FormatUint(rev, 10)
	if prevRaw == nil {
		// etcd no longer had the value: the name and revision are known.
		return json.Marshal(map[string]any{"apiVersion": "fleet/v1", "kind": kind,
			"metadata": map[string]string{"name": name, "resourceVersion": rv}})
	}
	obj, err := decodeObject(kind, prevRaw)
	if err != nil {
		return nil, err
	}
	obj.GetMetadata().ResourceVersion = rv
	return json.Marshal(obj)
}

// raiseMaxRev raises the newest revision a reader may have seen.
func (s *Store) raiseMaxRev(rev uint64) {
	for {
		cur := s.maxRev.Load()
		if cur >= rev || s.maxRev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// engineRevision reads the store revision from the engine (etcd: a
// linearizable read), for a watch from a revision this hub's feed has not
// reached yet. The caller holds the shared lock.
func (s *Store) engineRevision(ctx context.Context) (uint64, error) {
	var rev uint64
	err := engineView(ctx, s.eng, func(b engineTxn) error {
		var err error
		rev, err = readRevision(b)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	s.raiseMaxRev(rev)
	return rev, nil
}

// awaitFeed waits (at most followWait) until this hub's follower has
// published store revision rev, the revision of a commit this hub made.
func (s *Store) awaitFeed(ctx context.Context, rev uint64) {
	if s.follow == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followWait)
	defer cancel()
	if !s.feed.waitFor(wctx, rev) {
		s.log.Warn("store: a commit has not come back from etcd's watch yet; this hub's watchers will see it late", "revision", rev, "waited", followWait)
	}
}
