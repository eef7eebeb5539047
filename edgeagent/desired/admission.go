package desired

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// ReplayGrace is how long after accepting a desired state an older one
// from the same store counts as overtaken on the way (paho hands each
// message to its own goroutine, so two states published back to back can
// be judged in either order) rather than replayed. A state older than one
// the agent already superseded is a replay whenever it comes.
const ReplayGrace = time.Second

// AdmissionOptions configures an Admission. Device and Pin are required.
type AdmissionOptions struct {
	// Device is the device whose states are admitted.
	Device string
	// Current is the state already applied or persisted (nil: none). It
	// starts the inbox, and an older state of its store is a replay.
	Current *schema.DesiredState
	// Pin is the hub's pinned signing key (package trust).
	Pin *trust.Pin
	// Clock dates acceptances for ReplayGrace (default the real clock).
	Clock clock.Clock
	// Logger receives a line for each payload (default: discard).
	Logger *slog.Logger
	// InsecureTrustFirstKey: while no key is pinned, accept unsigned
	// states and pin the key of the first signed one (trust on first
	// use; the agent's --insecure-trust-first-key). Default false: with
	// no key pinned every state from the broker is refused (NoPin), for
	// whoever reaches the device's topic first would own the device.
	InsecureTrustFirstKey bool
}

// Admission is the agent's one policy for accepting a desired state: it
// verifies a payload's signature (trust.Pin.Check), orders it against
// what was accepted (the Inbox, and the replay rule of ReplayGrace),
// pins the signing key of an accepted state (first use or a rotation the
// pinned key endorsed: trust.Pin.Commit) and records the refusal that
// status shows. Admit returns all it decided as one Verdict; the caller
// raises its event, counts it and republishes status.
//
// It is safe for concurrent use: payloads may be admitted from several
// goroutines at once, in any order, and nothing depends on arrival
// order. The inbox orders states by generation, and a refusal is shown
// only while no newer state has been accepted.
type Admission struct {
	inbox *Inbox
	pin   *trust.Pin
	clock clock.Clock
	log   *slog.Logger
	// firstUse: InsecureTrustFirstKey.
	firstUse bool

	mu      sync.Mutex
	refused refusal
	// lastAccept is the newest state accepted: its store and
	// generation, the generation it superseded, and when (zero for the
	// state the admission started from).
	lastAccept struct {
		store     string
		gen, prev int64
		at        time.Time
	}
}

// refusal is the message shown in status about a payload that was not
// applied, with the generation it carried (if it decoded that far).
type refusal struct {
	msg      string
	store    string
	gen      int64
	knownGen bool
}

// Verdict is what Admit decided about one payload.
type Verdict struct {
	// Outcome is what became of the payload: Accepted, Duplicate and
	// Stale change nothing shown; every other outcome is a refusal.
	Outcome Outcome
	// State is the decoded payload (nil when it was refused for its
	// signature or did not decode), not to be modified.
	State *schema.DesiredState
	// Err says why an Invalid, Unsigned or BadSignature payload was
	// refused.
	Err error
	// Signature is what trust found in the signature of a payload that
	// passed the check (the zero Verdict otherwise).
	Signature trust.Verdict
	// Event is the event to raise (nil: none): a warning for a refusal,
	// a normal event for a key pinned on first use or after a rotation.
	Event *schema.Event
	// StatusChanged: the refusal status shows (Admission.Refusal)
	// changed, so status is to be republished.
	StatusChanged bool
}

// NewAdmission returns an Admission whose inbox starts from o.Current.
func NewAdmission(o AdmissionOptions) *Admission {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ad := &Admission{inbox: New(o.Device, o.Current), pin: o.Pin, clock: o.Clock, log: o.Logger, firstUse: o.InsecureTrustFirstKey}
	if o.Current != nil {
		ad.lastAccept.store, ad.lastAccept.gen = o.Current.Store, o.Current.Generation
	}
	switch {
	case o.Pin.Key() != nil:
	case ad.firstUse:
		o.Logger.Warn("no hub signing key pinned: the key of the first signed desired state is pinned (--insecure-trust-first-key); whoever publishes on this device's topic first owns it")
	default:
		o.Logger.Warn(trust.ErrNoPin.Error() + "; every desired state from the broker is refused, the persisted state keeps running")
	}
	return ad
}

