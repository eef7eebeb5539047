// Package desired decides which DesiredState payloads from MQTT the agent
// accepts, and keeps only the latest accepted one for the reconciler.
//
// Admission is the whole policy, one type with one answer: Admit verifies
// a payload's signature against the hub's pinned key (package trust),
// orders it against what was accepted (generation, and the replay rule:
// ReplayGrace), pins the signing key of an accepted state (first use, or
// a rotation the pinned key endorsed) and records the refusal status
// shows, and returns it all as one Verdict for the agent to fan out
// (event, counters, status).
//
// Inbox is the agent's one buffer of desired state: a "latest" slot plus
// a capacity-1 wake channel, so the MQTT router never blocks and
// intermediate states that arrive while the reconciler is busy are
// skipped. Every payload is decoded, validated and ordered by generation
// as it arrives, and only the newest accepted state waits for the
// reconciler.
package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// Outcome says what Offer, or Admit, did with a payload.
type Outcome int

const (
	// Accepted: the payload is the new latest desired state.
	Accepted Outcome = iota
	// Duplicate: same store and generation as the latest; nothing to do.
	Duplicate
	// Stale: a lower generation than the latest from the same store.
	Stale
	// OtherDevice: the payload names another device; ignored.
	OtherDevice
	// Invalid: the payload does not decode or validate; ignored.
	Invalid
	// Cleared: an empty payload, the hub's way of clearing the retained
	// topic when the device is removed. The agent keeps its last state.
	Cleared
	// Replayed: Stale, and not merely overtaken on the way (ReplayGrace):
	// refused. Only Admit says it.
	Replayed
	// Unsigned: a key is pinned and the payload carries no signature;
	// refused. Only Admit says it.
	Unsigned
	// BadSignature: the signature is malformed, does not verify, or is
	// by a key neither pinned nor endorsed; refused. Only Admit says it.
	BadSignature
	// NoPin: no hub signing key is pinned, so nothing can be checked;
	// refused (unless the agent trusts the first key on purpose). Only
	// Admit says it.
	NoPin
)

func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case OtherDevice:
		return "other-device"
	case Invalid:
		return "invalid"
	case Cleared:
		return "cleared"
	case Replayed:
		return "replayed"
	case Unsigned:
		return "unsigned"
	case BadSignature:
		return "bad-signature"
	case NoPin:
		return "no-pin"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Inbox holds the latest accepted DesiredState for one device. It is safe
// for concurrent use; Offer never blocks.
type Inbox struct {
	device string
	wake   chan struct{}

	mu    sync.Mutex
	store string
	gen   int64
	// key is the signing key ID of the latest state ("" unsigned): a
	// state of another store signed by the same key must carry a higher
	// generation (the floor survives a new store; Offer).
	key     string
	have    bool
	pending *schema.DesiredState
	// pendingPayload is pending as received: the bytes to persist.
	pendingPayload []byte
	// last is the payload of the latest state, lastDS its decoded form:
	// the same bytes again (a retained message redelivered on every
	// reconnect) are a duplicate without decoding them.
	last   []byte
	lastDS *schema.DesiredState
}

// New returns an Inbox for device. current is the state already applied
// or persisted (nil for none): offers older than it are stale.
func New(device string, current *schema.DesiredState) *Inbox {
	in := &Inbox{device: device, wake: wake.New()}
	if current != nil {
		in.store, in.gen, in.have = current.Store, current.Generation, true
		in.key = signingKeyID(current)
	}
	return in
}

// Wake receives a value after Offer accepts a state. Several accepts may
// collapse into one wake; Take returns the latest.
func (in *Inbox) Wake() <-chan struct{} { return in.wake }

// Offer decodes and validates a payload and, if it is newer than what the
// inbox has seen, makes it the pending state. The returned state is the
// decoded payload (nil when it did not decode), not to be modified: a
// payload identical to the latest one is not decoded again, and gets the
// latest state; err explains Invalid. Offers may come from several
// goroutines at once, in any order: the newest generation wins.
//
// Decoding tolerates unknown fields so that a newer hub can add fields
// without breaking older agents; validation is schema.ValidateDesiredState.
func (in *Inbox) Offer(payload []byte) (Outcome, *schema.DesiredState, error) {
	if len(bytes.TrimSpace(payload)) == 0 {
		return Cleared, nil, nil
	}
	if len(payload) > schema.MaxManifestBytes {
		return Invalid, nil, fmt.Errorf("%w: desired state is %d bytes, more than %d", schema.ErrInvalid, len(payload), schema.MaxManifestBytes)
	}
	in.mu.Lock()
	if in.last != nil && bytes.Equal(payload, in.last) {
		ds := in.lastDS
		in.mu.Unlock()
		return Duplicate, ds, nil
	}
	in.mu.Unlock()
	var ds schema.DesiredState
	if err := json.Unmarshal(payload, &ds); err != nil {
		return Invalid, nil, fmt.Errorf("%w: decode desired state: %w", schema.ErrInvalid, err)
	}
	if ds.Device != in.device {
		return OtherDevice, &ds, nil
	}
	if err := schema.ValidateDesiredState(&ds); err != nil {
		return Invalid, &ds, fmt.Errorf("validate desired state: %w", err)
	}
	for i := range ds.Pods {
		schema.DefaultPodSpec(&ds.Pods[i].Spec)
	}

	key := signingKeyID(&ds)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.have && ds.Store != in.store && key != "" && key == in.key && ds.Generation <= in.gen {
		// Another store under the same signing key: a state captured
		// from a store this device has left (or an older one) is a
		// replay. A hub whose store is recreated rotates its signing
		// key, the signed store change that resets the floor.
		return Stale, &ds, nil
	}
	if in.have && ds.Store == in.store {
		switch {
		case ds.Generation < in.gen:
			return Stale, &ds, nil
		case ds.Generation == in.gen:
			if in.last == nil {
				in.last, in.lastDS = bytes.Clone(payload), &ds
			}
			return Duplicate, &ds, nil
		}
	}
	in.store, in.gen, in.key, in.have = ds.Store, ds.Generation, key, true
	in.last, in.lastDS = bytes.Clone(payload), &ds
	in.pending, in.pendingPayload = &ds, in.last
	wake.Signal(in.wake)
	return Accepted, &ds, nil
}

// signingKeyID is the key ID a state's signature names ("" unsigned).
// Offer sees only payloads whose signature the admission verified.
func signingKeyID(ds *schema.DesiredState) string {
	if ds.Signature == nil {
		return ""
	}
	return ds.Signature.KeyID
}

// Take returns the pending state, if any, and the payload it was decoded
// from (not to be modified), and clears the slot.
func (in *Inbox) Take() (*schema.DesiredState, []byte, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ds, payload := in.pending, in.pendingPayload
	in.pending, in.pendingPayload = nil, nil
	return ds, payload, ds != nil
}

// Latest returns the store and generation of the newest state the inbox
// has accepted, or started from (ok: there is one).
func (in *Inbox) Latest() (store string, gen int64, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.store, in.gen, in.have
}
