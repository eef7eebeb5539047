package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
)

// migrateBatchKeys and migrateBatchBytes bound one transaction of a
// migration: under etcd's default --max-txn-ops (128) and
// --max-request-bytes (1.5 MiB).
const (
	migrateBatchKeys  = 100
	migrateBatchBytes = 1 << 20
)

// MigrateResult is what Migrate copied.
type MigrateResult struct {
	// Keys and Bytes (keys and values) copied.
	Keys  int
	Bytes int64
	// Revision is the store revision (every object's resourceVersion is at
	// most it), StoreID the store's identity, both kept as they were.
	Revision uint64
	StoreID  string
	// Digest is the SHA-256 of every key and value, in key order: equal
	// on both sides (checked), so a round trip can be compared too.
	Digest string
}

// Migrate copies every key of the store in from (objects, revisions,
// tokens, credentials, rollout state, audit trail, the revision counter,
// the store ID and the ID of its Secrets key) into the store in to, which
// must be empty, and checks the copy against the source. Keys are copied
// as they are: Secrets stay sealed, so the hub on the new store needs the
// same secrets.key. Both stores must be closed (no hub running on them).
// The store ID is written last: a copy cut short is refused by Open, not
// taken for a store, and Migrate then deletes what it wrote (the
// destination was empty), so that a failed migration leaves the
// destination as it found it. progress, if set, is called after each
// batch.
func Migrate(ctx context.Context, from, to Options, progress func(keys int)) (res MigrateResult, err error) {
	if from.Etcd == nil {
		if _, err := os.Stat(from.Dir); err != nil {
			return res, fmt.Errorf("migrate: source: %w", err)
		}
	}
	src, err := openEngine(from)
	if err != nil {
		return res, fmt.Errorf("migrate: source: %w", err)
	}
	defer src.close()
	dst, err := openEngine(to)
	if err != nil {
		return res, fmt.Errorf("migrate: destination: %w", err)
	}
	defer dst.close()
	if err := engineView(ctx, dst, func(b engineTxn) error { return checkEmptyDest(b) }); err != nil {
		return res, fmt.Errorf("migrate: destination: %w", err)
	}
	// From here on the destination is Migrate's: a failure empties it
	// again.
	defer func() {
		if err != nil {
			if werr := wipeEngine(context.WithoutCancel(ctx), dst); werr != nil {
				err = errors.Join(err, fmt.Errorf("migrate: remove the partial copy (delete it by hand: a new Badger directory, or etcdctl del --prefix PREFIX): %w", werr))
			}
		}
	}()
	var storeID []byte
	sum := sha256.New()
	err = engineView(ctx, src, func(b engineTxn) error {
		v, ok, err := b.get(keyStoreID)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the source has no %s: not a Fleet store: %w", keyStoreID, ErrForeignStore)
		}
		storeID, res.StoreID = v, string(v)
		if res.Revision, err = readRevision(b); err != nil {
			return err
		}
		return copyKeys(ctx, b, dst, sum, &res, progress)
	})
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	err = engineUpdate(ctx, dst, func(b engineTxn) error { return b.set(keyStoreID, storeID) })
	if err != nil {
		return res, fmt.Errorf("migrate: write the store ID: %w", err)
	}
	res.Digest = hex.EncodeToString(sum.Sum(nil))
	got, err := digestEngine(ctx, dst)
	if err != nil {
		return res, fmt.Errorf("migrate: check the copy: %w", err)
	}
	if got.Digest != res.Digest || got.Keys != res.Keys {
		return res, fmt.Errorf("migrate: the copy differs from the source: %d keys, digest %s; source %d keys, digest %s", got.Keys, got.Digest, res.Keys, res.Digest)
	}
	return res, nil
}

