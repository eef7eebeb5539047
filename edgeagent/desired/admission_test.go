package desired

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

func signingKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubKey(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// signedPayload is payload signed as the hub signs it.
func signedPayload(t *testing.T, k ed25519.PrivateKey, e *schema.KeyEndorsement, device string, gen int64) []byte {
	t.Helper()
	b, err := schema.SignDesiredState(payload(t, device, "s1", gen), k, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newAdmission starts an admission for dev1 from generation 5 of store
// s1, with pinned (nil: none) pinned in a fresh state directory. With
// none pinned it trusts the first key (the old behaviour these cases
// describe); newStrictAdmission does not.
func newAdmission(t *testing.T, pinned ed25519.PublicKey) (*Admission, *clock.Fake, string) {
	return newAdmissionFrom(t, pinned, pinned == nil, &schema.DesiredState{Device: "dev1", Store: "s1", Generation: 5})
}

// newAdmissionFrom is newAdmission from current, trusting the first key
// only with firstUse.
func newAdmissionFrom(t *testing.T, pinned ed25519.PublicKey, firstUse bool, current *schema.DesiredState) (*Admission, *clock.Fake, string) {
	t.Helper()
	dir := t.TempDir()
	if pinned != nil {
		if err := trust.Save(dir, pinned); err != nil {
			t.Fatal(err)
		}
	}
	pin, err := trust.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1e9, 0))
	ad := NewAdmission(AdmissionOptions{
		Device: "dev1", Current: current, Pin: pin, Clock: clk, InsecureTrustFirstKey: firstUse,
	})
	return ad, clk, dir
}

// pinnedKey is the key in dir's pin file (nil: none).
func pinnedKey(t *testing.T, dir string) ed25519.PublicKey {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, trust.PinFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	p, err := trust.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p.Key()
}

// TestAdmit: every verdict, from an admission started at generation 5
// of s1. Each case admits before (the clock moved by advance after
// them), then payload, and checks the verdict, the refusal status shows
// and the key pinned in the state directory.
func TestAdmit(t *testing.T) {
	k1, k2, rogue := signingKey(t), signingKey(t), signingKey(t)
	endorsed := schema.EndorseSigningKey(k1, pubKey(k2))
	tampered := []byte(strings.Replace(string(signedPayload(t, k1, nil, "dev1", 6)), `"generation":6`, `"generation":7`, 1))
	type event struct{ typ, reason, msg string }
	tests := []struct {
		name    string
		pinned  ed25519.PublicKey
		before  [][]byte
		advance time.Duration
		payload []byte

		want    Outcome
		event   event  // reason "": none
		refusal string // the message status shows ("": none)
		err     error  // errors.Is the verdict's Err
		pin     ed25519.PublicKey
	}{
		{name: "accepted, unsigned while no key is pinned", payload: payload(t, "dev1", "s1", 6), want: Accepted},
		{name: "accepted, signed by the pinned key", pinned: pubKey(k1), payload: signedPayload(t, k1, nil, "dev1", 6),
			want: Accepted, pin: pubKey(k1)},
		{name: "new key pinned on first use", payload: signedPayload(t, k1, nil, "dev1", 6),
			want: Accepted, pin: pubKey(k1),
			event: event{schema.EventNormal, "HubSigningKeyPinned", "pinned the hub's signing key " + schema.SigningKeyID(pubKey(k1)) + " on first use"}},
		{name: "rotation to a key the pinned one endorses", pinned: pubKey(k1), payload: signedPayload(t, k2, &endorsed, "dev1", 6),
			want: Accepted, pin: pubKey(k2),
			event: event{schema.EventNormal, "HubSigningKeyRotated", fmt.Sprintf("the hub rotated its signing key: pinned key %s, endorsed by key %s", schema.SigningKeyID(pubKey(k2)), schema.SigningKeyID(pubKey(k1)))}},
		{name: "rotation re-signing the applied generation", pinned: pubKey(k1), payload: signedPayload(t, k2, &endorsed, "dev1", 5),
			want: Duplicate, pin: pubKey(k2),
			event: event{schema.EventNormal, "HubSigningKeyRotated", fmt.Sprintf("the hub rotated its signing key: pinned key %s, endorsed by key %s", schema.SigningKeyID(pubKey(k2)), schema.SigningKeyID(pubKey(k1)))}},
		{name: "duplicate", payload: payload(t, "dev1", "s1", 5), want: Duplicate},
		{name: "unsigned", pinned: pubKey(k1), payload: payload(t, "dev1", "s1", 6),
			want: Unsigned, err: trust.ErrUnsigned, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateUnsigned", "refused an unsigned desired state: desired state is not signed, and hub key " + schema.SigningKeyID(pubKey(k1)) + " is pinned"},
			refusal: "refused an unsigned desired state: desired state is not signed, and hub key " + schema.SigningKeyID(pubKey(k1)) + " is pinned"},
		{name: "bad signature: another key", pinned: pubKey(k1), payload: signedPayload(t, rogue, nil, "dev1", 6),
			want: BadSignature, err: trust.ErrBadSignature, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateBadSignature", "refused a desired state with a bad signature: "},
			refusal: "refused a desired state with a bad signature: "},
		{name: "bad signature: tampered", pinned: pubKey(k1), payload: tampered,
			want: BadSignature, err: trust.ErrBadSignature, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateBadSignature", "refused a desired state with a bad signature: "},
			refusal: "refused a desired state with a bad signature: "},
		{name: "bad signature: a rogue endorsing itself", pinned: pubKey(k1), payload: signedPayload(t, rogue, new(schema.EndorseSigningKey(rogue, pubKey(rogue))), "dev1", 6),
			want: BadSignature, err: trust.ErrBadSignature, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateBadSignature", "refused a desired state with a bad signature: "},
			refusal: "refused a desired state with a bad signature: "},
		{name: "wrong device", pinned: pubKey(k1), payload: signedPayload(t, k1, nil, "dev2", 6),
			want: OtherDevice, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateOtherDevice", `refused a desired state addressed to device "dev2"`},
			refusal: `refused a desired state addressed to device "dev2"`},
		{name: "replayed: older than the state started from", payload: payload(t, "dev1", "s1", 4),
			want:    Replayed,
			event:   event{schema.EventWarning, "DesiredStateReplayed", "refused a replayed desired state: generation 4 is older than generation 5 already applied"},
			refusal: "refused a replayed desired state: generation 4 is older than generation 5 already applied"},
		{name: "stale: overtaken on the way", before: [][]byte{payload(t, "dev1", "s1", 7)}, advance: ReplayGrace,
			payload: payload(t, "dev1", "s1", 6), want: Stale},
		{name: "replayed: older after the grace", before: [][]byte{payload(t, "dev1", "s1", 7)}, advance: ReplayGrace + time.Millisecond,
			payload: payload(t, "dev1", "s1", 6), want: Replayed,
			event:   event{schema.EventWarning, "DesiredStateReplayed", "refused a replayed desired state: generation 6 is older than generation 7 already applied"},
			refusal: "refused a replayed desired state: generation 6 is older than generation 7 already applied"},
		{name: "replayed: as old as the state superseded", before: [][]byte{payload(t, "dev1", "s1", 7)},
			payload: payload(t, "dev1", "s1", 5), want: Replayed,
			event:   event{schema.EventWarning, "DesiredStateReplayed", "refused a replayed desired state: generation 5 is older than generation 7 already applied"},
			refusal: "refused a replayed desired state: generation 5 is older than generation 7 already applied"},
		{name: "another store is a new hub database", payload: payload(t, "dev1", "s2", 1), want: Accepted},
		{name: "invalid", payload: []byte(`{"apiVersion":`), want: Invalid, err: schema.ErrInvalid,
			event:   event{schema.EventWarning, "InvalidDesiredState", "invalid: decode desired state: "},
			refusal: "refused the last desired state: invalid: decode desired state: "},
		{name: "too large is invalid, unchecked", pinned: pubKey(k1), payload: make([]byte, schema.MaxManifestBytes+1),
			want: Invalid, err: schema.ErrInvalid, pin: pubKey(k1),
			event:   event{schema.EventWarning, "InvalidDesiredState", "invalid: desired state is "},
			refusal: "refused the last desired state: invalid: desired state is "},
		{name: "cleared", pinned: pubKey(k1), payload: []byte(" \n"), want: Cleared, pin: pubKey(k1),
			event:   event{schema.EventWarning, "DesiredStateCleared", "desired state topic cleared (device removed?); keeping the last desired state running"},
			refusal: "desired state topic cleared by the hub; running the last desired state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad, clk, dir := newAdmission(t, tt.pinned)
			for _, p := range tt.before {
				if v := ad.Admit(p); v.Outcome != Accepted {
					t.Fatalf("before: %v (%v)", v.Outcome, v.Err)
				}
			}
			ad.Inbox().Take()
			clk.Advance(tt.advance)

			v := ad.Admit(tt.payload)
			if v.Outcome != tt.want {
				t.Fatalf("Admit = %v (%v), want %v", v.Outcome, v.Err, tt.want)
			}
			if tt.err != nil != (v.Err != nil) || (tt.err != nil && !errors.Is(v.Err, tt.err)) {
				t.Errorf("err = %v, want %v", v.Err, tt.err)
			}
			switch {
			case tt.event.reason == "" && v.Event != nil:
				t.Errorf("event %+v, want none", *v.Event)
			case tt.event.reason != "" && v.Event == nil:
				t.Errorf("no event, want %s", tt.event.reason)
			case v.Event != nil && (v.Event.Type != tt.event.typ || v.Event.Reason != tt.event.reason || !strings.HasPrefix(v.Event.Message, tt.event.msg)):
				t.Errorf("event %s %s %q, want %s %s %q...", v.Event.Type, v.Event.Reason, v.Event.Message, tt.event.typ, tt.event.reason, tt.event.msg)
			}
			if got := ad.Refusal(); !strings.HasPrefix(got, tt.refusal) || (tt.refusal == "") != (got == "") {
				t.Errorf("refusal %q, want %q...", got, tt.refusal)
			}
			if v.StatusChanged != (tt.refusal != "") {
				t.Errorf("StatusChanged = %v", v.StatusChanged)
			}
			if got := pinnedKey(t, dir); !got.Equal(tt.pin) {
				t.Errorf("pinned %v, want %v", got, tt.pin)
			}
			if _, _, pending := ad.Inbox().Take(); pending != (tt.want == Accepted) {
				t.Errorf("pending = %v", pending)
			}
		})
	}
}

