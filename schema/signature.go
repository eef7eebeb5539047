package schema

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Signed desired state (hub/API.md, "Signed desired state").
//
// The hub signs every DesiredState it publishes with its ed25519 key. The
// canonical bytes are the DesiredState JSON exactly as the hub serialized
// it, without a signature member; the payload is
//
//	canonical[:len(canonical)-1] + `,"signature":` + sigJSON + "}"
//
// so the signature member is always the last top-level member. sigJSON is
// a DesiredStateSignature:
//
//	{"alg":"ed25519","keyId":"<hex of sha256(pub)[:8]>","publicKey":"<base64 std>","sig":"<base64 std>"}
//
// plus, after a key rotation, "endorsement" (the previous key's signature
// over SigningKeyEndorsementMessage(new public key)) and "previousKeyId".
// A verifier takes the LAST occurrence of `,"signature":{` in the payload
// (the sequence cannot occur unescaped inside a JSON string, and the hub's
// own member is last), requires the signature object to be followed by
// the payload's closing "}" alone, rebuilds canonical as payload[:idx] +
// "}", and checks the signature over it. Anything else, a signature
// member that is not last or that has members not listed here included,
// does not verify.
//
// An empty retained payload (the hub clearing a removed device's topic)
// is never signed.

// SignatureAlgEd25519 is DesiredStateSignature.Alg for ed25519.
const SignatureAlgEd25519 = "ed25519"

// signatureMarker starts the signature member in a signed payload.
const signatureMarker = `,"signature":{`

// endorsementContext prefixes what an endorsement signs, so that an
// endorsement can never be taken for a desired state (which starts with
// '{') or the other way round.
const endorsementContext = "fleet/v1 hub signing key endorsement\x00"

// Errors of signature checks; test with errors.Is.
var (
	// ErrUnsigned: the payload carries no signature member.
	ErrUnsigned = errors.New("desired state is not signed")
	// ErrBadSignature: the signature member is malformed, not last, by
	// another key than the one expected, or does not verify.
	ErrBadSignature = errors.New("desired state signature does not verify")
)

// DesiredStateSignature is the signature member of a signed DesiredState.
type DesiredStateSignature struct {
	// Alg is the algorithm: ed25519.
	Alg string `json:"alg"`
	// KeyID names the signing key: SigningKeyID of its public key.
	KeyID string `json:"keyId"`
	// PublicKey is the signing key's public half (base64 std), so that an
	// agent can pin it on first use and check an endorsement; it must
	// match KeyID.
	PublicKey string `json:"publicKey,omitempty"`
	// Sig is the ed25519 signature over the canonical bytes (base64 std).
	Sig string `json:"sig"`
	// Endorsement, set after a key rotation, is the previous key's
	// signature (base64 std) over SigningKeyEndorsementMessage of this
	// key: an agent that pinned the previous key verifies it and pins
	// this one.
	Endorsement string `json:"endorsement,omitempty"`
	// PreviousKeyID names the key that made Endorsement.
	PreviousKeyID string `json:"previousKeyId,omitempty"`
}

