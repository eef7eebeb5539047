package pki

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Files, in the data directory, of the hub's desired-state signing keys
// (hub/API.md, "Signed desired state"): PKCS#8 PEM, mode 0600.
const (
	// SigningKeyName holds the key the hub signs with; created on first
	// start.
	SigningKeyName = "signing.key"
	// PreviousSigningKeyName holds the key before the last rotation; the
	// hub signs its endorsement of the current key with it.
	PreviousSigningKeyName = "signing.key.previous"
)

// Signer signs the desired states the hub publishes. It is safe for
// concurrent use; Rotate swaps its key.
type Signer struct {
	dir string

	mu          sync.RWMutex
	key         ed25519.PrivateKey
	endorsement *schema.KeyEndorsement // by the previous key; nil before any rotation
}

// LoadOrCreateSigner reads the signing keys from dataDir, creating the
// key on first start.
func LoadOrCreateSigner(dataDir string) (*Signer, error) {
	s := &Signer{dir: dataDir}
	key, err := readSigningKey(filepath.Join(dataDir, SigningKeyName))
	if errors.Is(err, fs.ErrNotExist) {
		if key, err = newSigningKey(); err == nil {
			err = writeSigningKey(filepath.Join(dataDir, SigningKeyName), key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hub signing key: %w", err)
	}
	prev, err := readSigningKey(filepath.Join(dataDir, PreviousSigningKeyName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("hub signing key: %w", err)
	default:
		e := schema.EndorseSigningKey(prev, key.Public().(ed25519.PublicKey))
		s.endorsement = &e
	}
	s.key = key
	return s, nil
}

// PublicKey returns the public half of the current key.
func (s *Signer) PublicKey() ed25519.PublicKey {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.key.Public().(ed25519.PublicKey)
}

// KeyID returns the current key's ID (schema.SigningKeyID).
func (s *Signer) KeyID() string { return schema.SigningKeyID(s.PublicKey()) }

// SignDesiredState signs a desired state's canonical bytes with the
// current key, with the previous key's endorsement after a rotation.
func (s *Signer) SignDesiredState(canonical []byte) ([]byte, error) {
	s.mu.RLock()
	key, e := s.key, s.endorsement
	s.mu.RUnlock()
	return schema.SignDesiredState(canonical, key, e)
}

// SignatureIdentity names what a desired state's signature is made with
// now: the current key and, after a rotation, the previous key's
// endorsement. Ed25519 signatures are deterministic, so while it stays the
// same, the signature SignDesiredState makes over the same bytes is the
// same, byte for byte: the controller keeps signatures and reuses them
// while it does (hub/controller, sigcache.go).
func (s *Signer) SignatureIdentity() string {
	s.mu.RLock()
	key, e := s.key, s.endorsement
	s.mu.RUnlock()
	id := schema.SigningKeyID(key.Public().(ed25519.PublicKey))
	if e == nil {
		return id
	}
	return id + "/" + e.PreviousKeyID + "/" + base64.StdEncoding.EncodeToString(e.Sig)
}

// SignRequest signs the canonical bytes of a request to a device
// (schema/requestsig.go) with the current key: the key devices pin.
func (s *Signer) SignRequest(canonical []byte) ([]byte, error) {
	s.mu.RLock()
	key := s.key
	s.mu.RUnlock()
	return schema.SignRequest(canonical, key)
}

// Rotate makes a new key, keeps the current one as the previous key (it
// endorses the new one), and signs with the new key from then on. It
// returns the old and the new key IDs. The caller republishes every
// desired state.
func (s *Signer) Rotate() (oldID, newID string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := rotateSigningKeyFiles(s.dir, s.key)
	if err != nil {
		return "", "", err
	}
	oldID = schema.SigningKeyID(s.key.Public().(ed25519.PublicKey))
	e := schema.EndorseSigningKey(s.key, next.Public().(ed25519.PublicKey))
	s.key, s.endorsement = next, &e
	return oldID, schema.SigningKeyID(next.Public().(ed25519.PublicKey)), nil
}

// RotateSigningKey rotates the signing key in dataDir: the hub signs
// with the new key, endorsed by the old one. With no key yet it creates
// one. It returns the old and the new key IDs. The caller makes sure no
// hub runs on dataDir (hub.RotateSigningKey opens its store first), so
// that none goes on signing with the old key.
func RotateSigningKey(dataDir string) (oldID, newID string, err error) {
	cur, err := readSigningKey(filepath.Join(dataDir, SigningKeyName))
	if errors.Is(err, fs.ErrNotExist) {
		s, err := LoadOrCreateSigner(dataDir)
		if err != nil {
			return "", "", err
		}
		return "", s.KeyID(), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("rotate signing key: %w", err)
	}
	next, err := rotateSigningKeyFiles(dataDir, cur)
	if err != nil {
		return "", "", err
	}
	return schema.SigningKeyID(cur.Public().(ed25519.PublicKey)), schema.SigningKeyID(next.Public().(ed25519.PublicKey)), nil
}

// rotateSigningKeyFiles writes cur as the previous key, then a new
// current key, and returns the new key. A crash in between leaves the
// previous key equal to the current one: the next start signs with cur
// (endorsed by itself, which agents ignore) and a rotation can be run
// again.
func rotateSigningKeyFiles(dir string, cur ed25519.PrivateKey) (ed25519.PrivateKey, error) {
	next, err := newSigningKey()
	if err != nil {
		return nil, fmt.Errorf("rotate signing key: %w", err)
	}
	if err := writeSigningKey(filepath.Join(dir, PreviousSigningKeyName), cur); err != nil {
		return nil, fmt.Errorf("rotate signing key: %w", err)
	}
	if err := writeSigningKey(filepath.Join(dir, SigningKeyName), next); err != nil {
		return nil, fmt.Errorf("rotate signing key: %w", err)
	}
	return next, nil
}

func newSigningKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	return key, err
}

// readSigningKey reads a PKCS#8 PEM ed25519 private key; the error wraps
// fs.ErrNotExist when there is no file.
func readSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: no PRIVATE KEY PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %T, want an ed25519 key", path, k)
	}
	return key, nil
}

// writeSigningKey writes key as PKCS#8 PEM, mode 0600, atomically.
func writeSigningKey(path string, key ed25519.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return store.WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
