package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/store"
)

// Signature reuse. Every publish of a desired state used to sign it
// afresh, and a restarted hub signed every device's state before its
// first pass was done: with 10,000 devices, most of the republish a
// reconnecting fleet waits for (issue 45). An Ed25519 signature is
// deterministic: the same key over the same bytes gives the same
// signature, so a signature kept from an earlier publish, reused while
// the signer's identity (key, endorsement) is unchanged and the canonical
// bytes hash the same, gives a payload byte-identical to signing again.
// The cache lives beside the desired states in the store
// (store.DesiredSignatureKey, written outside the revisions): losing it,
// or a rotated key, costs a signature, never a wrong one.

// ReusableSigner is a DesiredSigner whose signatures the controller may
// keep and reuse while SignatureIdentity returns the same string
// (hub/pki.Signer is one). A signer that is not one signs every publish.
type ReusableSigner interface {
	DesiredSigner
	// SignatureIdentity names the key (and endorsement) signatures are
	// made with now; it changes whenever they would.
	SignatureIdentity() string
}

// signatureSep joins the canonical JSON's members and the signature
// member in a signed payload (schema.SignDesiredState).
const signatureSep = `,"signature":`

// sigEntry is a kept signature: the signature member's JSON as
// SignDesiredState appends it, the signer identity that made it and the
// SHA-256 of the canonical bytes it signs.
type sigEntry struct {
	sum      [sha256.Size]byte
	identity string
	member   []byte
}

// signedPayload is the payload SignDesiredState would return for
// canonical under identity, from e; ok is false when e does not fit.
func (e *sigEntry) signedPayload(canonical []byte, identity string, sum [sha256.Size]byte) ([]byte, bool) {
	if e == nil || e.identity != identity || e.sum != sum || len(canonical) < 3 {
		return nil, false
	}
	out := make([]byte, 0, len(canonical)+len(signatureSep)+len(e.member))
	out = append(out, canonical[:len(canonical)-1]...)
	out = append(out, signatureSep...)
	out = append(out, e.member...)
	return append(out, '}'), true
}

// newSigEntry keeps the signature of signed, the payload signing
// canonical returned; nil if signed is not canonical plus a signature
// member.
func newSigEntry(canonical, signed []byte, identity string, sum [sha256.Size]byte) *sigEntry {
	head := len(canonical) - 1
	if head < 1 || len(signed) < head+len(signatureSep)+2 || !bytes.Equal(signed[:head], canonical[:head]) ||
		string(signed[head:head+len(signatureSep)]) != signatureSep || signed[len(signed)-1] != '}' {
		return nil
	}
	return &sigEntry{sum: sum, identity: identity, member: bytes.Clone(signed[head+len(signatureSep) : len(signed)-1])}
}

// encode is the stored form: sum, identity's length (uvarint), identity,
// member.
func (e *sigEntry) encode() []byte {
	out := make([]byte, 0, sha256.Size+binary.MaxVarintLen64+len(e.identity)+len(e.member))
	out = append(out, e.sum[:]...)
	out = binary.AppendUvarint(out, uint64(len(e.identity)))
	out = append(out, e.identity...)
	return append(out, e.member...)
}

// decodeSigEntry reads encode's form; nil if val is not one.
func decodeSigEntry(val []byte) *sigEntry {
	if len(val) < sha256.Size+1 {
		return nil
	}
	e := &sigEntry{}
	copy(e.sum[:], val)
	n, w := binary.Uvarint(val[sha256.Size:])
	rest := val[sha256.Size+max(w, 0):]
	if w <= 0 || n > uint64(len(rest)) || int(n) == len(rest) {
		return nil
	}
	e.identity = string(rest[:n])
	e.member = bytes.Clone(rest[n:])
	return e
}

// sigCache holds the kept signatures by device (loop goroutine only) and
// writes their changes to the store from a goroutine of its own.
type sigCache struct {
	entries map[string]*sigEntry
	store   *store.Store
	log     *slog.Logger

	mu      sync.Mutex
	pending map[string][]byte // store key → encoded entry; nil deletes
	wake    chan struct{}
}

func newSigCache(st *store.Store, log *slog.Logger) *sigCache {
	return &sigCache{entries: map[string]*sigEntry{}, store: st, log: log, pending: map[string][]byte{}, wake: make(chan struct{}, 1)}
}

// replace installs the entries loaded from the store.
func (c *sigCache) replace(entries map[string]*sigEntry) {
	if entries == nil {
		entries = map[string]*sigEntry{}
	}
	c.entries = entries
}

// put keeps a device's new signature and queues it for the store.
func (c *sigCache) put(name string, e *sigEntry) {
	c.entries[name] = e
	c.queue(name, e.encode())
}

// remove forgets a removed device's signature.
func (c *sigCache) remove(name string) {
	if _, ok := c.entries[name]; !ok {
		return
	}
	delete(c.entries, name)
	c.queue(name, nil)
}

func (c *sigCache) queue(name string, val []byte) {
	c.mu.Lock()
	c.pending[store.DesiredSignatureKey(name)] = val
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sigCacheBatch bounds the keys of one store write (store.WriteCache:
// etcd's default --max-txn-ops is 128).
const sigCacheBatch = 100

// run writes the queued changes until ctx ends, then writes what is left
// (briefly: the store closes after the controller).
// A write under way when ctx ends is finished, not dropped.
func (c *sigCache) run(ctx context.Context) {
	flush := func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		c.flush(fctx)
	}
	for {
		select {
		case <-c.wake:
			flush()
		case <-ctx.Done():
			flush()
			return
		}
	}
}

// flush writes the queued changes in batches; a batch that fails is
// dropped (the signatures are signed again next time) and logged.
func (c *sigCache) flush(ctx context.Context) {
	c.mu.Lock()
	pending := c.pending
	c.pending = map[string][]byte{}
	c.mu.Unlock()
	batch := make(map[string][]byte, min(len(pending), sigCacheBatch))
	write := func() {
		if err := c.store.WriteCache(ctx, batch); err != nil {
			c.log.Warn("desired-state signatures not kept in the store; a restart signs them again", "count", len(batch), "err", err)
		}
		clear(batch)
	}
	for _, key := range keysOf(pending) {
		batch[key] = pending[key]
		if len(batch) == sigCacheBatch {
			write()
		}
	}
	if len(batch) > 0 {
		write()
	}
}

func keysOf(m map[string][]byte) []string {
	return slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
}

// loadSignatures reads the kept signatures, interning their identity.
func loadSignatures(t *store.Txn, log *slog.Logger) (map[string]*sigEntry, error) {
	out := map[string]*sigEntry{}
	idents := map[string]string{}
	err := t.Scan(store.DesiredSignaturePrefix, func(key string, val []byte) error {
		e := decodeSigEntry(val)
		if e == nil {
			log.Warn("kept desired-state signature does not decode; signing afresh", "key", key)
			return nil
		}
		if id, ok := idents[e.identity]; ok {
			e.identity = id
		} else {
			idents[e.identity] = e.identity
		}
		out[key[len(store.DesiredSignaturePrefix):]] = e
		return nil
	})
	return out, err
}

func sha256Sum(b []byte) [sha256.Size]byte { return sha256.Sum256(b) }
