// Package trust keeps the hub's signing key the agent has pinned and
// judges the signatures of desired states against it (hub/API.md, "Signed
// desired state"; the format is in schema/signature.go).
//
// The key is pinned from the agent's --join string or --hub-signing-key
// flag, or from the enrollment answer over a verified TLS connection.
// With none pinned the admission refuses every state (ErrNoPin), unless
// the agent runs with --insecure-trust-first-key: then the first signed
// desired state it accepts pins its key (trust on first use). It lives in the state directory
// (PinFile, one line of base64, written atomically). With a key pinned,
// an unsigned state, a bad signature and a signature by another key are
// refused, unless the pinned key endorses that other key (a rotation on
// the hub): the state is then checked with the new key, which is pinned
// once the state is accepted. The agent's desired.Admission is the caller:
// it runs Check before anything else of a payload is looked at, and
// Commit once the state is accepted (or is the applied one, re-signed).
package trust

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// PinFile is the pinned key's file in the agent's state directory.
const PinFile = "hub-signing.pub"

// Errors of Check; test with errors.Is. Both wrap the schema sentinels.
var (
	// ErrUnsigned: a key is pinned and the state carries no signature.
	ErrUnsigned = schema.ErrUnsigned
	// ErrBadSignature: the signature is malformed, does not verify, or
	// is by a key neither pinned nor endorsed by the pinned key.
	ErrBadSignature = schema.ErrBadSignature
	// ErrNoPin: no key is pinned, so no state can be trusted. Check does
	// not return it (it reports FirstUse); the admission refuses with it
	// unless the agent trusts the first key on purpose.
	ErrNoPin = errors.New("no hub signing key pinned: start the agent with --join (the line `fleet device add` or `fleet token create` prints) or --hub-signing-key")
)

// ReadKeyArg reads a key given as base64, or as @FILE holding it (the
// agent's --hub-signing-key).
func ReadKeyArg(arg string) (ed25519.PublicKey, error) {
	if path, ok := strings.CutPrefix(arg, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("hub signing key: %w", err)
		}
		arg = string(b)
	}
	return schema.ParseSigningKey(arg)
}

// Pin is the pinned key of one state directory. It is safe for concurrent
// use.
type Pin struct {
	path string

	mu  sync.Mutex
	key ed25519.PublicKey // nil: none pinned
}

// Load reads the pinned key from stateDir (none if there is no file). A
// file that does not parse is an error: the agent must not fall back to
// trusting anyone.
func Load(stateDir string) (*Pin, error) {
	p := &Pin{path: filepath.Join(stateDir, PinFile)}
	b, err := os.ReadFile(p.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("pinned hub signing key: %w", err)
	}
	if p.key, err = schema.ParseSigningKey(string(b)); err != nil {
		return nil, fmt.Errorf("pinned hub signing key %s: %w", p.path, err)
	}
	return p, nil
}

// Save pins key in stateDir, replacing any pinned key.
func Save(stateDir string, key ed25519.PublicKey) error {
	p := &Pin{path: filepath.Join(stateDir, PinFile)}
	return p.Set(key)
}

// Key returns the pinned key, nil if none.
func (p *Pin) Key() ed25519.PublicKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.key
}

// Set pins key, replacing any pinned key, and writes it.
func (p *Pin) Set(key ed25519.PublicKey) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.setLocked(key)
}

func (p *Pin) setLocked(key ed25519.PublicKey) error {
	if len(key) != ed25519.PublicKeySize {
		return errors.New("pin hub signing key: not an ed25519 public key")
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		return fmt.Errorf("pin hub signing key: %w", err)
	}
	if err := state.WriteFileAtomic(p.path, []byte(schema.EncodeSigningKey(key)+"\n"), 0o644); err != nil {
		return fmt.Errorf("pin hub signing key: %w", err)
	}
	p.key = key
	return nil
}

// Verdict is what Check found in a payload that passed.
type Verdict struct {
	// Signed: the payload carries a valid signature (false: unsigned,
	// accepted because no key is pinned).
	Signed bool
	// Key signed the payload.
	Key ed25519.PublicKey
	// Pinned is the key pinned when Check ran (nil: none).
	Pinned ed25519.PublicKey
	// FirstUse: no key was pinned; Commit pins Key.
	FirstUse bool
	// Rotated: Key is not the pinned key but the pinned key endorses it;
	// Commit pins Key.
	Rotated bool
}

// KeyID is SigningKeyID of the signing key ("" unsigned).
func (v Verdict) KeyID() string {
	if !v.Signed {
		return ""
	}
	return schema.SigningKeyID(v.Key)
}

// Check judges a desired-state payload's signature against the pinned
// key. It does not pin anything: Commit does, once the state is
// accepted. The error wraps ErrUnsigned or ErrBadSignature.
func (p *Pin) Check(payload []byte) (Verdict, error) {
	pinned := p.Key()
	v := Verdict{Pinned: pinned}
	canonical, sig, err := schema.SplitSignedDesiredState(payload)
	if errors.Is(err, schema.ErrUnsigned) {
		if pinned == nil {
			return v, nil // no key pinned yet: a hub that does not sign
		}
		return v, fmt.Errorf("%w, and hub key %s is pinned", ErrUnsigned, schema.SigningKeyID(pinned))
	}
	if err != nil {
		return v, err
	}
	switch {
	case pinned == nil:
		// Trust on first use: the key the state names.
		if v.Key, err = sig.SignerKey(); err != nil {
			return v, err
		}
		v.FirstUse = true
	case sig.KeyID == schema.SigningKeyID(pinned):
		v.Key = pinned
	default:
		// Another key: only one the pinned key endorses.
		if v.Key, err = sig.SignerKey(); err != nil {
			return v, err
		}
		if err := sig.VerifyEndorsement(pinned, v.Key); err != nil {
			return v, err
		}
		v.Rotated = true
	}
	if err := sig.Verify(canonical, v.Key); err != nil {
		return v, err
	}
	v.Signed = true
	return v, nil
}

// Commit pins the key of an accepted state's verdict if it is new (first
// use or rotation) and the pinned key is still the one Check saw. changed
// reports whether it pinned a key.
func (p *Pin) Commit(v Verdict) (changed bool, err error) {
	if !v.Signed || !(v.FirstUse || v.Rotated) {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.key.Equal(v.Pinned) || p.key.Equal(v.Key) {
		return false, nil // another state pinned a key meanwhile
	}
	if err := p.setLocked(v.Key); err != nil {
		return false, err
	}
	return true, nil
}
