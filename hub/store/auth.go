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
	// RoleViewer may read everything an admin may through the HTTP API
	// but password hashes and the audit trail, and write nothing: a
	// read-only admin. It has no MQTT access.
	RoleViewer = "viewer"
	// RoleMonitor may read status, online, events and metrics (and, on
	// the broker, subscribe to every device's status, online and events
	// topics); never specs, ConfigMaps, Secrets or credentials.
	RoleMonitor = "monitor"
)

// ValidRole reports whether role is one of RoleAdmin, RoleViewer and
// RoleMonitor.
func ValidRole(role string) bool {
	return role == RoleAdmin || role == RoleViewer || role == RoleMonitor
}

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
	SHA256 string `json:"sha256"`
	// PasswordHash is Options.PasswordHash of the token (a Mosquitto "$7$"
	// hash in the hub), for the password file of an external broker.
	PasswordHash string    `json:"passwordHash,omitempty"`
	Role         string    `json:"role,omitempty"`
	IssuedAt     time.Time `json:"issuedAt"`
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
	rec := tokenRecord{SHA256: hex.EncodeToString(h[:]), Role: role, IssuedAt: s.now().UTC()}
	if s.passwordHash != nil {
		ph, err := s.passwordHash(token)
		if err != nil {
			return nil, fmt.Errorf("password hash: %w", err)
		}
		rec.PasswordHash = ph
	}
	return json.Marshal(rec)
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
	if !ValidRole(role) {
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

// VerifyCredential reports whether token is the token of the operator
// credential name, and returns its role. It compares in constant time.
func (s *Store) VerifyCredential(name, token string) (role string, ok bool) {
	h := hashToken(token)
	s.auth.mu.RLock()
	c, found := s.auth.creds[name]
	s.auth.mu.RUnlock()
	eq := subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1
	if !found || !eq || token == "" {
		return "", false
	}
	return c.role, true
}

// Account is what the store keeps of one device token or operator
// credential, for rendering an external broker's password file.
type Account struct {
	Name string
	// Role is "" for a device, else the credential's role.
	Role string
	// PasswordHash is Options.PasswordHash of the token, "" for a token
	// issued without one (rotate it to get one).
	PasswordHash string
	IssuedAt     time.Time
}

// Accounts lists every device token and operator credential, devices
// first, each in name order.
func (s *Store) Accounts(ctx context.Context) ([]Account, error) {
	return s.accounts(ctx, prefixTokens, prefixCredentials)
}

func (s *Store) accounts(ctx context.Context, prefixes ...string) ([]Account, error) {
	var out []Account
	err := s.View(ctx, func(t *Txn) error {
		for _, p := range prefixes {
			err := t.Scan(p, func(key string, val []byte) error {
				var rec tokenRecord
				if err := json.Unmarshal(val, &rec); err != nil {
					return fmt.Errorf("token record %s: %w", key, err)
				}
				out = append(out, Account{Name: strings.TrimPrefix(key, p), Role: rec.Role, PasswordHash: rec.PasswordHash, IssuedAt: rec.IssuedAt})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	return out, nil
}

// Credentials lists the operator credentials (name and role), in name
// order.
func (s *Store) Credentials(ctx context.Context) ([]Credential, error) {
	accts, err := s.accounts(ctx, prefixCredentials)
	if err != nil {
		return nil, err
	}
	out := make([]Credential, 0, len(accts))
	for _, a := range accts {
		out = append(out, Credential{Name: a.Name, Role: a.Role})
	}
	return out, nil
}

// CreateCredential creates the operator credential name with a new random
// token and returns the token; it fails with ErrAlreadyExists if name is
// taken.
func (s *Store) CreateCredential(ctx context.Context, name, role string) (string, error) {
	if err := schema.ValidateName(name); err != nil {
		return "", fmt.Errorf("create credential: %w: name: %w", schema.ErrInvalid, err)
	}
	if !ValidRole(role) {
		return "", fmt.Errorf("create credential %s: %w: unknown role %q", name, schema.ErrInvalid, role)
	}
	token, err := NewToken()
	if err != nil {
		return "", err
	}
	rec, err := s.tokenRecord(token, role)
	if err != nil {
		return "", fmt.Errorf("create credential %s: %w", name, err)
	}
	_, err = s.Write(ctx, func(t *Txn) error {
		if _, err := t.Get(CredentialKey(name)); err == nil {
			return fmt.Errorf("create credential %s: %w", name, ErrAlreadyExists)
		}
		return t.Set(CredentialKey(name), rec)
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// AuthChangeKind says what an OnAuthChange callback is about.
type AuthChangeKind int

const (
	// AuthDevice: the token of a device was issued, replaced or deleted.
	AuthDevice AuthChangeKind = iota + 1
	// AuthCredential: an operator credential was created, replaced or
	// deleted.
	AuthCredential
)

// OnAuthChange registers fn to be called after every committed write that
// replaced or deleted a device token or an operator credential (a first
// token of a device or a new credential is not reported). It runs
// synchronously, before the write returns, so a caller of IssueToken or
// DeleteCredential knows the callbacks have run: the hub disconnects the
// MQTT sessions of the old token there. fn must not use the Store.
func (s *Store) OnAuthChange(fn func(kind AuthChangeKind, name string)) {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.hooks = append(s.auth.hooks, fn)
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
// on open and updated after every commit that touched those keys: this
// process's own, and, on etcd, every other hub's too (follow.go).
type authCache struct {
	mu      sync.RWMutex
	devices map[string][32]byte
	creds   map[string]credEntry
	hooks   []func(AuthChangeKind, string)
	// revs: on etcd, the engine revision of the change each key last took
	// (deleted keys included), so that a change arriving twice (from this
	// hub's commit and from the etcd watch) or late never undoes a newer
	// one.
	revs map[string]uint64
}

type credEntry struct {
	hash [32]byte
	role string
}

func newAuthCache() *authCache {
	return &authCache{devices: map[string][32]byte{}, creds: map[string]credEntry{}, revs: map[string]uint64{}}
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
func (a *authCache) apply(writes map[string][]byte) { a.applyAt(writes, 0) }

// replaceAt makes the cache what all holds (every token and credential
// key) as of engine revision rev: keys not in all are deleted.
func (a *authCache) replaceAt(all map[string][]byte, rev uint64) {
	a.mu.RLock()
	for name := range a.devices {
		if _, ok := all[TokenKey(name)]; !ok {
			all[TokenKey(name)] = nil
		}
	}
	for name := range a.creds {
		if _, ok := all[CredentialKey(name)]; !ok {
			all[CredentialKey(name)] = nil
		}
	}
	a.mu.RUnlock()
	a.applyAt(all, rev)
}

// applyAt is apply for writes committed at engine revision rev: a key that
// already took a change at rev or later is left as it is. rev 0 (Badger,
// one writer) always applies.
func (a *authCache) applyAt(writes map[string][]byte, rev uint64) {
	if len(writes) == 0 {
		return
	}
	type change struct {
		kind AuthChangeKind
		name string
	}
	var changed []change
	a.mu.Lock()
	for key, val := range writes {
		if rev > 0 {
			if a.revs[key] >= rev {
				continue
			}
			a.revs[key] = rev
		}
		var rec tokenRecord
		var h [32]byte
		ok := val != nil && json.Unmarshal(val, &rec) == nil
		if ok {
			b, err := hex.DecodeString(rec.SHA256)
			ok = err == nil && len(b) == len(h)
			copy(h[:], b)
		}
		if name, isDev := strings.CutPrefix(key, prefixTokens); isDev {
			if old, had := a.devices[name]; had && (!ok || old != h) {
				changed = append(changed, change{AuthDevice, name})
			}
			delete(a.devices, name)
			if ok {
				a.devices[name] = h
			}
		} else if name, isCred := strings.CutPrefix(key, prefixCredentials); isCred {
			if old, had := a.creds[name]; had && (!ok || old.hash != h || old.role != rec.Role) {
				changed = append(changed, change{AuthCredential, name})
			}
			delete(a.creds, name)
			if ok {
				a.creds[name] = credEntry{hash: h, role: rec.Role}
			}
		}
	}
	hooks := a.hooks
	a.mu.Unlock()
	for _, c := range changed {
		for _, fn := range hooks {
			fn(c.kind, c.name)
		}
	}
}
