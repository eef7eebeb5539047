package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Roles of operator credentials (v1/credentials/{name}).
const (
	// RoleAdmin may do everything through the HTTP API.
	RoleAdmin = "admin"
	// RoleMonitor may read (and, on the broker, subscribe to every device's
	// status, online and events topics).
	RoleMonitor = "monitor"
)

// AdminCredential is the name of the credential fleet-hub creates on first
// start and writes to admin.conf.
const AdminCredential = "admin"

// Credential is an authenticated operator.
type Credential struct {
	Name string
	Role string
}

// tokenRecord is what the store keeps of a token: never the token itself.
type tokenRecord struct {
	SHA256   string    `json:"sha256"`
	Role     string    `json:"role,omitempty"`
	IssuedAt time.Time `json:"issuedAt"`
}

// NewToken returns a random 256-bit token, base64url without padding.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func hashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

func (s *Store) tokenRecord(token, role string) ([]byte, error) {
	h := hashToken(token)
	return json.Marshal(tokenRecord{SHA256: hex.EncodeToString(h[:]), Role: role, IssuedAt: s.now().UTC()})
}

// IssueToken creates a new random token for an existing device (ErrNotFound
// otherwise) and returns it; the store keeps only its SHA-256. The device's
// previous token stops working when IssueToken returns.
func (s *Store) IssueToken(ctx context.Context, device string) (string, error) {
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	rec, err := s.tokenRecord(token, "")
	if err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	_, err = s.Write(ctx, func(t *Txn) error {
		if _, err := t.GetObject(schema.KindDevice, device); err != nil {
			return fmt.Errorf("issue token: %w", err)
		}
		return t.Set(TokenKey(device), rec)
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// VerifyToken reports whether token is the current token of device. It
// reads an in-memory cache of hashes and compares in constant time.
func (s *Store) VerifyToken(device, token string) bool {
	h := hashToken(token)
	s.auth.mu.RLock()
	want, ok := s.auth.devices[device]
	s.auth.mu.RUnlock()
	eq := subtle.ConstantTimeCompare(h[:], want[:]) == 1
	return ok && eq
}

// IssueCredential creates or replaces the operator credential name with a
// new random token and returns the token.
func (s *Store) IssueCredential(ctx context.Context, name, role string) (string, error) {
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	if err := s.PutCredential(ctx, name, role, token); err != nil {
		return "", err
	}
	return token, nil
}

// PutCredential stores the hash of a token the caller generated (with
// NewToken) as credential name. fleet-hub writes admin.conf before it
// stores the hash, so a crash in between never leaves a credential nobody
// holds.
func (s *Store) PutCredential(ctx context.Context, name, role, token string) error {
	if err := schema.ValidateName(name); err != nil {
		return fmt.Errorf("put credential: %w: name: %w", schema.ErrInvalid, err)
	}
	if role != RoleAdmin && role != RoleMonitor {
		return fmt.Errorf("put credential %s: %w: unknown role %q", name, schema.ErrInvalid, role)
	}
	if len(token) < 32 {
		return fmt.Errorf("put credential %s: %w: token too short", name, schema.ErrInvalid)
	}
	rec, err := s.tokenRecord(token, role)
	if err != nil {
		return fmt.Errorf("put credential %s: %w", name, err)
	}
	_, err = s.Write(ctx, func(t *Txn) error { return t.Set(CredentialKey(name), rec) })
	return err
}

// DeleteCredential removes an operator credential.
func (s *Store) DeleteCredential(ctx context.Context, name string) error {
	_, err := s.Write(ctx, func(t *Txn) error {
		if _, err := t.Get(CredentialKey(name)); err != nil {
			return fmt.Errorf("delete credential %s: %w", name, err)
		}
		return t.Delete(CredentialKey(name))
	})
	return err
}

// HasCredential reports whether the operator credential name exists.
func (s *Store) HasCredential(name string) bool {
	s.auth.mu.RLock()
	defer s.auth.mu.RUnlock()
	_, ok := s.auth.creds[name]
	return ok
}

// Authenticate finds the operator credential whose token this is. Every
// credential is compared in constant time.
func (s *Store) Authenticate(token string) (Credential, bool) {
	if token == "" {
		return Credential{}, false
	}
	h := hashToken(token)
	s.auth.mu.RLock()
	defer s.auth.mu.RUnlock()
	var found Credential
	ok := false
	for name, c := range s.auth.creds {
		if subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1 {
			found, ok = Credential{Name: name, Role: c.role}, true
		}
	}
	return found, ok
}

// authCache mirrors the token and credential keys in memory. It is loaded
// on open and updated after every commit that touched those keys.
type authCache struct {
	mu      sync.RWMutex
	devices map[string][32]byte
	creds   map[string]credEntry
}

type credEntry struct {
	hash [32]byte
	role string
}

func newAuthCache() *authCache {
	return &authCache{devices: map[string][32]byte{}, creds: map[string]credEntry{}}
}

func isAuthKey(key string) bool {
	return strings.HasPrefix(key, prefixTokens) || strings.HasPrefix(key, prefixCredentials)
}

func (a *authCache) load(s *Store) error {
	writes := map[string][]byte{}
	err := s.View(context.Background(), func(t *Txn) error {
		for _, p := range []string{prefixTokens, prefixCredentials} {
			err := t.Scan(p, func(key string, val []byte) error {
				writes[key] = append([]byte(nil), val...)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load tokens: %w", err)
	}
	a.apply(writes)
	return nil
}

// apply mirrors committed writes (nil value: deleted). A record that does
// not parse grants nothing.
func (a *authCache) apply(writes map[string][]byte) {
	if len(writes) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, val := range writes {
		var rec tokenRecord
		var h [32]byte
		ok := val != nil && json.Unmarshal(val, &rec) == nil
		if ok {
			b, err := hex.DecodeString(rec.SHA256)
			ok = err == nil && len(b) == len(h)
			copy(h[:], b)
		}
		if name, isDev := strings.CutPrefix(key, prefixTokens); isDev {
			delete(a.devices, name)
			if ok {
				a.devices[name] = h
			}
		} else if name, isCred := strings.CutPrefix(key, prefixCredentials); isCred {
			delete(a.creds, name)
			if ok {
				a.creds[name] = credEntry{hash: h, role: rec.Role}
			}
		}
	}
}
