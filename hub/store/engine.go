package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// engine is the ordered key-value database under the store: Badger on one
// machine (engine_badger.go), etcd for several hubs (engine_etcd.go). The
// store's logic (objects, revisions, tokens, Secrets, audit, watch) lives
// above it and is the same on both; an engine only keeps bytes under keys
// and commits transactions atomically and durably.
//
// An engine-level snapshot (backup and restore of every key) belongs here
// too, beside begin: a backup reads one engine transaction.
type engine interface {
	// begin opens a transaction over a consistent snapshot. A writable one
	// buffers its writes until commit.
	begin(ctx context.Context, writable bool) (engineTxn, error)
	// kind names the engine in errors and logs ("badger", "etcd").
	kind() string
	// close releases the engine; transactions in flight must be done.
	close() error
}

// engineTxn is one engine transaction. Reads see the transaction's own
// writes.
type engineTxn interface {
	// get returns the value of key (a copy) and whether it exists.
	get(key string) ([]byte, bool, error)
	// scan calls fn for every key with the prefix, in key order (or
	// reverse); val is only valid during the call. An error from fn stops
	// the scan and is returned as is.
	scan(prefix string, reverse bool, fn func(key string, val []byte) error) error
	// scanFrom is scan forward from the first key after prefix+after
	// (from the prefix's first key when after is ""), for a list's pages.
	scanFrom(prefix, after string, fn func(key string, val []byte) error) error
	// set and del buffer a write.
	set(key string, val []byte) error
	del(key string) error
	// commit applies every buffered write atomically, only if no key the
	// transaction read (nor any key under a prefix it scanned) changed
	// since its snapshot: otherwise it fails with errTxnConflict and
	// nothing is written. It returns once the write is durable (fsynced
	// by Badger, committed to a quorum by etcd), with the engine's own
	// revision of the commit (etcd's revision; Badger's commit timestamp).
	commit(ctx context.Context) (uint64, error)
	// discard ends the transaction; after commit it does nothing.
	discard()
}

// errTxnConflict: another writer changed what a transaction read; run it
// again on a new snapshot.
var errTxnConflict = errors.New("transaction conflict")

// engineUpdate runs fn in a writable engine transaction and commits it,
// running it again (at most maxAttempts times) on a conflict.
func engineUpdate(ctx context.Context, e engine, fn func(b engineTxn) error) error {
	for attempt := range maxAttempts {
		b, err := e.begin(ctx, true)
		if err != nil {
			return err
		}
		err = fn(b)
		if err == nil {
			_, err = b.commit(ctx)
		}
		b.discard()
		if !errors.Is(err, errTxnConflict) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		conflictPause(ctx, attempt)
	}
	return fmt.Errorf("commit: gave up after %d conflicts: %w", maxAttempts, errTxnConflict)
}

// conflictPause waits before the retry of a transaction that lost a
// conflict for the attempt-th time (from 0): nothing after the first
// conflict, then a random time under 1 ms, 2 ms, 4 ms … at most 64 ms.
// Two hubs writing the same keys through etcd (the audit trail's next
// entry, say) would otherwise retry in step, and the one whose reads come
// a moment later would lose every time until it gave up.
func conflictPause(ctx context.Context, attempt int) {
	if attempt == 0 {
		return
	}
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<(attempt-1), 64*time.Millisecond)) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// engineView runs fn in a read-only engine transaction.
func engineView(ctx context.Context, e engine, fn func(b engineTxn) error) error {
	b, err := e.begin(ctx, false)
	if err != nil {
		return err
	}
	defer b.discard()
	return fn(b)
}
