package schema

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Join strings.
//
// A join string is everything a device needs to join the fleet without
// trusting anything it has not been told: where the broker is, the hub's
// CA (its hash), the hub's desired-state signing key, and the device's
// credential (its name and token, or a bootstrap token). `fleet device
// add` and `fleet token create` print one; `fleet-agent --join` and
// `install.sh --join` take it. It is
//
//	fleetjoin1:<base64url, no padding, of a JoinInfo as JSON>
//
// The version is in the prefix: a later format gets another prefix, and
// an agent refuses a prefix it does not know, or a member it does not
// know, rather than drop something it was meant to check. A join string
// holds a token: it is a secret, shown once, like the token itself.

// JoinPrefix starts every join string of this format.
const JoinPrefix = "fleetjoin1:"

// MaxJoinString bounds a join string.
const MaxJoinString = 4 << 10

// ErrJoin: a join string is malformed; errors.Is it.
var ErrJoin = errors.New("join string")

// JoinInfo is what a join string carries.
type JoinInfo struct {
	// Brokers are the MQTT broker URLs the device may use, the preferred
	// first (at least one).
	Brokers []string `json:"brokers"`
	// CAHash pins the hub's CA (CAHash; "" for a hub whose certificate
	// comes from elsewhere, or a plain broker).
	CAHash string `json:"caHash,omitempty"`
	// SigningKey is the hub's desired-state signing key (EncodeSigningKey).
	// Required: it is what lets the device refuse a state the hub did
	// not sign from its very first message.
	SigningKey string `json:"signingKey"`
	// Device is the device's name: required with Token, optional with
	// BootstrapToken (the agent names itself otherwise).
	Device string `json:"device,omitempty"`
	// Token is the device's token (`fleet device add`).
	Token string `json:"token,omitempty"`
	// BootstrapToken is a bootstrap token (`fleet token create`), instead
	// of Token.
	BootstrapToken string `json:"bootstrapToken,omitempty"`
}

// Key returns the signing key (Validate has checked it).
func (j *JoinInfo) Key() (ed25519.PublicKey, error) {
	k, err := ParseSigningKey(j.SigningKey)
	if err != nil {
		return nil, fmt.Errorf("%w: signingKey: %w", ErrJoin, err)
	}
	return k, nil
}

// Validate checks every member, and returns errors that name the member
// and never repeat a token.
func (j *JoinInfo) Validate() error {
	var errs []error
	bad := func(member, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{member}, a...)...))
	}
	if len(j.Brokers) == 0 {
		bad("brokers", "none: want at least one broker URL such as ssl://hub.example:8883")
	}
	for i, b := range j.Brokers {
		u, err := ParseBrokerURL(b)
		switch {
		case err != nil:
			bad(fmt.Sprintf("brokers[%d]", i), "%v", err)
		case u.User != nil:
			bad(fmt.Sprintf("brokers[%d]", i), "%q carries credentials: the token goes in token", u.Redacted())
		}
	}
	if j.CAHash != "" {
		if _, err := ParseCAHash(j.CAHash); err != nil {
			bad("caHash", "%v", err)
		}
	}
	if j.SigningKey == "" {
		bad("signingKey", "missing: the hub's signing key (GET /v1/info signingKey) is what the device checks every desired state by")
	} else if _, err := ParseSigningKey(j.SigningKey); err != nil {
		bad("signingKey", "%v", err)
	}
	switch {
	case j.Token != "" && j.BootstrapToken != "":
		bad("token", "and bootstrapToken both set: a join string carries one")
	case j.Token == "" && j.BootstrapToken == "":
		bad("token", "missing, and no bootstrapToken either")
	case j.Token != "" && j.Device == "":
		bad("device", "missing: a device token belongs to a device name")
	case j.BootstrapToken != "":
		if _, err := ParseBootstrapToken(j.BootstrapToken); err != nil {
			bad("bootstrapToken", "%v", err)
		}
	}
	if j.Device != "" {
		if err := ValidateName(j.Device); err != nil {
			bad("device", "%v", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrJoin, err)
	}
	return nil
}

// EncodeJoin returns the join string of j, which must be valid.
func EncodeJoin(j JoinInfo) (string, error) {
	if err := j.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrJoin, err)
	}
	return JoinPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseJoin reads a join string (surrounding white space ignored). The
// error wraps ErrJoin, says what is wrong and never repeats the string
// (it holds a token).
func ParseJoin(s string) (JoinInfo, error) {
	s = strings.TrimSpace(s)
	if len(s) > MaxJoinString {
		return JoinInfo{}, fmt.Errorf("%w: %d bytes, at most %d", ErrJoin, len(s), MaxJoinString)
	}
	body, ok := strings.CutPrefix(s, JoinPrefix)
	if !ok {
		if p, _, found := strings.Cut(s, ":"); found && strings.HasPrefix(p, "fleetjoin") {
			return JoinInfo{}, fmt.Errorf("%w: format %q is not one this agent knows (it reads %s): use a fleet-agent as new as the fleet CLI that printed it", ErrJoin, truncate(p), JoinPrefix)
		}
		return JoinInfo{}, fmt.Errorf("%w: does not start with %s (copy the whole line `fleet device add` or `fleet token create` printed)", ErrJoin, JoinPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(body, "="))
	if err != nil {
		return JoinInfo{}, fmt.Errorf("%w: not base64url after %s (cut short or mistyped?): %w", ErrJoin, JoinPrefix, err)
	}
	var j JoinInfo
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return JoinInfo{}, fmt.Errorf("%w: its JSON does not decode: %w", ErrJoin, err)
	}
	if dec.More() {
		return JoinInfo{}, fmt.Errorf("%w: data after its JSON object", ErrJoin)
	}
	if err := j.Validate(); err != nil {
		return JoinInfo{}, err
	}
	return j, nil
}