// TestAdmitRefusalLifecycle: a refusal shows until a state that
// supersedes it is accepted, is republished only when its message
// changes, and an invalid state older than one accepted shows nothing.
func TestAdmitRefusalLifecycle(t *testing.T) {
	ad, _, _ := newAdmission(t, nil)
	if v := ad.Admit(payload(t, "dev2", "s1", 6)); v.Outcome != OtherDevice || !v.StatusChanged {
		t.Fatalf("first refusal: %v, changed %v", v.Outcome, v.StatusChanged)
	}
	if v := ad.Admit(payload(t, "dev2", "s1", 7)); v.Outcome != OtherDevice || v.StatusChanged {
		t.Fatalf("the same refusal again: %v, changed %v", v.Outcome, v.StatusChanged)
	}
	if v := ad.Admit(payload(t, "dev1", "s1", 6)); v.Outcome != Accepted || !v.StatusChanged || ad.Refusal() != "" {
		t.Fatalf("acceptance: %v, changed %v, refusal %q", v.Outcome, v.StatusChanged, ad.Refusal())
	}
	invalid := []byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"dev1","generation":6,"store":"s1","pods":[{"name":"Bad Name","spec":{"containers":[]}}]}`)
	if v := ad.Admit(invalid); v.Outcome != Invalid || v.StatusChanged || ad.Refusal() != "" {
		t.Fatalf("invalid and overtaken: %v, changed %v, refusal %q", v.Outcome, v.StatusChanged, ad.Refusal())
	}
	newer := []byte(strings.Replace(string(invalid), `"generation":6`, `"generation":9`, 1))
	if v := ad.Admit(newer); v.Outcome != Invalid || !v.StatusChanged || !strings.HasPrefix(ad.Refusal(), "refused the last desired state: validate desired state") {
		t.Fatalf("invalid and newer: %v, changed %v, refusal %q", v.Outcome, v.StatusChanged, ad.Refusal())
	}
	// A state older than the refused one does not clear it.
	if v := ad.Admit(payload(t, "dev1", "s1", 8)); v.Outcome != Accepted || v.StatusChanged || ad.Refusal() == "" {
		t.Fatalf("older acceptance: %v, changed %v, refusal %q", v.Outcome, v.StatusChanged, ad.Refusal())
	}
	if v := ad.Admit(payload(t, "dev1", "s1", 9)); v.Outcome != Accepted || !v.StatusChanged || ad.Refusal() != "" {
		t.Fatalf("acceptance of the refused generation: %v, changed %v, refusal %q", v.Outcome, v.StatusChanged, ad.Refusal())
	}
}

// TestAdmitConcurrent: states admitted from many goroutines at once, in
// any order, end with the newest in the inbox; the only refusals are of
// states older than one already superseded (replays).
func TestAdmitConcurrent(t *testing.T) {
	ad, _, _ := newAdmission(t, nil)
	var wg sync.WaitGroup
	for gen := int64(6); gen < 40; gen++ {
		wg.Go(func() { ad.Admit(payload(t, "dev1", "s1", gen)) })
	}
	wg.Wait()
	if ds, _, ok := ad.Inbox().Take(); !ok || ds.Generation != 39 {
		t.Fatalf("pending %+v", ds)
	}
	if r := ad.Refusal(); r != "" && !strings.HasPrefix(r, "refused a replayed desired state") {
		t.Fatalf("refusal %q", r)
	}
}

// signedStore is a state of store signed by k (endorsed by e, if set).
func signedStore(t *testing.T, k ed25519.PrivateKey, e *schema.KeyEndorsement, store string, gen int64) []byte {
	t.Helper()
	b, err := schema.SignDesiredState(payload(t, "dev1", store, gen), k, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decoded is the state of a payload, as the agent loads it from disk.
func decoded(t *testing.T, b []byte) *schema.DesiredState {
	t.Helper()
	var ds schema.DesiredState
	if err := json.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

// TestAdmitNoPin: with no key pinned and no --insecure-trust-first-key,
// nothing from the broker is accepted, signed or not, nothing is
// pinned, and status says why.
func TestAdmitNoPin(t *testing.T) {
	k := signingKey(t)
	for _, tt := range []struct {
		name    string
		payload []byte
	}{
		{"unsigned", payload(t, "dev1", "s1", 6)},
		{"signed by some key", signedPayload(t, k, nil, "dev1", 6)},
		{"signed, of another store", signedStore(t, k, nil, "rogue", 1000)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ad, _, dir := newAdmissionFrom(t, nil, false, nil)
			v := ad.Admit(tt.payload)
			if v.Outcome != NoPin || !errors.Is(v.Err, trust.ErrNoPin) || v.State != nil {
				t.Fatalf("Admit = %v (%v), state %v; want no-pin", v.Outcome, v.Err, v.State)
			}
			const why = "refused a desired state: no hub signing key pinned: start the agent with --join"
			if v.Event == nil || v.Event.Reason != "DesiredStateUntrusted" || !strings.HasPrefix(v.Event.Message, why) {
				t.Errorf("event %+v, want DesiredStateUntrusted %q", v.Event, why)
			}
			if !strings.HasPrefix(ad.Refusal(), why) || !v.StatusChanged {
				t.Errorf("refusal %q (changed %v), want %q", ad.Refusal(), v.StatusChanged, why)
			}
			if _, _, pending := ad.Inbox().Take(); pending {
				t.Error("a state is pending")
			}
			if k := pinnedKey(t, dir); k != nil {
				t.Errorf("pinned %v", k)
			}
		})
	}
}

// TestAdmitFloorAcrossStores: the generation floor survives a new
// store under the same signing key, so a state captured from a store the
// device has left (or replayed after the hub's store was recreated) is
// refused; a rotated key (the signed store change) starts afresh.
func TestAdmitFloorAcrossStores(t *testing.T) {
	k1, k2 := signingKey(t), signingKey(t)
	endorsed := schema.EndorseSigningKey(k1, pubKey(k2))
	onS1 := decoded(t, signedStore(t, k1, nil, "s1", 5))
	unsignedS1 := &schema.DesiredState{Device: "dev1", Store: "s1", Generation: 5}
	tests := []struct {
		name     string
		pinned   ed25519.PublicKey
		firstUse bool
		current  *schema.DesiredState
		before   [][]byte
		payload  []byte
		want     Outcome
		refusal  string
	}{
		{name: "new store, same key, lower generation: replay", pinned: pubKey(k1), current: onS1,
			payload: signedStore(t, k1, nil, "s2", 1), want: Replayed,
			refusal: "refused a replayed desired state: generation 1 of store s2 is not above generation 5 of store s1 already applied under the same signing key"},
		{name: "new store, same key, same generation: replay", pinned: pubKey(k1), current: onS1,
			payload: signedStore(t, k1, nil, "s2", 5), want: Replayed, refusal: "refused a replayed desired state: generation 5 of store s2"},
		{name: "new store, same key, higher generation", pinned: pubKey(k1), current: onS1,
			payload: signedStore(t, k1, nil, "s2", 6), want: Accepted},
		{name: "back to the store left, captured: replay", pinned: pubKey(k1), current: onS1,
			before: [][]byte{signedStore(t, k1, nil, "s2", 9)}, payload: signedStore(t, k1, nil, "s1", 7), want: Replayed,
			refusal: "refused a replayed desired state: generation 7 of store s1 is not above generation 9 of store s2"},
		{name: "new store after a rotation: the signed store change", pinned: pubKey(k1), current: onS1,
			payload: signedStore(t, k2, &endorsed, "s2", 1), want: Accepted},
		{name: "same store, higher generation", pinned: pubKey(k1), current: onS1,
			payload: signedStore(t, k1, nil, "s1", 6), want: Accepted},
		{name: "unsigned states, first-use agent: a new store restarts generations", firstUse: true, current: unsignedS1,
			payload: payload(t, "dev1", "s2", 1), want: Accepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad, _, _ := newAdmissionFrom(t, tt.pinned, tt.firstUse, tt.current)
			for _, p := range tt.before {
				if v := ad.Admit(p); v.Outcome != Accepted {
					t.Fatalf("before: %v (%v)", v.Outcome, v.Err)
				}
			}
			ad.Inbox().Take()
			v := ad.Admit(tt.payload)
			if v.Outcome != tt.want {
				t.Fatalf("Admit = %v (%v), want %v", v.Outcome, v.Err, tt.want)
			}
			if got := ad.Refusal(); !strings.HasPrefix(got, tt.refusal) || (tt.refusal == "") != (got == "") {
				t.Errorf("refusal %q, want %q...", got, tt.refusal)
			}
			if _, _, pending := ad.Inbox().Take(); pending != (tt.want == Accepted) {
				t.Errorf("pending = %v", pending)
			}
		})
	}
}
