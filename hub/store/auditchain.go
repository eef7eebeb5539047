package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// The audit trail is a hash chain: each entry's Prev is the Hash of the
// entry before it, and its Hash is the hex SHA-256 of Prev followed by
// its canonical JSON (encoding/json of the entry with Hash ""; Prev is in
// it too). Editing an entry breaks its own hash; rewriting its hash
// breaks the next entry's Prev; deleting one leaves a gap in the seqs.
// Pruning deletes the oldest entries and keeps the hash of the last one
// deleted under keyAuditAnchor, so that the oldest kept entry still has
// something to chain to.

const keyAuditAnchor = "v1/auditanchor"

// AuditEntryHash is the hash an entry must carry: SHA-256 over e.Prev and
// e's canonical JSON (with Hash "").
func AuditEntryHash(e schema.AuditEntry) (string, error) {
	e.Hash = ""
	b, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("audit entry %d: %w", e.Seq, err)
	}
	h := sha256.New()
	h.Write([]byte(e.Prev))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// chainEntry sets e.Hash and returns the JSON to store.
func chainEntry(e *schema.AuditEntry) ([]byte, error) {
	h, err := AuditEntryHash(*e)
	if err != nil {
		return nil, err
	}
	e.Hash = h
	return json.Marshal(e)
}

func readAnchor(b engineTxn) (schema.AuditAnchor, error) {
	var a schema.AuditAnchor
	v, ok, err := b.get(keyAuditAnchor)
	if err != nil || !ok {
		return a, err
	}
	if err := json.Unmarshal(v, &a); err != nil {
		return a, fmt.Errorf("audit anchor: %w", err)
	}
	return a, nil
}

func writeAnchor(b engineTxn, a schema.AuditAnchor) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return b.set(keyAuditAnchor, v)
}

// readAuditEntry reads entry seq.
func readAuditEntry(b engineTxn, seq uint64) (schema.AuditEntry, error) {
	var e schema.AuditEntry
	v, ok, err := b.get(AuditKey(seq))
	if err != nil {
		return e, err
	}
	if !ok {
		return e, fmt.Errorf("audit entry %d: %w", seq, ErrNotFound)
	}
	return e, json.Unmarshal(v, &e)
}

// auditBytes is the size of the trail's keys and values.
func auditBytes(b engineTxn) (int64, error) {
	var n int64
	err := b.scan(prefixAudit, false, func(key string, val []byte) error {
		n += int64(len(key) + len(val))
		return nil
	})
	return n, err
}

// auditPos is what a pruning transaction changes, applied to the
// auditLog once it commits.
type auditPos struct {
	first     uint64
	bytes     int64
	firstTime time.Time
	anchor    schema.AuditAnchor
}

func (a *auditLog) position() auditPos {
	return auditPos{first: a.first, bytes: a.bytes, firstTime: a.firstTime, anchor: a.anchor}
}

func (a *auditLog) set(p auditPos) {
	a.first, a.bytes, a.firstTime, a.anchor = p.first, p.bytes, p.firstTime, p.anchor
}

// due reports whether the oldest entry may be past a bound.
func (a *auditLog) due(p auditPos, now time.Time) bool {
	over := a.maxBytes > 0 && p.bytes > a.maxBytes
	old := a.retention > 0 && (p.firstTime.IsZero() || now.Sub(p.firstTime) > a.retention)
	return over || old
}

// prune deletes, in b, the oldest entries past the age or size bound,
// never the newest (next-1), and moves the anchor to the last one it
// deletes.
func (a *auditLog) prune(b engineTxn, p *auditPos, next uint64, now time.Time) error {
	if !a.due(*p, now) {
		return nil
	}
	anchor := p.anchor
	for n := 0; n < maxAuditTrim && p.first+1 < next; n++ {
		key := AuditKey(p.first)
		val, ok, err := b.get(key)
		if err != nil {
			return err
		}
		if !ok {
			p.first++ // a gap: VerifyAudit names it
			continue
		}
		var e schema.AuditEntry
		decodeErr := json.Unmarshal(val, &e)
		over := a.maxBytes > 0 && p.bytes > a.maxBytes
		old := a.retention > 0 && decodeErr == nil && now.Sub(e.Time) > a.retention
		if !over && !old {
			p.firstTime = e.Time
			break
		}
		if err := b.del(key); err != nil {
			return err
		}
		if p.first > anchor.Seq {
			// A damaged entry's hash is lost: the next entry's Prev then
			// no longer matches, and VerifyAudit says so.
			anchor = schema.AuditAnchor{Seq: p.first, Hash: e.Hash}
		}
		p.bytes -= int64(len(key) + len(val))
		p.first++
		p.firstTime = time.Time{}
	}
	if anchor == p.anchor {
		return nil
	}
	p.anchor = anchor
	return writeAnchor(b, anchor)
}

