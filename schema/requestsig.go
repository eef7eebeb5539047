package schema

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Signed requests to devices (hub/API.md, "Signed requests").
//
// The hub signs every request it sends a device (every Request, the
// follow-ups of a stream included) with the key devices pin for desired
// states (signature.go). The canonical bytes are the request's JSON exactly
// as the hub serialized it, without a signature member; it carries the
// request's device, operation and parameters and its RequestAuth: a
// nonce, used once, and an expiry. The payload is built as a signed
// desired state's:
//
//	canonical[:len(canonical)-1] + `,"signature":` + sigJSON + "}"
//
// with sigJSON a RequestSignature, {"alg":"ed25519","keyId":"…","sig":"…"}
// (no publicKey: a device only ever checks a request with the key it has
// pinned). The signature is over requestSignatureContext + canonical, so a
// request's signature can never pass for a desired state's or an
// endorsement's, nor the other way round. A verifier splits the payload as
// SplitSignedDesiredState does (the LAST `,"signature":{`, a strict member
// followed by the closing "}" alone) and checks the signature before it
// looks at anything else of the payload.
//
// Then, in VerifyRequest: the kind and apiVersion, the device (a request
// for another device is refused), the nonce (RequestNonceBytes in
// lower-case hex) and the expiry, against the device's clock: refused once
// now > expires + MaxRequestClockSkew (expired) and when expires > now +
// RequestExpiry + MaxRequestClockSkew (too far ahead: no hub signs that,
// and a device must not have to remember a nonce for long). The device
// remembers every nonce it accepted until expires + MaxRequestClockSkew and
// refuses one seen again (a replay); its memory is bounded by that window
// (at most RequestExpiry + 2 × MaxRequestClockSkew after acceptance). A
// device that restarts has forgotten its nonces: it refuses every request
// expiring before its start + RequestExpiry - MaxRequestClockSkew, i.e.
// signed more than MaxRequestClockSkew before it started (the hub's
// expiry is always signing time + RequestExpiry), so that only requests
// signed within MaxRequestClockSkew of a restart could be replayed across
// it.
//
// Every request kind the hub sends a device is a DeviceRequest and goes
// through EncodeSignedRequest (hub) and VerifyRequest (device), in this
// file: a kind or an operation added later is covered as it is added.

// Timings of signed requests.
const (
	// RequestExpiry is how long a signed request is valid: the hub sets
	// expires = now + RequestExpiry.
	RequestExpiry = 5 * time.Minute
	// MaxRequestClockSkew is how far a device's clock may be off the hub's
	// for its requests to pass: an expiry is honoured until this long after
	// it, and refused when it is more than RequestExpiry + this ahead.
	MaxRequestClockSkew = 2 * time.Minute
	// RequestNonceBytes is the number of random bytes of a nonce.
	RequestNonceBytes = 16
)

// requestSignatureContext prefixes what a request signature signs.
const requestSignatureContext = "fleet/v1 hub request to a device\x00"

// CodeUnauthenticated is the Response.Code of a request the device
// refused because it could not authenticate it: unsigned, a signature
// that does not verify with the pinned key (or no key pinned), expired,
// expiring too far ahead, replayed, or for another device. The hub
// answers it as 502 with reason ReasonRequestRefused.
const CodeUnauthenticated = "Unauthenticated"

// ReasonRequestRefused is the Status reason of a request the device
// refused as unauthenticated.
const ReasonRequestRefused = "RequestRefused"

// Errors of request checks; all wrap ErrRequestRefused. Test with
// errors.Is.
var (
	// ErrRequestRefused: the device does not act on the request.
	ErrRequestRefused = errors.New("request refused")
	// ErrRequestUnsigned: the payload carries no signature member.
	ErrRequestUnsigned = fmt.Errorf("%w: not signed", ErrRequestRefused)
	// ErrRequestBadSignature: the signature member is malformed, not
	// last, by another key than the pinned one, or does not verify.
	ErrRequestBadSignature = fmt.Errorf("%w: the signature does not verify", ErrRequestRefused)
	// ErrRequestNoKey: the device has no hub key pinned to check with.
	ErrRequestNoKey = fmt.Errorf("%w: no hub signing key is pinned", ErrRequestRefused)
	// ErrRequestOtherDevice: the request names another device.
	ErrRequestOtherDevice = fmt.Errorf("%w: for another device", ErrRequestRefused)
	// ErrRequestExpired: now is past expires + MaxRequestClockSkew, or
	// the request was signed before the device started remembering nonces.
	ErrRequestExpired = fmt.Errorf("%w: expired", ErrRequestRefused)
	// ErrRequestFarFuture: expires is more than RequestExpiry +
	// MaxRequestClockSkew ahead.
	ErrRequestFarFuture = fmt.Errorf("%w: expires too far ahead", ErrRequestRefused)
	// ErrRequestReplayed: the nonce was accepted before.
	ErrRequestReplayed = fmt.Errorf("%w: replayed", ErrRequestRefused)
	// ErrRequestMalformed: the signed request has another kind, or lacks
	// its nonce or expiry.
	ErrRequestMalformed = fmt.Errorf("%w: malformed", ErrRequestRefused)
)

