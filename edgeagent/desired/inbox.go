// Package desired receives DesiredState payloads from MQTT and keeps only
// the latest acceptable one for the reconciler: a "latest" slot plus a
// capacity-1 wake channel, so the MQTT router never blocks and
// intermediate states that arrive while the reconciler is busy are skipped.
// It is the agent's one buffer of desired state: every payload is judged
// (decoded, validated, ordered by generation) as it arrives, and only the
// newest accepted state waits for the reconciler.
package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// Outcome says what Offer did with a payload.
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
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Inbox holds the latest accepted DesiredState for one device. It is safe
// for concurrent use; Offer never blocks.
type Inbox struct {
	device string
	wake   chan struct{}

	mu      sync.Mutex
	store   string
	gen     int64
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

	in.mu.Lock()
	defer in.mu.Unlock()
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
	in.store, in.gen, in.have = ds.Store, ds.Generation, true
	in.last, in.lastDS = bytes.Clone(payload), &ds
	in.pending, in.pendingPayload = &ds, in.last
	wake.Signal(in.wake)
	return Accepted, &ds, nil
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
