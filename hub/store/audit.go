package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/fleetmq/fleet/schema"
)

// The audit trail: v1/audit/{seq}, seq in 20 digits, each a
// schema.AuditEntry. Entries are numbered without gaps from the oldest
// kept to the newest; appending one past Options.AuditLimit deletes the
// oldest in the same (synced) transaction. Appends do not bump the store
// revision: the trail is no object, and watchers have nothing to see.

// DefaultAuditLimit is the default of Options.AuditLimit.
const DefaultAuditLimit = 10000

const prefixAudit = "v1/audit/"

// maxAuditTrim bounds the deletes of one append, so that a store reopened
// with a much lower AuditLimit trims over a few appends instead of in one
// transaction too big for Badger.
const maxAuditTrim = 1000

// AuditKey is the key of audit entry seq.
func AuditKey(seq uint64) string { return fmt.Sprintf("%s%020d", prefixAudit, seq) }

// auditLog is where the trail stands: the keys [first, next) exist.
type auditLog struct {
	mu     sync.Mutex
	limit  uint64
	loaded bool
	first  uint64
	next   uint64
}

// AppendAudit stores e as the newest audit entry and returns it with its
// Seq (and Time, if it had none). It is written with Badger's sync
// writes, like every other write. e must hold no token or Secret value:
// the store keeps it as it is.
func (s *Store) AppendAudit(ctx context.Context, e schema.AuditEntry) (schema.AuditEntry, error) {
	if err := s.acquire(ctx); err != nil {
		return e, err
	}
	defer s.release()
	a := &s.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := s.loadAuditLocked(); err != nil {
		return e, err
	}
	e.Seq = a.next
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Time = e.Time.UTC()
	val, err := json.Marshal(e)
	if err != nil {
		return e, fmt.Errorf("append audit entry: %w", err)
	}
	first := a.first
	err = s.db.Update(func(b *badger.Txn) error {
		if err := b.Set([]byte(AuditKey(e.Seq)), val); err != nil {
			return err
		}
		for n := 0; first+a.limit <= e.Seq && n < maxAuditTrim; n++ {
			if err := b.Delete([]byte(AuditKey(first))); err != nil {
				return err
			}
			first++
		}
		return nil
	})
	if err != nil {
		return e, fmt.Errorf("append audit entry %d: %w", e.Seq, badgerErr(err))
	}
	a.first, a.next = first, e.Seq+1
	return e, nil
}

// loadAuditLocked finds the oldest and newest entries on first use.
func (s *Store) loadAuditLocked() error {
	a := &s.audit
	if a.loaded {
		return nil
	}
	err := s.db.View(func(b *badger.Txn) error {
		first, ok, err := auditEnd(b, false)
		if err != nil || !ok {
			a.first, a.next = 1, 1
			return err
		}
		last, _, err := auditEnd(b, true)
		if err != nil {
			return err
		}
		a.first, a.next = first, last+1
		return nil
	})
	if err != nil {
		return fmt.Errorf("load audit trail: %w", err)
	}
	a.loaded = true
	return nil
}

// auditEnd returns the seq of the oldest (or, reverse, the newest) entry.
func auditEnd(b *badger.Txn, reverse bool) (uint64, bool, error) {
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = []byte(prefixAudit)
	opts.Reverse = reverse
	it := b.NewIterator(opts)
	defer it.Close()
	seek := []byte(prefixAudit)
	if reverse {
		seek = append(seek, 0xff)
	}
	for it.Seek(seek); it.Valid(); it.Next() {
		seq, err := strconv.ParseUint(strings.TrimPrefix(string(it.Item().Key()), prefixAudit), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("audit key %q: %w", it.Item().Key(), err)
		}
		return seq, true, nil
	}
	return 0, false, nil
}

// AuditQuery filters Audit.
type AuditQuery struct {
	// Since leaves out entries older than it; zero: none.
	Since time.Time
	// Actor keeps only the entries of this actor (exact); "": all.
	Actor string
	// Limit keeps the newest Limit entries; 0: all.
	Limit int
}

// Audit returns the audit entries q selects, oldest first.
func (s *Store) Audit(ctx context.Context, q AuditQuery) ([]schema.AuditEntry, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	out := []schema.AuditEntry{}
	errEnough := errors.New("enough")
	err := s.db.View(func(b *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(prefixAudit)
		opts.Reverse = true
		opts.PrefetchSize = 64
		it := b.NewIterator(opts)
		defer it.Close()
		for it.Seek(append([]byte(prefixAudit), 0xff)); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var e schema.AuditEntry
			err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &e) })
			if err != nil {
				// A damaged entry is left out, not a reason to hide the rest.
				s.log.Warn("audit entry does not decode", "key", string(it.Item().Key()), "err", err)
				continue
			}
			if (!q.Since.IsZero() && e.Time.Before(q.Since)) || (q.Actor != "" && e.Actor != q.Actor) {
				continue
			}
			out = append(out, e)
			if q.Limit > 0 && len(out) >= q.Limit {
				return errEnough
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("read audit trail: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}
