package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Bootstrap tokens let devices enroll themselves (see schema/enroll.go).
// Keys (layout version 1):
//
//	v1/bootstrap-tokens/{id}  bootstrapRecord: SHA-256 (and "$7$" hash) of the
//	                          token, labels, expiry, use limit and count
//	v1/enrollments/{request}  enrollmentRecord: the device a request created,
//	                          with the SHA-256 of the request's secret
const (
	prefixBootstrap   = "v1/bootstrap-tokens/"
	prefixEnrollments = "v1/enrollments/"
)

// EnrollRetryWindow is how long after an enrollment the same request (same
// ID, same secret, same device) gets the device's token again, replacing
// the first one: the answer may have been lost on the way.
const EnrollRetryWindow = 15 * time.Minute

// Enrollment errors; each wraps the sentinel the API maps.
var (
	// ErrBootstrapUnauthorized: no bootstrap token with that ID and secret.
	ErrBootstrapUnauthorized = errors.New("unknown bootstrap token")
	// ErrBootstrapExpired: the bootstrap token is past its expiry.
	ErrBootstrapExpired = errors.New("bootstrap token expired")
	// ErrBootstrapUsedUp: every use of the bootstrap token is spent.
	ErrBootstrapUsedUp = errors.New("bootstrap token used up")
	// ErrRequestReused: the request ID belongs to an earlier, different
	// request (or to one too old to answer again).
	ErrRequestReused = errors.New("enrollment request ID already used")
)

// BootstrapKey holds the record of bootstrap token id.
func BootstrapKey(id string) string { return prefixBootstrap + id }

// EnrollmentKey holds what the enrollment request requestID created.
func EnrollmentKey(requestID string) string { return prefixEnrollments + requestID }

