package store

import (
	"context"
	"errors"
	"fmt"
)

// maxAttempts bounds the retries of a transaction that Badger refused with
// a conflict. Writes are serialised in-process, so a retry is rare.
const maxAttempts = 16

// Txn is one read or read-write transaction over a consistent snapshot.
// Keys are strings in the v1/ layout (see the package doc).
type Txn struct {
	s        *Store
	b        engineTxn
	writable bool
	// serial: a write transaction that holds writeMu and may commit, so
	// its snapshot is the latest commit (see deviceUIDs). followed: one on
	// etcd, whose DeviceUID asks the follower (follow.go); lastCommit is
	// then its snapshot's last commit, once read.
	serial, followed bool
	lastCommit       uint64
	// rev is the store revision of the snapshot.
	rev uint64
	// dirty: something was written; the transaction commits as rev+1.
	dirty bool
	// dryRun: the transaction is never committed; objects keep their
	// current resourceVersion.
	dryRun bool
	// actor is who asks for the write (WithActor), for the change cause
	// of revisions; changeCause, if set, replaces it and the annotations.
	actor, changeCause string
	events             []Event
	authWrites         map[string][]byte
	// engineRev: on etcd, the etcd revision of the commit (0 on Badger).
	engineRev uint64
}

// Revision is the revision of the snapshot; once a write transaction has
// written anything, it is the revision the transaction commits as.
func (t *Txn) Revision() uint64 {
	if t.dirty {
		return t.rev + 1
	}
	return t.rev
}

// writeRevision marks the transaction as writing and returns the revision
// it commits as.
func (t *Txn) writeRevision() (uint64, error) {
	if !t.writable {
		return 0, errors.New("write in a read-only transaction")
	}
	t.dirty = true
	return t.rev + 1, nil
}

// Get returns a copy of the value of key, or an error wrapping ErrNotFound.
func (t *Txn) Get(key string) ([]byte, error) {
	v, ok, err := t.b.get(key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return v, nil
}

// Set writes key. Keys under v1/meta/ and v1/objects/ are refused: objects
// are written through the object methods so that watchers see them.
func (t *Txn) Set(key string, val []byte) error {
	if err := checkWritableKey(key); err != nil {
		return fmt.Errorf("set: %w", err)
	}
	return t.set(key, val)
}

// Delete removes key; deleting a missing key is not an error.
func (t *Txn) Delete(key string) error {
	if err := checkWritableKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return t.del(key)
}

func (t *Txn) set(key string, val []byte) error {
	if _, err := t.writeRevision(); err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	if err := t.b.set(key, val); err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	t.noteAuth(key, val)
	return nil
}

func (t *Txn) del(key string) error {
	if _, err := t.writeRevision(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := t.b.del(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	t.noteAuth(key, nil)
	return nil
}

// noteAuth remembers writes of token and credential keys; the in-memory
// hash cache applies them once the transaction has committed.
func (t *Txn) noteAuth(key string, val []byte) {
	if !isAuthKey(key) {
		return
	}
	if t.authWrites == nil {
		t.authWrites = map[string][]byte{}
	}
	t.authWrites[key] = val
}

// Scan calls fn for every key with the prefix, in key order. The value is
// only valid during the call.
func (t *Txn) Scan(prefix string, fn func(key string, val []byte) error) error {
	return t.b.scan(prefix, false, fn)
}

// Emit queues an event for watchers; it is published with the
// transaction's revision once the transaction commits, and dropped if it
// does not. Object writes emit their events themselves.
func (t *Txn) Emit(ev Event) {
	t.events = append(t.events, ev)
}

// View runs fn in a read-only transaction.
func (s *Store) View(ctx context.Context, fn func(t *Txn) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	b, err := s.eng.begin(ctx, false)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	defer b.discard()
	rev, err := readRevision(b)
	if err != nil {
		return fmt.Errorf("read revision: %w", err)
	}
	return fn(&Txn{s: s, b: b, rev: rev})
}

// Write runs fn in a read-write transaction and commits it. fn may run more
// than once (when Badger reports a conflict), so it must have no side
// effects outside the Txn. A transaction that wrote anything bumps the
// store revision by one; Write returns the committed revision, or 0 when fn
// wrote nothing (then nothing is committed). An error from fn aborts the
// transaction and is returned as is. fn must use only the Txn, never other
// Store methods (they would wait for the write lock fn holds).
func (s *Store) Write(ctx context.Context, fn func(t *Txn) error) (uint64, error) {
	return s.write(ctx, false, fn)
}

// write runs fn; with dryRun it never commits.
func (s *Store) write(ctx context.Context, dryRun bool, fn func(t *Txn) error) (uint64, error) {
	if err := s.acquire(ctx); err != nil {
		return 0, err
	}
	defer s.release()
	if !dryRun {
		s.writeMu.Lock()
	}
	rev, err := s.commitLocked(ctx, dryRun, fn)
	if !dryRun {
		s.writeMu.Unlock()
	}
	if rev > 0 {
		// On etcd, the follower publishes the commit (follow.go): return
		// once it has, as Badger's writes return with theirs published.
		s.awaitFeed(ctx, rev)
	}
	return rev, err
}

// commitLocked runs fn and commits it, running it again on a conflict;
// writeMu is held unless dryRun.
func (s *Store) commitLocked(ctx context.Context, dryRun bool, fn func(t *Txn) error) (uint64, error) {
	for attempt := range maxAttempts {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t, err := s.attempt(ctx, dryRun, actorFrom(ctx), fn)
		if errors.Is(err, errTxnConflict) {
			conflictPause(ctx, attempt)
			continue
		}
		if err != nil || t == nil {
			return 0, err
		}
		if s.follow == nil {
			s.applyDeviceEvents(t.events)
			s.feed.publish(t.rev+1, t.events)
		}
		// Before the write returns (OnAuthChange's promise); on etcd the
		// follower sees the same change at the same engine revision and
		// leaves it.
		s.auth.applyAt(t.authWrites, t.engineRev)
		return t.rev + 1, nil
	}
	return 0, fmt.Errorf("commit: gave up after %d conflicts: %w", maxAttempts, errTxnConflict)
}

// attempt runs fn once and commits. It returns a nil Txn when there was
// nothing to commit (or dryRun).
func (s *Store) attempt(ctx context.Context, dryRun bool, actor string, fn func(t *Txn) error) (*Txn, error) {
	b, err := s.eng.begin(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer b.discard()
	rev, err := readRevision(b)
	if err != nil {
		return nil, fmt.Errorf("read revision: %w", err)
	}
	// On etcd other hubs commit too: the device index is the follower's.
	t := &Txn{s: s, b: b, rev: rev, writable: true, serial: !dryRun && s.follow == nil,
		followed: !dryRun && s.follow != nil, actor: actor}
	if err := fn(t); err != nil {
		return nil, err
	}
	if !t.dirty || dryRun {
		return nil, nil
	}
	if err := b.set(keyRevision, encodeRevision(rev+1)); err != nil {
		return nil, fmt.Errorf("bump revision: %w", err)
	}
	// Readers may see rev+1 as soon as Commit returns: let watchers that
	// ask for it wait instead of being told it is from the future.
	s.raiseMaxRev(rev + 1)
	engineRev, err := b.commit(ctx)
	if err != nil {
		if errors.Is(err, errTxnConflict) {
			return nil, err
		}
		if t.touchesDevices() {
			s.devUIDs.bad = true // it may have applied
		}
		return nil, fmt.Errorf("commit: %w", badgerErr(err))
	}
	if s.follow != nil {
		t.engineRev = engineRev
	}
	return t, nil
}
