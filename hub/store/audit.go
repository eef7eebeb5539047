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

	"github.com/fleetmq/fleet/schema"
)

// The audit trail: v1/audit/{seq}, seq in 20 digits, each a
// schema.AuditEntry carrying the hash of the one before (auditchain.go).
// Entries are numbered without gaps from the oldest kept to the newest.
// They are kept by age (Options.AuditRetention) and size
// (Options.AuditMaxBytes), never by count: an append, or PruneAudit,
// deletes the oldest entries past either bound in the same (synced)
// transaction, and records the last one deleted as the chain's anchor.
// Appends do not bump the store revision: the trail is no object, and
// watchers have nothing to see.

// Defaults of Options.AuditRetention and AuditMaxBytes.
const (
	DefaultAuditRetention = 90 * 24 * time.Hour
	DefaultAuditMaxBytes  = 100 << 20
)

const prefixAudit = "v1/audit/"

// maxAuditTrim bounds the deletes of one transaction, so that a store
// reopened with much lower bounds prunes over a few appends instead of
// in one transaction too big for Badger.
const maxAuditTrim = 1000

// AuditKey is the key of audit entry seq.
func AuditKey(seq uint64) string { return fmt.Sprintf("%s%020d", prefixAudit, seq) }

// auditLog is where the trail stands: the keys [first, next) exist.
type auditLog struct {
	mu        sync.Mutex
	retention time.Duration
	maxBytes  int64
	loaded    bool
	first     uint64
	next      uint64
	// lastHash is the Hash of entry next-1 (or the anchor's).
	lastHash string
	// bytes is the size of the entries' keys and values.
	bytes int64
	// firstTime is the Time of entry first; zero when not known.
	firstTime time.Time
	anchor    schema.AuditAnchor
}

// AppendAudit stores e as the newest audit entry and returns it with its
// Seq, Prev and Hash (and Time, if it had none). It is written with
// Badger's sync writes, like every other write. e must hold no token or
// Secret value: the store keeps it as it is.
func (s *Store) AppendAudit(ctx context.Context, e schema.AuditEntry) (schema.AuditEntry, error) {
	if err := s.acquire(ctx); err != nil {
		return e, err
	}
	defer s.release()
	a := &s.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := s.loadAuditLocked(ctx); err != nil {
		return e, err
	}
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	e.Time = e.Time.UTC()
	if !e.Until.IsZero() {
		e.Until = e.Until.UTC()
	}
	in := e
	var final auditPos
	seenPos, seenNext, seenHash := a.position(), a.next, a.lastHash
	err := engineUpdate(ctx, s.eng, func(b engineTxn) error {
		pos, next, lastHash := seenPos, seenNext, seenHash
		if s.follow != nil {
			// Other hubs append too: go on after their entries.
			if err := catchUpAudit(b, &pos, &next, &lastHash); err != nil {
				return err
			}
			// An entry, once written, stays as it is (pruning takes only
			// the oldest): a retry after a conflict goes on from here, not
			// from this hub's last append. Else a hub behind a busy one
			// reads every entry since, each attempt, and loses each race.
			seenPos, seenNext, seenHash = pos, next, lastHash
		}
		e = in
		e.Seq, e.Prev, e.Hash = next, lastHash, ""
		val, err := chainEntry(&e)
		if err != nil {
			return err
		}
		key := AuditKey(e.Seq)
		pos.bytes += int64(len(key) + len(val))
		if pos.first == e.Seq {
			pos.firstTime = e.Time
		}
		if err := b.set(key, val); err != nil {
			return err
		}
		if err := a.prune(b, &pos, e.Seq+1, s.now()); err != nil {
			return err
		}
		final = pos
		return nil
	})
	if err != nil {
		return e, fmt.Errorf("append audit entry %d: %w", e.Seq, err)
	}
	a.set(final)
	a.next, a.lastHash = e.Seq+1, e.Hash
	return e, nil
}