// SigningKeyID is the ID of a hub signing key: the first 8 bytes of
// sha256 of its public key, in hex.
func SigningKeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// EncodeSigningKey is a public signing key in base64 std, as in /v1/info,
// the enrollment answer and the agent's --hub-signing-key.
func EncodeSigningKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// ParseSigningKey reads a public signing key in base64 std (surrounding
// white space ignored).
func ParseSigningKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("signing key: not base64: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("signing key: %d bytes, want an ed25519 public key of %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// SigningKeyEndorsementMessage is what a previous key signs to endorse
// the next one: a fixed context string and the next public key.
func SigningKeyEndorsementMessage(next ed25519.PublicKey) []byte {
	return append([]byte(endorsementContext), next...)
}

// KeyEndorsement is the previous key's endorsement of the current one.
type KeyEndorsement struct {
	// PreviousKeyID is SigningKeyID of the previous key.
	PreviousKeyID string
	// Sig is the previous key's signature over
	// SigningKeyEndorsementMessage(current public key).
	Sig []byte
}

// EndorseSigningKey signs next with prev.
func EndorseSigningKey(prev ed25519.PrivateKey, next ed25519.PublicKey) KeyEndorsement {
	return KeyEndorsement{
		PreviousKeyID: SigningKeyID(prev.Public().(ed25519.PublicKey)),
		Sig:           ed25519.Sign(prev, SigningKeyEndorsementMessage(next)),
	}
}

// SignDesiredState signs the canonical bytes of a DesiredState (a JSON
// object with at least one member and no signature member, as the hub
// serialized it) and returns the payload to publish. endorsement, if not
// nil, is attached.
func SignDesiredState(canonical []byte, key ed25519.PrivateKey, endorsement *KeyEndorsement) ([]byte, error) {
	if len(canonical) < 3 || canonical[0] != '{' || canonical[len(canonical)-1] != '}' {
		return nil, errors.New("sign desired state: canonical bytes are not a JSON object with members")
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("sign desired state: not an ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	sig := DesiredStateSignature{
		Alg:       SignatureAlgEd25519,
		KeyID:     SigningKeyID(pub),
		PublicKey: EncodeSigningKey(pub),
		Sig:       base64.StdEncoding.EncodeToString(ed25519.Sign(key, canonical)),
	}
	if endorsement != nil {
		sig.Endorsement = base64.StdEncoding.EncodeToString(endorsement.Sig)
		sig.PreviousKeyID = endorsement.PreviousKeyID
	}
	sigJSON, err := json.Marshal(sig)
	if err != nil {
		return nil, fmt.Errorf("sign desired state: %w", err)
	}
	out := make([]byte, 0, len(canonical)+len(`,"signature":`)+len(sigJSON))
	out = append(out, canonical[:len(canonical)-1]...)
	out = append(out, `,"signature":`...)
	out = append(out, sigJSON...)
	return append(out, '}'), nil
}

// SplitSignedDesiredState splits a signed payload into the canonical bytes
// and the signature member, without checking the signature. The error
// wraps ErrUnsigned when there is no signature member, ErrBadSignature
// when the member is malformed or not the last one.
func SplitSignedDesiredState(payload []byte) (canonical []byte, sig *DesiredStateSignature, err error) {
	idx := bytes.LastIndex(payload, []byte(signatureMarker))
	if idx < 0 {
		return nil, nil, ErrUnsigned
	}
	rest := payload[idx+len(signatureMarker)-1:] // from the member's '{'
	// The member is strict: a later change to it comes with a new alg,
	// and no byte of a signed payload can change unnoticed. One decoder
	// reads it and says where it ends.
	sig = &DesiredStateSignature{}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(sig); err != nil {
		return nil, nil, fmt.Errorf("%w: signature member: %w", ErrBadSignature, err)
	}
	if tail := bytes.TrimSpace(rest[dec.InputOffset():]); string(tail) != "}" {
		return nil, nil, fmt.Errorf("%w: the signature member is not the payload's last member", ErrBadSignature)
	}
	canonical = make([]byte, idx+1)
	copy(canonical, payload[:idx])
	canonical[idx] = '}'
	return canonical, sig, nil
}

// SignerKey returns the public key the signature names (PublicKey),
// checked against KeyID.
func (s *DesiredStateSignature) SignerKey() (ed25519.PublicKey, error) {
	if s.PublicKey == "" {
		return nil, fmt.Errorf("%w: signature by key %s carries no publicKey", ErrBadSignature, truncate(s.KeyID))
	}
	pub, err := ParseSigningKey(s.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: publicKey: %w", ErrBadSignature, err)
	}
	if id := SigningKeyID(pub); id != s.KeyID {
		return nil, fmt.Errorf("%w: publicKey has ID %s, the signature says keyId %s", ErrBadSignature, id, truncate(s.KeyID))
	}
	return pub, nil
}

// Verify checks the signature over canonical with key: the algorithm, the
// key ID, the public key if the member names one, and the signature
// itself.
func (s *DesiredStateSignature) Verify(canonical []byte, key ed25519.PublicKey) error {
	if s.Alg != SignatureAlgEd25519 {
		return fmt.Errorf("%w: alg %q: want %s", ErrBadSignature, truncate(s.Alg), SignatureAlgEd25519)
	}
	if id := SigningKeyID(key); s.KeyID != id {
		return fmt.Errorf("%w: signed by key %s, not by key %s", ErrBadSignature, truncate(s.KeyID), id)
	}
	if s.PublicKey != "" && s.PublicKey != EncodeSigningKey(key) {
		return fmt.Errorf("%w: publicKey is not key %s", ErrBadSignature, s.KeyID)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: sig is not a base64 ed25519 signature", ErrBadSignature)
	}
	if !ed25519.Verify(key, canonical, sig) {
		return fmt.Errorf("%w: key %s", ErrBadSignature, s.KeyID)
	}
	return nil
}

// VerifyEndorsement reports whether the signature's endorsement is prev's
// signature over its signer key next.
func (s *DesiredStateSignature) VerifyEndorsement(prev, next ed25519.PublicKey) error {
	if s.Endorsement == "" {
		return fmt.Errorf("%w: signed by key %s without an endorsement by key %s", ErrBadSignature, truncate(s.KeyID), SigningKeyID(prev))
	}
	if s.PreviousKeyID != SigningKeyID(prev) {
		return fmt.Errorf("%w: key %s is endorsed by key %s, not by key %s", ErrBadSignature, truncate(s.KeyID), truncate(s.PreviousKeyID), SigningKeyID(prev))
	}
	e, err := base64.StdEncoding.DecodeString(s.Endorsement)
	if err != nil || len(e) != ed25519.SignatureSize || !ed25519.Verify(prev, SigningKeyEndorsementMessage(next), e) {
		return fmt.Errorf("%w: the endorsement of key %s by key %s does not verify", ErrBadSignature, truncate(s.KeyID), SigningKeyID(prev))
	}
	return nil
}

// VerifyDesiredState checks a signed payload against key and returns its
// canonical bytes and signature member.
func VerifyDesiredState(payload []byte, key ed25519.PublicKey) ([]byte, *DesiredStateSignature, error) {
	canonical, sig, err := SplitSignedDesiredState(payload)
	if err != nil {
		return nil, nil, err
	}
	if err := sig.Verify(canonical, key); err != nil {
		return nil, nil, err
	}
	return canonical, sig, nil
}