// copyKeys writes every key the source transaction b sees into dst, in
// batches, the store ID last (by the caller); the digest covers them all.
func copyKeys(ctx context.Context, b engineTxn, dst engine, sum hash.Hash, res *MigrateResult, progress func(int)) error {
	type kv struct {
		k string
		v []byte
	}
	var batch []kv
	var size int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := engineUpdate(ctx, dst, func(t engineTxn) error {
			for _, e := range batch {
				if err := t.set(e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("write %d keys from %s: %w", len(batch), batch[0].k, err)
		}
		batch, size = batch[:0], 0
		if progress != nil {
			progress(res.Keys)
		}
		return nil
	}
	err := b.scan("", false, func(k string, v []byte) error {
		if k == keyCommitID {
			return nil // the etcd engine's own bookkeeping
		}
		digestKV(sum, k, v)
		res.Keys++
		res.Bytes += int64(len(k) + len(v))
		if k == keyStoreID {
			return nil
		}
		batch = append(batch, kv{k, append([]byte(nil), v...)})
		size += len(k) + len(v)
		if len(batch) >= migrateBatchKeys || size >= migrateBatchBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

func digestKV(h hash.Hash, k string, v []byte) {
	var n [16]byte
	binary.LittleEndian.PutUint64(n[:8], uint64(len(k)))
	binary.LittleEndian.PutUint64(n[8:], uint64(len(v)))
	h.Write(n[:])
	h.Write([]byte(k))
	h.Write(v)
}

// Digest reads every key of the (closed) store in opts at one snapshot
// and returns their number, size and SHA-256, as Migrate does.
func Digest(ctx context.Context, opts Options) (MigrateResult, error) {
	var res MigrateResult
	e, err := openEngine(opts)
	if err != nil {
		return res, err
	}
	defer e.close()
	return digestEngine(ctx, e)
}

func digestEngine(ctx context.Context, e engine) (MigrateResult, error) {
	var res MigrateResult
	sum := sha256.New()
	err := engineView(ctx, e, func(b engineTxn) error {
		v, _, err := b.get(keyStoreID)
		if err != nil {
			return err
		}
		res.StoreID = string(v)
		if res.Revision, err = readRevision(b); err != nil {
			return err
		}
		return b.scan("", false, func(k string, v []byte) error {
			if k == keyCommitID {
				return nil
			}
			digestKV(sum, k, v)
			res.Keys++
			res.Bytes += int64(len(k) + len(v))
			return nil
		})
	})
	if err != nil {
		return res, fmt.Errorf("digest: %w", err)
	}
	res.Digest = hex.EncodeToString(sum.Sum(nil))
	return res, nil
}

// wipeEngine deletes every key of e, in batches: what a failed Migrate
// wrote into a destination that was empty. The etcd engine's commit
// marker (keyCommitID) stays: it is no data, and checkEmptyDest ignores it.
func wipeEngine(ctx context.Context, e engine) error {
	for {
		var keys []string
		errFull := errors.New("batch full")
		err := engineView(ctx, e, func(b engineTxn) error {
			return b.scan("", false, func(k string, _ []byte) error {
				if k == keyCommitID {
					return nil // the etcd engine's own; every commit writes it
				}
				keys = append(keys, k)
				if len(keys) >= migrateBatchKeys {
					return errFull
				}
				return nil
			})
		})
		if err != nil && !errors.Is(err, errFull) {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		err = engineUpdate(ctx, e, func(b engineTxn) error {
			for _, k := range keys {
				if err := b.del(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
}

// CheckEmpty returns nil if the (closed) store in opts holds no key, as
// Migrate's destination must: an error that names a key it holds
// otherwise. It creates nothing but, for Badger, the directory.
func CheckEmpty(ctx context.Context, opts Options) error {
	e, err := openEngine(opts)
	if err != nil {
		return err
	}
	defer e.close()
	return engineView(ctx, e, func(b engineTxn) error { return checkEmptyDest(b) })
}

// openEngine opens the engine of opts alone, without the store's logic
// (no store ID or key is created).
func openEngine(opts Options) (engine, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Etcd != nil {
		o := *opts.Etcd
		if o.Prefix == "" {
			o.Prefix = DefaultEtcdPrefix
		}
		return openEtcd(o, log)
	}
	if opts.Dir == "" {
		return nil, errors.New("no directory")
	}
	return openBadger(opts.Dir, -1, log)
}

// checkEmptyDest refuses a destination that holds any key but the etcd
// engine's commit marker (which a failed migration leaves).
func checkEmptyDest(b engineTxn) error {
	var found string
	errFound := errors.New("found")
	err := b.scan("", false, func(k string, _ []byte) error {
		if k == keyCommitID {
			return nil
		}
		found = k
		return errFound
	})
	if errors.Is(err, errFound) {
		return fmt.Errorf("not empty (it holds %q): migrate into an empty store only (a new Badger directory, or an unused --etcd-prefix; after a migration cut short, delete the prefix: etcdctl del --prefix PREFIX)", found)
	}
	return err
}