// catchUpAudit moves next (and lastHash, the trail's size) past the
// entries other hubs appended since this one last looked. Each key it
// reads, the free one included, is part of the transaction's compares, so
// two hubs never write the same entry.
func catchUpAudit(b engineTxn, pos *auditPos, next *uint64, lastHash *string) error {
	for {
		key := AuditKey(*next)
		val, ok, err := b.get(key)
		if err != nil || !ok {
			return err
		}
		var e schema.AuditEntry
		if err := json.Unmarshal(val, &e); err != nil {
			*lastHash = "" // damaged: VerifyAudit names it
		} else {
			*lastHash = e.Hash
		}
		pos.bytes += int64(len(key) + len(val))
		*next++
	}
}

// PruneAudit deletes the entries past the trail's age and size bounds
// (at most maxAuditTrim of them), as appends do: the hub calls it now and
// then, so that a quiet trail is pruned too.
func (s *Store) PruneAudit(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	a := &s.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := s.loadAuditLocked(ctx); err != nil {
		return err
	}
	pos := a.position()
	if !a.due(pos, s.now()) {
		return nil
	}
	start := pos
	err := engineUpdate(ctx, s.eng, func(b engineTxn) error {
		pos = start
		return a.prune(b, &pos, a.next, s.now())
	})
	if err != nil {
		return fmt.Errorf("prune audit trail: %w", err)
	}
	a.set(pos)
	return nil
}

// loadAuditLocked finds the oldest and newest entries, the trail's size
// and the chain's anchor on first use.
func (s *Store) loadAuditLocked(ctx context.Context) error {
	a := &s.audit
	if a.loaded {
		return nil
	}
	var legacy bool
	err := engineView(ctx, s.eng, func(b engineTxn) error {
		anchor, err := readAnchor(b)
		if err != nil {
			return err
		}
		a.anchor, a.lastHash = anchor, anchor.Hash
		a.first, a.next, a.bytes = anchor.Seq+1, anchor.Seq+1, 0
		first, ok, err := auditEnd(b, false)
		if err != nil || !ok {
			return err
		}
		last, _, err := auditEnd(b, true)
		if err != nil {
			return err
		}
		a.first, a.next = first, last+1
		if a.bytes, err = auditBytes(b); err != nil {
			return err
		}
		oldest, err := readAuditEntry(b, first)
		if err == nil {
			a.firstTime = oldest.Time
		}
		newest, err := readAuditEntry(b, last)
		if err != nil {
			// Damaged: the trail goes on (VerifyAudit names the entry).
			s.log.Warn("newest audit entry does not decode", "seq", last, "err", err)
			a.lastHash = ""
			return nil
		}
		a.lastHash = newest.Hash
		// A trail written before the chain: its entries stay, unchained,
		// and the chain starts after them.
		legacy = newest.Hash == "" && anchor.Seq < last
		return nil
	})
	if err != nil {
		return fmt.Errorf("load audit trail: %w", err)
	}
	if legacy {
		anchor := schema.AuditAnchor{Seq: a.next - 1}
		if err := engineUpdate(ctx, s.eng, func(b engineTxn) error { return writeAnchor(b, anchor) }); err != nil {
			return fmt.Errorf("start the audit chain: %w", err)
		}
		a.anchor = anchor
	}
	a.loaded = true
	return nil
}

// auditEnd returns the seq of the oldest (or, reverse, the newest) entry.
func auditEnd(b engineTxn, reverse bool) (uint64, bool, error) {
	var seq uint64
	var found bool
	errFound := errors.New("found")
	err := b.scan(prefixAudit, reverse, func(key string, _ []byte) error {
		n, err := strconv.ParseUint(strings.TrimPrefix(key, prefixAudit), 10, 64)
		if err != nil {
			return fmt.Errorf("audit key %q: %w", key, err)
		}
		seq, found = n, true
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return 0, false, err
	}
	return seq, found, nil
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
	err := engineView(ctx, s.eng, func(b engineTxn) error {
		return b.scan(prefixAudit, true, func(key string, v []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var e schema.AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				// A damaged entry is left out, not a reason to hide the rest.
				s.log.Warn("audit entry does not decode", "key", key, "err", err)
				return nil
			}
			if (!q.Since.IsZero() && e.Time.Before(q.Since)) || (q.Actor != "" && e.Actor != q.Actor) {
				return nil
			}
			out = append(out, e)
			if q.Limit > 0 && len(out) >= q.Limit {
				return errEnough
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("read audit trail: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}