type bootstrapRecord struct {
	SHA256       string            `json:"sha256"`
	PasswordHash string            `json:"passwordHash,omitempty"`
	Description  string            `json:"description,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Expires      *time.Time        `json:"expires,omitempty"`
	Uses         int               `json:"uses"`
	Used         int               `json:"used"`
	Created      time.Time         `json:"created"`
}

type enrollmentRecord struct {
	Device       string    `json:"device"`
	TokenID      string    `json:"tokenID"`
	SecretSHA256 string    `json:"secretSHA256"`
	At           time.Time `json:"at"`
}

// BootstrapToken is a bootstrap token as the store describes it: never the
// token itself.
type BootstrapToken struct {
	ID          string
	Description string
	Labels      map[string]string
	// Expires is zero for a token that never expires.
	Expires time.Time
	// Uses is the limit (0: none); Used counts enrolled devices.
	Uses, Used int
	Created    time.Time
	// PasswordHash is the token's Mosquitto "$7$" hash (Options.PasswordHash).
	PasswordHash string
}

// Status is schema.BootstrapActive, BootstrapExpired or BootstrapUsedUp at
// time now.
func (b BootstrapToken) Status(now time.Time) string {
	switch {
	case !b.Expires.IsZero() && !now.Before(b.Expires):
		return schema.BootstrapExpired
	case b.Uses > 0 && b.Used >= b.Uses:
		return schema.BootstrapUsedUp
	}
	return schema.BootstrapActive
}

func (r bootstrapRecord) public(id string) BootstrapToken {
	b := BootstrapToken{
		ID: id, Description: r.Description, Labels: maps.Clone(r.Labels),
		Uses: r.Uses, Used: r.Used, Created: r.Created, PasswordHash: r.PasswordHash,
	}
	if r.Expires != nil {
		b.Expires = *r.Expires
	}
	return b
}

// BootstrapTokenSpec is what CreateBootstrapToken makes.
type BootstrapTokenSpec struct {
	Description string
	Labels      map[string]string
	// TTL: the token expires TTL after creation; 0 means never.
	TTL time.Duration
	// Uses limits the enrollments; 0 means no limit.
	Uses int
}

const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// randomAlnum returns n random lower-case letters and digits.
func randomAlnum(n int) (string, error) {
	b := make([]byte, n)
	// 252 is the largest multiple of 36 below 256: no modulo bias.
	buf := make([]byte, 2*n)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("random token: %w", err)
		}
		for _, c := range buf {
			if c >= 252 || i == n {
				continue
			}
			b[i] = alnum[int(c)%len(alnum)]
			i++
		}
	}
	return string(b), nil
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// CreateBootstrapToken creates a bootstrap token and returns it (the only
// time it is seen: the store keeps its hashes) with its description.
func (s *Store) CreateBootstrapToken(ctx context.Context, spec BootstrapTokenSpec) (string, BootstrapToken, error) {
	if fe := schema.ValidateBootstrapLabels(spec.Labels); len(fe) > 0 {
		return "", BootstrapToken{}, &schema.ValidationError{Kind: "BootstrapToken", Errors: fe}
	}
	if spec.TTL < 0 || spec.Uses < 0 {
		return "", BootstrapToken{}, fmt.Errorf("create bootstrap token: %w: ttl and uses must not be negative", schema.ErrInvalid)
	}
	if len(spec.Description) > 1024 {
		return "", BootstrapToken{}, fmt.Errorf("create bootstrap token: %w: description longer than 1024 bytes", schema.ErrInvalid)
	}
	secret, err := randomAlnum(32)
	if err != nil {
		return "", BootstrapToken{}, err
	}
	now := s.now().UTC().Truncate(time.Second)
	rec := bootstrapRecord{
		Description: spec.Description, Labels: maps.Clone(spec.Labels),
		Uses: spec.Uses, Created: now,
	}
	if spec.TTL > 0 {
		exp := now.Add(spec.TTL)
		rec.Expires = &exp
	}
	// The ID is public and short: pick one that is free, in the
	// transaction that takes it.
	for range 8 {
		id, err := randomAlnum(6)
		if err != nil {
			return "", BootstrapToken{}, err
		}
		token := id + "." + secret
		rec.SHA256 = sha256Hex(token)
		if s.passwordHash != nil {
			if rec.PasswordHash, err = s.passwordHash(token); err != nil {
				return "", BootstrapToken{}, fmt.Errorf("create bootstrap token: password hash: %w", err)
			}
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return "", BootstrapToken{}, fmt.Errorf("create bootstrap token: %w", err)
		}
		taken := false
		_, err = s.Write(ctx, func(t *Txn) error {
			if _, err := t.Get(BootstrapKey(id)); err == nil {
				taken = true
				return nil
			}
			taken = false
			return t.Set(BootstrapKey(id), raw)
		})
		if err != nil {
			return "", BootstrapToken{}, fmt.Errorf("create bootstrap token: %w", err)
		}
		if !taken {
			return token, rec.public(id), nil
		}
	}
	return "", BootstrapToken{}, errors.New("create bootstrap token: no free ID after 8 tries")
}

// BootstrapTokens lists the bootstrap tokens in ID order.
func (s *Store) BootstrapTokens(ctx context.Context) ([]BootstrapToken, error) {
	var out []BootstrapToken
	err := s.View(ctx, func(t *Txn) error {
		return t.Scan(prefixBootstrap, func(key string, val []byte) error {
			var rec bootstrapRecord
			if err := json.Unmarshal(val, &rec); err != nil {
				return fmt.Errorf("bootstrap token %s: %w", key, err)
			}
			out = append(out, rec.public(strings.TrimPrefix(key, prefixBootstrap)))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list bootstrap tokens: %w", err)
	}
	return out, nil
}

// DeleteBootstrapToken deletes a bootstrap token (ErrNotFound if there is
// none) and returns it as it was. Devices that enrolled with it keep their
// own tokens; requests in flight, and retries of past ones, are refused.
func (s *Store) DeleteBootstrapToken(ctx context.Context, id string) (BootstrapToken, error) {
	var out BootstrapToken
	_, err := s.Write(ctx, func(t *Txn) error {
		raw, err := t.Get(BootstrapKey(id))
		if err != nil {
			return fmt.Errorf("bootstrap token %q: %w", id, ErrNotFound)
		}
		var rec bootstrapRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("bootstrap token %q: %w", id, err)
		}
		out = rec.public(id)
		if err := t.Delete(BootstrapKey(id)); err != nil {
			return err
		}
		// Its enrollment records only served retries, which are refused
		// from now on.
		var done []string
		err = t.Scan(prefixEnrollments, func(key string, val []byte) error {
			var er enrollmentRecord
			if json.Unmarshal(val, &er) == nil && er.TokenID == id {
				done = append(done, key)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range done {
			if err := t.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// readBootstrap finds the record of token and checks the token against it
// in constant time.
func readBootstrap(t *Txn, token string) (string, bootstrapRecord, error) {
	var rec bootstrapRecord
	id, err := schema.ParseBootstrapToken(token)
	if err != nil {
		return "", rec, ErrBootstrapUnauthorized
	}
	raw, err := t.Get(BootstrapKey(id))
	if errors.Is(err, ErrNotFound) {
		return "", rec, ErrBootstrapUnauthorized
	}
	if err != nil {
		return "", rec, err
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return "", rec, fmt.Errorf("bootstrap token %s: %w", id, err)
	}
	got := sha256.Sum256([]byte(token))
	want, err := hex.DecodeString(rec.SHA256)
	if err != nil || subtle.ConstantTimeCompare(got[:], want) != 1 {
		return "", rec, ErrBootstrapUnauthorized
	}
	return id, rec, nil
}

// VerifyBootstrapToken reports whether token is a stored bootstrap token
// and returns its ID. An expired or used-up token still verifies: the
// broker lets it in so that the hub can say why it refuses the request.
func (s *Store) VerifyBootstrapToken(ctx context.Context, token string) (string, bool) {
	var id string
	err := s.View(ctx, func(t *Txn) error {
		var err error
		id, _, err = readBootstrap(t, token)
		return err
	})
	return id, err == nil
}

// Enrollment is one enrollment request.
type Enrollment struct {
	// Token is the bootstrap token.
	Token string
	// RequestID and Secret identify the request; a retry carries both.
	RequestID string
	Secret    string
	// Device is the name asked for.
	Device string
	// PublicKey is the device's X25519 public key (base64), if it sent
	// one: kept at DeviceKeyKey, for sealing Secrets to the device before
	// it reports a key in its status.
	PublicKey string
}

// EnrollResult is what Enroll did.
type EnrollResult struct {
	// Token is the device's new token.
	Token string
	// TokenID is the ID of the bootstrap token used.
	TokenID string
	// Retry is true when the request had already enrolled the device and
	// its token was issued again (the first answer was lost).
	Retry bool
	// Device is the device as stored.
	Device *schema.Device
}

// check refuses an enrollment request that is malformed (schema.ErrInvalid).
func (e Enrollment) check() error {
	if err := schema.ValidateName(e.Device); err != nil {
		return fmt.Errorf("enroll: %w: device name %w", schema.ErrInvalid, err)
	}
	if err := schema.ValidateRequestID(e.RequestID); err != nil {
		return fmt.Errorf("enroll: %w: %w", schema.ErrInvalid, err)
	}
	if len(e.Secret) < 32 || len(e.Secret) > 256 {
		return fmt.Errorf("enroll: %w: the request secret must be 32 to 256 characters", schema.ErrInvalid)
	}
	if e.PublicKey != "" {
		if _, err := schema.ParseDevicePublicKey(e.PublicKey); err != nil {
			return fmt.Errorf("enroll: %w: %w", schema.ErrInvalid, err)
		}
	}
	return nil
}

// setDeviceKey keeps the public key an enrolling device sent.
func (t *Txn) setDeviceKey(device, publicKey string) error {
	if publicKey == "" {
		return nil
	}
	return t.Set(DeviceKeyKey(device), []byte(publicKey))
}

// Enroll creates the device e.Device with the bootstrap token's labels,
// issues its token and spends one use of the bootstrap token, all in one
// transaction: of N concurrent enrollments with a token that has M uses
// left, exactly min(N, M) succeed. It fails with ErrBootstrapUnauthorized,
// ErrBootstrapExpired, ErrBootstrapUsedUp, ErrAlreadyExists (a device or
// credential has the name: an existing device is never handed a token
// here), ErrRequestReused or schema.ErrInvalid.
//
// The one exception to "never an existing device": the same request (same
// ID and secret, for the same device and bootstrap token) sent again
// within EnrollRetryWindow gets a new token for the device it created,
// which replaces the first (lost) one, and spends no use.
func (s *Store) Enroll(ctx context.Context, e Enrollment) (EnrollResult, error) {
	if err := e.check(); err != nil {
		return EnrollResult{}, err
	}
	// The token and its hashes before the transaction, which may run
	// more than once and holds the store's write lock.
	devToken, err := NewToken()
	if err != nil {
		return EnrollResult{}, err
	}
	tokRec, err := s.tokenRecord(devToken, "")
	if err != nil {
		return EnrollResult{}, fmt.Errorf("enroll: %w", err)
	}
	secretHash := sha256Hex(e.Secret)
	var res EnrollResult
	_, err = s.Write(ctx, func(t *Txn) error {
		res = EnrollResult{Token: devToken}
		id, rec, err := readBootstrap(t, e.Token)
		if err != nil {
			return err
		}
		res.TokenID = id
		now := s.now().UTC()
		if raw, err := t.Get(EnrollmentKey(e.RequestID)); err == nil {
			return s.retryEnrollment(t, &res, raw, e, id, secretHash, tokRec, now)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		pub := rec.public(id)
		switch pub.Status(now) {
		case schema.BootstrapExpired:
			return fmt.Errorf("%w at %s", ErrBootstrapExpired, pub.Expires.Format(time.RFC3339))
		case schema.BootstrapUsedUp:
			return fmt.Errorf("%w: all %d uses spent", ErrBootstrapUsedUp, rec.Uses)
		}
		if _, err := t.GetObject(schema.KindDevice, e.Device); err == nil {
			return fmt.Errorf("device %q: %w: an existing device is never given a token through enrollment", e.Device, ErrAlreadyExists)
		}
		if _, err := t.Get(CredentialKey(e.Device)); err == nil {
			return fmt.Errorf("device %q: %w: a credential has that name (MQTT usernames are shared)", e.Device, ErrAlreadyExists)
		}
		dev := &schema.Device{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
			Metadata: schema.ObjectMeta{
				Name:        e.Device,
				Labels:      maps.Clone(rec.Labels),
				Annotations: map[string]string{AnnotationBootstrapToken: id},
			},
		}
		stored, _, err := t.putObject(dev, modeCreate)
		if err != nil {
			return err
		}
		res.Device = stored.(*schema.Device)
		if err := t.Set(TokenKey(e.Device), tokRec); err != nil {
			return err
		}
		if err := t.setDeviceKey(e.Device, e.PublicKey); err != nil {
			return err
		}
		rec.Used++
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := t.Set(BootstrapKey(id), raw); err != nil {
			return err
		}
		er, err := json.Marshal(enrollmentRecord{Device: e.Device, TokenID: id, SecretSHA256: secretHash, At: now})
		if err != nil {
			return err
		}
		return t.Set(EnrollmentKey(e.RequestID), er)
	})
	if err != nil {
		return EnrollResult{}, fmt.Errorf("enroll %s: %w", e.Device, err)
	}
	return res, nil
}

// AnnotationBootstrapToken is set on an enrolled device: the ID of the
// bootstrap token it enrolled with.
const AnnotationBootstrapToken = "fleet/bootstrap-token"

// retryEnrollment answers a request ID seen before: only the same request,
// within EnrollRetryWindow, for a device that still exists, gets a new
// token.
func (s *Store) retryEnrollment(t *Txn, res *EnrollResult, raw []byte, e Enrollment, id, secretHash string, tokRec []byte, now time.Time) error {
	var er enrollmentRecord
	if err := json.Unmarshal(raw, &er); err != nil {
		return fmt.Errorf("enrollment %s: %w", e.RequestID, err)
	}
	same := subtle.ConstantTimeCompare([]byte(er.SecretSHA256), []byte(secretHash)) == 1 &&
		er.Device == e.Device && er.TokenID == id
	if !same || now.Sub(er.At) > EnrollRetryWindow {
		return ErrRequestReused
	}
	obj, err := t.GetObject(schema.KindDevice, e.Device)
	if err != nil {
		return ErrRequestReused
	}
	res.Retry = true
	res.Device = obj.(*schema.Device)
	if err := t.setDeviceKey(e.Device, e.PublicKey); err != nil {
		return err
	}
	return t.Set(TokenKey(e.Device), tokRec)
}
