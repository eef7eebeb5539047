package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// badgerEngine is the embedded engine: one Badger directory with sync
// writes, and its value-log garbage collector.
type badgerEngine struct {
	db     *badger.DB
	log    *slog.Logger
	gcStop chan struct{}
	gcDone chan struct{}
}

// badgerOptions keeps Badger small: about 11 MB of RSS instead of hundreds,
// and every acknowledged write on disk.
func badgerOptions(dir string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(0).
		WithCompression(options.None).
		WithNumVersionsToKeep(1).
		// Must stay within 15 % of MemTableSize (1.2 MB here).
		WithValueThreshold(1 << 20).
		WithNumCompactors(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithLogger(badgerLogger{log.With("component", "badger")})
}

// openBadger opens (or creates) the Badger directory dir and starts its
// value-log garbage collector every gcInterval (none if negative).
func openBadger(dir string, gcInterval time.Duration, log *slog.Logger) (*badgerEngine, error) {
	db, err := badger.Open(badgerOptions(dir, log))
	if err != nil {
		if strings.Contains(err.Error(), "directory lock") {
			return nil, fmt.Errorf("open store %s: another process (a running fleet-hub?) holds it: %w: %w", dir, ErrLocked, err)
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	e := &badgerEngine{db: db, log: log, gcStop: make(chan struct{}), gcDone: make(chan struct{})}
	if gcInterval > 0 {
		go e.gcLoop(gcInterval)
	} else {
		close(e.gcDone)
	}
	return e, nil
}

func (e *badgerEngine) kind() string { return "badger" }

func (e *badgerEngine) close() error {
	close(e.gcStop)
	<-e.gcDone
	if err := e.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

func (e *badgerEngine) begin(ctx context.Context, writable bool) (engineTxn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return badgerTxn{e.db.NewTransaction(writable)}, nil
}

func (e *badgerEngine) gcLoop(interval time.Duration) {
	defer close(e.gcDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.gcStop:
			return
		case <-t.C:
		}
		// Each successful run rewrites one value-log file; stop when there
		// is nothing left worth rewriting.
		for range 16 {
			err := e.db.RunValueLogGC(0.5)
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
					e.log.Warn("value log gc failed", "err", err)
				}
				break
			}
		}
	}
}

// badgerTxn is a Badger transaction: Badger itself tracks what it read
// and refuses a conflicting commit.
type badgerTxn struct{ b *badger.Txn }

func (t badgerTxn) get(key string) ([]byte, bool, error) {
	item, err := t.b.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (t badgerTxn) scan(prefix string, reverse bool, fn func(key string, val []byte) error) error {
	opts := badger.DefaultIteratorOptions
	opts.Prefix = []byte(prefix)
	opts.PrefetchSize = 64
	opts.Reverse = reverse
	it := t.b.NewIterator(opts)
	defer it.Close()
	seek := []byte(prefix)
	if reverse {
		seek = append(seek, 0xff)
	}
	for it.Seek(seek); it.Valid(); it.Next() {
		item := it.Item()
		err := item.Value(func(v []byte) error {
			return fn(string(item.Key()), v)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (t badgerTxn) scanFrom(prefix, after string, fn func(key string, val []byte) error) error {
	opts := badger.DefaultIteratorOptions
	opts.Prefix = []byte(prefix)
	opts.PrefetchSize = 64
	it := t.b.NewIterator(opts)
	defer it.Close()
	seek := []byte(prefix)
	if after != "" {
		seek = append(append(seek, after...), 0)
	}
	for it.Seek(seek); it.Valid(); it.Next() {
		item := it.Item()
		err := item.Value(func(v []byte) error {
			return fn(string(item.Key()), v)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (t badgerTxn) set(key string, val []byte) error {
	return badgerErr(t.b.Set([]byte(key), val))
}

func (t badgerTxn) del(key string) error {
	return badgerErr(t.b.Delete([]byte(key)))
}

// commit returns 0: the store keeps its own revision counter.
func (t badgerTxn) commit(context.Context) (uint64, error) {
	err := t.b.Commit()
	if errors.Is(err, badger.ErrConflict) {
		return 0, fmt.Errorf("%w: %w", errTxnConflict, err)
	}
	return 0, badgerErr(err)
}

func (t badgerTxn) discard() { t.b.Discard() }

// badgerErr maps Badger's size limit to ErrTooLarge.
func badgerErr(err error) error {
	if errors.Is(err, badger.ErrTxnTooBig) {
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}

// badgerLogger routes Badger's warnings and errors to slog and drops its
// informational chatter.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