// RequestAuth makes a request single-use and short-lived; every
// DeviceRequest carries it, inside the signed bytes.
type RequestAuth struct {
	// Nonce is RequestNonceBytes random bytes, lower-case hex: a device
	// acts on each nonce once.
	Nonce string `json:"nonce,omitempty"`
	// Expires is when the request stops being valid (the hub's clock:
	// signing time + RequestExpiry).
	Expires time.Time `json:"expires,omitzero"`
}

// requestAuth makes every type embedding RequestAuth a DeviceRequest
// part.
func (a *RequestAuth) requestAuth() *RequestAuth { return a }

// DeviceRequest is a message the hub sends one device for it to act on.
// Only types of this package are request kinds.
type DeviceRequest interface {
	requestAuth() *RequestAuth
	// requestTarget returns the request's type and the device it is for.
	requestTarget() (TypeMeta, string)
}

func (r *Request) requestTarget() (TypeMeta, string) { return r.TypeMeta, r.Device }

// RequestSignature is the signature member of a signed request.
type RequestSignature struct {
	// Alg is the algorithm: ed25519.
	Alg string `json:"alg"`
	// KeyID names the signing key (SigningKeyID).
	KeyID string `json:"keyId"`
	// Sig is the ed25519 signature over requestSignatureContext +
	// canonical (base64 std).
	Sig string `json:"sig"`
}

// AuthOf returns a request's RequestAuth.
func AuthOf(r DeviceRequest) RequestAuth { return *r.requestAuth() }

// NewRequestAuth returns a fresh nonce and the expiry of a request signed
// at now.
func NewRequestAuth(now time.Time) (RequestAuth, error) {
	var b [RequestNonceBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return RequestAuth{}, fmt.Errorf("request nonce: %w", err)
	}
	return RequestAuth{Nonce: hex.EncodeToString(b[:]), Expires: now.Add(RequestExpiry).UTC()}, nil
}

// EncodeSignedRequest gives r a fresh RequestAuth (expiring RequestExpiry
// after now), serializes it and returns the payload sign makes of it (a
// pki.Signer's SignRequest, or SignRequest with a key).
func EncodeSignedRequest(r DeviceRequest, now time.Time, sign func(canonical []byte) ([]byte, error)) ([]byte, error) {
	auth, err := NewRequestAuth(now)
	if err != nil {
		return nil, err
	}
	*r.requestAuth() = auth
	canonical, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return sign(canonical)
}

// requestSignedMessage is what a request signature signs.
func requestSignedMessage(canonical []byte) []byte {
	m := make([]byte, 0, len(requestSignatureContext)+len(canonical))
	return append(append(m, requestSignatureContext...), canonical...)
}

// SignRequest signs a request's canonical bytes (a JSON object with at
// least one member and no signature member) and returns the payload.
func SignRequest(canonical []byte, key ed25519.PrivateKey) ([]byte, error) {
	if len(canonical) < 3 || canonical[0] != '{' || canonical[len(canonical)-1] != '}' {
		return nil, errors.New("sign request: canonical bytes are not a JSON object with members")
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("sign request: not an ed25519 private key")
	}
	sig := RequestSignature{
		Alg:   SignatureAlgEd25519,
		KeyID: SigningKeyID(key.Public().(ed25519.PublicKey)),
		Sig:   base64.StdEncoding.EncodeToString(ed25519.Sign(key, requestSignedMessage(canonical))),
	}
	sigJSON, err := json.Marshal(sig)
	if err != nil {
		return nil, fmt.Errorf("sign request: %w", err)
	}
	out := make([]byte, 0, len(canonical)+len(`,"signature":`)+len(sigJSON))
	out = append(out, canonical[:len(canonical)-1]...)
	out = append(out, `,"signature":`...)
	out = append(out, sigJSON...)
	return append(out, '}'), nil
}

