package remote

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// MaxRememberedNonces bounds the nonces a Verifier remembers: with every
// one kept at most schema.RequestExpiry + 2 × schema.MaxRequestClockSkew,
// that is over 100 requests a second, sustained; beyond it requests are
// refused (errNoncesFull), never let through unchecked.
const MaxRememberedNonces = 1 << 16

// errNoncesFull: the Verifier remembers MaxRememberedNonces unexpired
// nonces and cannot take another.
var errNoncesFull = errors.New("too many requests within the expiry window: no room to remember another nonce")

// Verifier authenticates the requests to a device (schema/requestsig.go):
// the signature with the pinned hub key, kind, device and expiry
// (schema.VerifyRequest), then the nonce against those it accepted. It
// is the one place where every request kind is checked (Verify); it is
// safe for concurrent use.
type Verifier struct {
	device string
	key    func() ed25519.PublicKey
	now    func() time.Time
	// floor: a request expiring before it may have been accepted by a
	// previous run of the agent, whose nonces are forgotten.
	floor time.Time

	mu        sync.Mutex
	seen      map[[schema.RequestNonceBytes]byte]time.Time // nonce → forget after
	peak      int
	nextSweep time.Time
}

// NewVerifier returns a Verifier for device, checking with the key key
// returns (trust.Pin's Key: nil while none is pinned, and then every
// request is refused), at the time now returns (nil: time.Now).
func NewVerifier(device string, key func() ed25519.PublicKey, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	t := now()
	return &Verifier{
		device: device, key: key, now: now,
		floor:     t.Add(schema.RequestExpiry - schema.MaxRequestClockSkew),
		seen:      map[[schema.RequestNonceBytes]byte]time.Time{},
		nextSweep: t.Add(time.Minute),
	}
}

// Verify authenticates a payload of request kind kind and returns it
// decoded by decode. The error wraps schema.ErrRequestRefused when the
// request is not authentic (nothing of it may be acted on), errNoncesFull
// when there is no room to remember it, or is decode's.
func Verify[T schema.DeviceRequest](v *Verifier, kind string, payload []byte, decode func([]byte) (T, error)) (T, error) {
	var zero T
	var key ed25519.PublicKey
	if v.key != nil {
		key = v.key()
	}
	now := v.now()
	r, err := schema.VerifyRequest(payload, schema.RequestCheck{Key: key, Kind: kind, Device: v.device, Now: now}, decode)
	if err != nil {
		return zero, err
	}
	auth := schema.AuthOf(r)
	if auth.Expires.Before(v.floor) {
		return zero, fmt.Errorf("%w: signed before this agent started (expires %s)", schema.ErrRequestExpired, auth.Expires.UTC().Format(time.RFC3339))
	}
	if err := v.remember(auth, now); err != nil {
		return zero, err
	}
	return r, nil
}

// remember records the nonce until auth.Expires + MaxRequestClockSkew;
// it fails if the nonce is remembered already (a replay).
func (v *Verifier) remember(auth schema.RequestAuth, now time.Time) error {
	var n [schema.RequestNonceBytes]byte
	if _, err := hex.Decode(n[:], []byte(auth.Nonce)); err != nil { // checked by VerifyRequest
		return fmt.Errorf("%w: nonce: %w", schema.ErrRequestMalformed, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.seen[n]; ok {
		return fmt.Errorf("%w: nonce %s was used before", schema.ErrRequestReplayed, auth.Nonce)
	}
	if now.After(v.nextSweep) || len(v.seen) >= MaxRememberedNonces {
		v.sweep(now)
	}
	if len(v.seen) >= MaxRememberedNonces {
		return errNoncesFull
	}
	v.seen[n] = auth.Expires.Add(schema.MaxRequestClockSkew)
	v.peak = max(v.peak, len(v.seen))
	return nil
}

// sweep forgets the nonces past their time; a map that shrank to less
// than a quarter of its peak is rebuilt, to give its memory back.
func (v *Verifier) sweep(now time.Time) {
	v.nextSweep = now.Add(time.Minute)
	for n, until := range v.seen {
		if now.After(until) {
			delete(v.seen, n)
		}
	}
	if v.peak > 1024 && len(v.seen) < v.peak/4 {
		m := make(map[[schema.RequestNonceBytes]byte]time.Time, len(v.seen))
		for n, until := range v.seen {
			m[n] = until
		}
		v.seen, v.peak = m, len(m)
	}
}

// remembered returns the number of nonces remembered (tests).
func (v *Verifier) remembered() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen)
}