// Inbox is where accepted states wait for the reconciler.
func (ad *Admission) Inbox() *Inbox { return ad.inbox }

// Refusal is the message status shows about the last payload refused
// ("" none, or a newer state was accepted since).
func (ad *Admission) Refusal() string {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	return ad.refused.msg
}

// Admit judges a desired-state payload: the signature first (nothing of
// a forged state is looked at), then the order, then the pin. An
// accepted state is in the inbox when Admit returns. The last good state
// keeps running whatever the verdict.
func (ad *Admission) Admit(payload []byte) Verdict {
	var sig trust.Verdict
	if len(bytes.TrimSpace(payload)) > 0 && len(payload) <= schema.MaxManifestBytes {
		v, err := ad.pin.Check(payload)
		if err == nil && v.Pinned == nil && !ad.firstUse {
			err = trust.ErrNoPin // nothing to check it by: nothing runs
		}
		if err != nil {
			return ad.refuseSignature(err)
		}
		sig = v
	}
	out, ds, err := ad.inbox.Offer(payload)
	v := Verdict{Outcome: out, State: ds, Err: err, Signature: sig}
	switch out {
	case Accepted:
		ad.log.Info("received desired state", "generation", ds.Generation, "store", ds.Store, "pods", len(ds.Pods), "key", sig.KeyID())
		v.StatusChanged = ad.accepted(ds)
		v.Event = ad.pinKey(sig)
	case Duplicate:
		ad.log.Debug("desired state unchanged", "generation", ds.Generation)
		v.Event = ad.pinKey(sig) // the same state, re-signed after a rotation
	case Stale:
		if !ad.replayed(ds) {
			ad.log.Info("ignoring stale desired state", "generation", ds.Generation, "store", ds.Store)
			break
		}
		store, gen, _ := ad.inbox.Latest()
		msg := fmt.Sprintf("refused a replayed desired state: generation %d is older than generation %d already applied", ds.Generation, gen)
		if store != ds.Store {
			msg = fmt.Sprintf("refused a replayed desired state: generation %d of store %s is not above generation %d of store %s already applied under the same signing key (a hub whose store was recreated rotates its signing key: fleet-hub rotate-signing-key)", ds.Generation, ds.Store, gen, store)
		}
		ad.log.Warn(msg+"; last good state keeps running", "store", ds.Store)
		v.Outcome, v.Event = Replayed, warning("DesiredStateReplayed", msg)
		v.StatusChanged = ad.refuse(msg, nil)
	case OtherDevice:
		msg := fmt.Sprintf("refused a desired state addressed to device %q", ds.Device)
		ad.log.Warn(msg + "; last good state keeps running")
		v.Event = warning("DesiredStateOtherDevice", msg)
		v.StatusChanged = ad.refuse(msg, nil)
	case Invalid:
		ad.log.Warn("invalid desired state ignored; last good state keeps running", "err", err)
		v.Event = warning("InvalidDesiredState", err.Error())
		v.StatusChanged = ad.refuse("refused the last desired state: "+err.Error(), ds)
	case Cleared:
		// The hub clears the retained topic when the device is deleted.
		// Removing every workload because a retained message vanished
		// (a broker that lost its retained store, an operator's mistake)
		// would break the autonomy guarantee, so the agent keeps running
		// its last state and says so. To stop workloads the hub publishes
		// a DesiredState with no pods.
		ad.log.Warn("hub cleared the desired state topic; keeping the last desired state")
		v.Event = warning("DesiredStateCleared", "desired state topic cleared (device removed?); keeping the last desired state running")
		v.StatusChanged = ad.refuse("desired state topic cleared by the hub; running the last desired state", nil)
	}
	return v
}