// SplitSignedRequest splits a signed request into its canonical bytes and
// signature member without checking the signature. The error wraps
// ErrRequestUnsigned or ErrRequestBadSignature.
func SplitSignedRequest(payload []byte) (canonical []byte, sig *RequestSignature, err error) {
	idx := bytes.LastIndex(payload, []byte(signatureMarker))
	if idx < 0 {
		return nil, nil, ErrRequestUnsigned
	}
	rest := payload[idx+len(signatureMarker)-1:]
	sig = &RequestSignature{}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(sig); err != nil {
		return nil, nil, fmt.Errorf("%w: signature member: %w", ErrRequestBadSignature, err)
	}
	if tail := bytes.TrimSpace(rest[dec.InputOffset():]); string(tail) != "}" {
		return nil, nil, fmt.Errorf("%w: the signature member is not the payload's last member", ErrRequestBadSignature)
	}
	canonical = make([]byte, idx+1)
	copy(canonical, payload[:idx])
	canonical[idx] = '}'
	return canonical, sig, nil
}

// verify checks the signature over canonical with key.
func (s *RequestSignature) verify(canonical []byte, key ed25519.PublicKey) error {
	if s.Alg != SignatureAlgEd25519 {
		return fmt.Errorf("%w: alg %q: want %s", ErrRequestBadSignature, truncate(s.Alg), SignatureAlgEd25519)
	}
	if id := SigningKeyID(key); s.KeyID != id {
		return fmt.Errorf("%w: signed by key %s, not by the pinned hub key %s", ErrRequestBadSignature, truncate(s.KeyID), id)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: sig is not a base64 ed25519 signature", ErrRequestBadSignature)
	}
	if !ed25519.Verify(key, requestSignedMessage(canonical), sig) {
		return fmt.Errorf("%w: key %s", ErrRequestBadSignature, s.KeyID)
	}
	return nil
}

// RequestCheck is what VerifyRequest checks a request against.
type RequestCheck struct {
	// Key is the pinned hub key (nil: none pinned; everything is refused).
	Key ed25519.PublicKey
	// Kind is the request kind expected (KindRequest).
	Kind string
	// Device is the device checking.
	Device string
	// Now is the device's time.
	Now time.Time
}

// VerifyRequest authenticates a request payload: the signature with the
// pinned key first, then decode (the kind's decoder, given the canonical
// bytes), then kind, device, nonce and expiry. The replay check (the
// nonce seen before) is the caller's, once this passed. It returns the
// decoded request; the error wraps ErrRequestRefused when the request is
// not authentic, or is the decoder's (an authentic request that does not
// decode: a bad request, not a refusal).
func VerifyRequest[T DeviceRequest](payload []byte, c RequestCheck, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if c.Key == nil {
		return zero, ErrRequestNoKey
	}
	canonical, sig, err := SplitSignedRequest(payload)
	if err != nil {
		return zero, err
	}
	if err := sig.verify(canonical, c.Key); err != nil {
		return zero, err
	}
	r, err := decode(canonical)
	if err != nil {
		return zero, err // authentic, but invalid: not a refusal
	}
	if err := CheckRequestAuth(r, c); err != nil {
		return zero, err
	}
	return r, nil
}

// CheckRequestAuth checks a decoded request's kind, device, nonce and
// expiry (VerifyRequest, after the signature).
func CheckRequestAuth(r DeviceRequest, c RequestCheck) error {
	tm, device := r.requestTarget()
	auth := r.requestAuth()
	switch {
	case tm.APIVersion != APIVersion || tm.Kind != c.Kind:
		return fmt.Errorf("%w: apiVersion/kind: want %s %s, got %q %q", ErrRequestMalformed, APIVersion, c.Kind, truncate(tm.APIVersion), truncate(tm.Kind))
	case device != c.Device:
		return fmt.Errorf("%w: it is for device %q, this is %s", ErrRequestOtherDevice, truncate(device), c.Device)
	case !validNonce(auth.Nonce):
		return fmt.Errorf("%w: nonce: want %d hex digits", ErrRequestMalformed, 2*RequestNonceBytes)
	case auth.Expires.IsZero():
		return fmt.Errorf("%w: expires: required", ErrRequestMalformed)
	case c.Now.After(auth.Expires.Add(MaxRequestClockSkew)):
		return fmt.Errorf("%w at %s, device time is %s (more than %s late: check the device's clock if the hub just sent it)",
			ErrRequestExpired, auth.Expires.UTC().Format(time.RFC3339), c.Now.UTC().Format(time.RFC3339), MaxRequestClockSkew)
	case auth.Expires.After(c.Now.Add(RequestExpiry + MaxRequestClockSkew)):
		return fmt.Errorf("%w: expires %s, device time is %s: at most %s ahead (check the device's clock)",
			ErrRequestFarFuture, auth.Expires.UTC().Format(time.RFC3339), c.Now.UTC().Format(time.RFC3339), RequestExpiry+MaxRequestClockSkew)
	}
	return nil
}

func validNonce(s string) bool {
	if len(s) != 2*RequestNonceBytes {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