// VerifyAudit checks the chain end to end, from the anchor to the newest
// entry, and names the first entry that breaks it: missing, undecodable,
// out of place, not chained to the one before, or edited. An error is
// returned only if the store cannot be read.
func (s *Store) VerifyAudit(ctx context.Context) (schema.AuditVerification, error) {
	v := schema.AuditVerification{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "AuditVerification"}}
	if err := s.acquire(ctx); err != nil {
		return v, err
	}
	defer s.release()
	// Appends wait: the trail is read at one point.
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	err := engineView(ctx, s.eng, func(b engineTxn) error {
		anchor, err := readAnchor(b)
		if err != nil {
			v.Broken = &schema.AuditBreak{Reason: "the anchor (hash of the last pruned entry) does not decode: " + err.Error()}
			return nil
		}
		v.Anchor = anchor
		if err := verifyChain(ctx, b, &v); err != nil {
			return err
		}
		// The tail: what this process wrote must still be there.
		if a := &s.audit; v.Broken == nil && a.loaded && a.next-1 > max(v.LastSeq, anchor.Seq) {
			v.Broken = &schema.AuditBreak{Seq: max(v.LastSeq, anchor.Seq) + 1, Reason: fmt.Sprintf("missing: the hub wrote entries up to %d", a.next-1)}
		}
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("verify audit trail: %w", err)
	}
	v.OK = v.Broken == nil
	return v, nil
}

// verifyChain walks the entries oldest first.
func verifyChain(ctx context.Context, b engineTxn, v *schema.AuditVerification) error {
	want, prev := v.Anchor.Seq+1, v.Anchor.Hash
	// errBroken stops the walk at the first break (v.Broken says which).
	errBroken := errors.New("broken")
	err := b.scan(prefixAudit, false, func(key string, val []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		seq, err := strconv.ParseUint(strings.TrimPrefix(key, prefixAudit), 10, 64)
		if err != nil {
			v.Broken = &schema.AuditBreak{Reason: fmt.Sprintf("key %q is no audit entry's", key)}
			return errBroken
		}
		if seq <= v.Anchor.Seq {
			v.Unchained++ // older than the chain
			return nil
		}
		brk := func(format string, a ...any) error {
			v.Broken = &schema.AuditBreak{Seq: seq, Reason: fmt.Sprintf(format, a...)}
			return errBroken
		}
		if seq != want {
			v.Broken = &schema.AuditBreak{Seq: want, Reason: fmt.Sprintf("missing: the next entry kept is %d", seq)}
			return errBroken
		}
		var e schema.AuditEntry
		if err := json.Unmarshal(val, &e); err != nil {
			return brk("does not decode: %v", err)
		}
		if e.Seq != seq {
			return brk("holds seq %d: moved", e.Seq)
		}
		if e.Prev != prev {
			return brk("its prev hash is not the hash of entry %d: an entry before it was removed or rewritten", seq-1)
		}
		h, err := AuditEntryHash(e)
		if err != nil {
			return brk("%v", err)
		}
		if h != e.Hash {
			return brk("edited: its hash does not match its content")
		}
		if v.Entries == 0 {
			v.FirstSeq = seq
		}
		v.Entries++
		v.LastSeq, v.Head = seq, e.Hash
		want, prev = seq+1, e.Hash
		return nil
	})
	if errors.Is(err, errBroken) {
		return nil
	}
	return err
}