func warning(reason, msg string) *schema.Event {
	return &schema.Event{Type: schema.EventWarning, Reason: reason, Message: msg}
}

// refuseSignature is the verdict on a state refused for its signature.
func (ad *Admission) refuseSignature(err error) Verdict {
	v := Verdict{Outcome: BadSignature, Err: err}
	reason, msg := "DesiredStateBadSignature", "refused a desired state with a bad signature: "+err.Error()
	switch {
	case errors.Is(err, trust.ErrNoPin):
		v.Outcome = NoPin
		reason, msg = "DesiredStateUntrusted", "refused a desired state: "+err.Error()
	case errors.Is(err, trust.ErrUnsigned):
		v.Outcome = Unsigned
		reason, msg = "DesiredStateUnsigned", "refused an unsigned desired state: "+err.Error()
	}
	ad.log.Warn(msg + "; last good state keeps running")
	v.Event = warning(reason, msg)
	v.StatusChanged = ad.refuse(msg, nil)
	return v
}

// pinKey pins the key of an accepted state's signature when it is new:
// on first use, or a rotation the pinned key endorsed. It returns the
// event saying so (nil: nothing pinned).
func (ad *Admission) pinKey(v trust.Verdict) *schema.Event {
	changed, err := ad.pin.Commit(v)
	if err != nil {
		ad.log.Error("could not pin the hub's signing key", "key", v.KeyID(), "err", err)
		return nil
	}
	if !changed {
		return nil
	}
	if v.FirstUse {
		msg := "pinned the hub's signing key " + v.KeyID() + " on first use"
		ad.log.Info(msg)
		return &schema.Event{Type: schema.EventNormal, Reason: "HubSigningKeyPinned", Message: msg}
	}
	msg := fmt.Sprintf("the hub rotated its signing key: pinned key %s, endorsed by key %s", v.KeyID(), schema.SigningKeyID(v.Pinned))
	ad.log.Info(msg)
	return &schema.Event{Type: schema.EventNormal, Reason: "HubSigningKeyRotated", Message: msg}
}

// replayed reports whether a stale state is a replay rather than one
// overtaken on the way (ReplayGrace).
func (ad *Admission) replayed(ds *schema.DesiredState) bool {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	l := ad.lastAccept
	if l.at.IsZero() || l.store != ds.Store {
		return true // older than the state the agent started from
	}
	return ds.Generation <= l.prev || ad.clock.Now().Sub(l.at) > ReplayGrace
}

// refuse records a refusal unless the payload is older than a state
// already accepted from the same store, and reports whether the message
// changed. It reads the inbox's newest state under ad.mu, and accepted
// runs after the inbox has taken a state, also under ad.mu: whichever
// runs first, a refusal never outlives the acceptance of a newer state.
func (ad *Admission) refuse(msg string, ds *schema.DesiredState) bool {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	r := refusal{msg: msg}
	if ds != nil && ds.Generation > 0 {
		r.store, r.gen, r.knownGen = ds.Store, ds.Generation, true
		if store, gen, ok := ad.inbox.Latest(); ok && ds.Store == store && ds.Generation <= gen {
			return false
		}
	}
	changed := ad.refused.msg != msg
	ad.refused = r
	return changed
}

// accepted notes the newly accepted state ds and clears a refusal that ds
// supersedes; it reports whether it cleared one.
func (ad *Admission) accepted(ds *schema.DesiredState) bool {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if l := &ad.lastAccept; ds.Store != l.store || ds.Generation > l.gen {
		prev := l.gen
		if ds.Store != l.store {
			prev = 0
		}
		l.store, l.gen, l.prev, l.at = ds.Store, ds.Generation, prev, ad.clock.Now()
	}
	r := ad.refused
	clear := r.msg != "" && (!r.knownGen || r.store != ds.Store || r.gen <= ds.Generation)
	if clear {
		ad.refused = refusal{}
	}
	return clear
}
