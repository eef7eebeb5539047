package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Secrets at rest. The values of a Secret never reach Badger in clear: a
// Secret is stored as its public form (metadata, type, and its keys with
// the size of each value) plus an envelope (sealedData). Each write makes
// a random 256-bit data key, seals the values (their JSON) with it, and
// seals the data key with the store key, both with AES-256-GCM; the
// Secret's name is the additional data of both, so a sealed value copied
// under another name does not open. The store key is 32 random bytes in a
// file of its own (Options.SecretKeyFile, mode 0600), created on first
// open; its ID (secretKeyID) is recorded at keySecretKeyID, so a store
// opened with another key file, or none, fails to open instead of losing
// its Secrets.
//
// What leaves the store of a Secret is its public form, and only
// Txn.GetSecretData and Txn.ListSecretData (for the controller, which
// seals the values to each device's key) return its values.

// SecretKeyFileName is the store key's file name: in the parent directory
// of Options.Dir by default, the hub's data directory.
const SecretKeyFileName = "secrets.key"

// ErrSecretKey: the store key file is missing, unreadable or not the key
// the store's Secrets were sealed with.
var ErrSecretKey = errors.New("secret key")

// keySecretKeyID records the ID of the store key that seals Secrets.
const keySecretKeyID = "v1/meta/secret-key-id"

// secretKey is the store key (the key-encryption key).
type secretKey struct {
	id   string
	aead cipher.AEAD
}

// sealedData is the envelope of a Secret's values.
type sealedData struct {
	// KeyID names the store key that sealed Key.
	KeyID string `json:"keyID"`
	// Key is the data key, sealed with the store key: nonce, then
	// ciphertext.
	Key []byte `json:"key"`
	// Data is the JSON of the values (an object of base64 strings),
	// sealed with the data key: nonce, then ciphertext.
	Data []byte `json:"data"`
}

// storedSecret is how a Secret is kept: its public form and the envelope.
type storedSecret struct {
	schema.Secret
	Encrypted *sealedData `json:"encrypted,omitempty"`
}

// secretKeyID names a store key: the first 8 bytes of its SHA-256, in hex.
func secretKeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

func newSecretKey(key []byte) (*secretKey, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretKey, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretKey, err)
	}
	return &secretKey{id: secretKeyID(key), aead: aead}, nil
}

// loadSecretKey reads the store key from path, or creates it (mode 0600)
// when the file does not exist and create is true.
func loadSecretKey(path string, create bool, log *slog.Logger) (*secretKey, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		key, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(key) != 32 {
			return nil, fmt.Errorf("%w: %s does not hold the base64 of a 32-byte key", ErrSecretKey, path)
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the secret key file is readable by others: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
		}
		return newSecretKey(key)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %w", ErrSecretKey, err)
	case !create:
		return nil, fmt.Errorf("%w: %s is missing", ErrSecretKey, path)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretKey, err)
	}
	if err := writeKeyFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another store beside this one made it first: share it.
			return loadSecretKey(path, false, log)
		}
		return nil, fmt.Errorf("%w: create %s: %w", ErrSecretKey, path, err)
	}
	log.Info("created the key that encrypts Secrets in the store; back it up with the store", "file", path)
	return newSecretKey(key)
}

// writeKeyFile writes data to path atomically, mode 0600, failing if path
// exists: two hubs starting at once cannot both create a key.
func writeKeyFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return createFileAtomic(path, data, 0o600)
}

// aad is the additional data of a Secret's sealed parts.
func aad(name, part string) []byte { return []byte("fleet/v1 Secret " + name + " " + part) }

func sealGCM(aead cipher.AEAD, plain, ad []byte) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, ad), nil
}

func openGCM(aead cipher.AEAD, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("sealed value too short")
	}
	n := aead.NonceSize()
	return aead.Open(nil, sealed[:n], sealed[n:], ad)
}

// seal encrypts a Secret's values for the store.
func (k *secretKey) seal(name string, data map[string][]byte) (*sealedData, error) {
	plain, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	dek := make([]byte, 32)
	if _, err := rand.Read(dek); err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	block, err := aes.NewCipher(dek)
	if err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	sd := &sealedData{KeyID: k.id}
	if sd.Data, err = sealGCM(aead, plain, aad(name, "data")); err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	if sd.Key, err = sealGCM(k.aead, dek, aad(name, "key")); err != nil {
		return nil, fmt.Errorf("seal secret %q: %w", name, err)
	}
	return sd, nil
}

// open decrypts a Secret's values.
func (k *secretKey) open(name string, sd *sealedData) (map[string][]byte, error) {
	if sd.KeyID != k.id {
		return nil, fmt.Errorf("open secret %q: sealed with store key %s, not %s: %w", name, sd.KeyID, k.id, ErrSecretKey)
	}
	dek, err := openGCM(k.aead, sd.Key, aad(name, "key"))
	if err != nil {
		return nil, fmt.Errorf("open secret %q: data key: %w: %w", name, ErrSecretKey, err)
	}
	block, err := aes.NewCipher(dek)
	if err != nil {
		return nil, fmt.Errorf("open secret %q: %w", name, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("open secret %q: %w", name, err)
	}
	plain, err := openGCM(aead, sd.Data, aad(name, "data"))
	if err != nil {
		return nil, fmt.Errorf("open secret %q: values: %w: %w", name, ErrSecretKey, err)
	}
	var data map[string][]byte
	if err := json.Unmarshal(plain, &data); err != nil {
		return nil, fmt.Errorf("open secret %q: %w", name, err)
	}
	return data, nil
}

// secretKeys returns the keys of a Secret's values and their sizes.
func secretKeys(data map[string][]byte) map[string]int {
	if len(data) == 0 {
		return nil
	}
	keys := make(map[string]int, len(data))
	for k, v := range data {
		keys[k] = len(v)
	}
	return keys
}

// publicSecret returns the public form of a Secret: its keys and their
// sizes, without values.
func publicSecret(s *schema.Secret) *schema.Secret {
	out := *s
	out.Keys = secretKeys(s.Data)
	out.Data, out.StringData = nil, nil
	return &out
}

// public returns obj as the store hands it out: a Secret without its
// values; any other object as is.
func public(obj schema.Object) schema.Object {
	if s, ok := obj.(*schema.Secret); ok {
		return publicSecret(s)
	}
	return obj
}

// publicRaw returns the stored JSON of an object of kind as the store
// hands it out: a Secret's without its envelope.
func publicRaw(kind string, raw []byte) ([]byte, error) {
	if kind != schema.KindSecret || raw == nil {
		return raw, nil
	}
	var s schema.Secret
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decode stored Secret: %w", err)
	}
	s.Data, s.StringData = nil, nil
	out, err := json.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("encode Secret: %w", err)
	}
	return out, nil
}

// encodeStored returns the JSON obj is stored as, and the JSON of its
// public form (the same for every kind but Secret).
func (s *Store) encodeStored(obj schema.Object) (stored, pub []byte, err error) {
	sec, ok := obj.(*schema.Secret)
	if !ok {
		raw, err := json.Marshal(obj)
		return raw, raw, err
	}
	p := publicSecret(sec)
	if pub, err = json.Marshal(p); err != nil {
		return nil, nil, err
	}
	st := storedSecret{Secret: *p}
	if len(sec.Data) > 0 {
		if st.Encrypted, err = s.secretKey.seal(sec.Metadata.Name, sec.Data); err != nil {
			return nil, nil, err
		}
	}
	if stored, err = json.Marshal(&st); err != nil {
		return nil, nil, err
	}
	return stored, pub, nil
}

// decodeFull parses a stored object of kind with everything it holds: a
// Secret with its values.
func (s *Store) decodeFull(kind string, raw []byte) (schema.Object, error) {
	if kind != schema.KindSecret {
		return decodeObject(kind, raw)
	}
	var st storedSecret
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("decode stored Secret: %w", err)
	}
	out := st.Secret
	out.Keys, out.StringData, out.Data = nil, nil, nil
	if st.Encrypted != nil {
		data, err := s.secretKey.open(out.Metadata.Name, st.Encrypted)
		if err != nil {
			return nil, err
		}
		out.Data = data
	}
	return &out, nil
}

// GetSecretData returns the stored Secret name with its values, or an
// error wrapping ErrNotFound. Only the controller, which seals the values
// to each device's own key, needs them: never hand the result to a client.
func (t *Txn) GetSecretData(name string) (*schema.Secret, error) {
	raw, err := t.Get(ObjectKey(schema.KindSecret, name))
	if err != nil {
		return nil, fmt.Errorf("get Secret %q: %w", name, ErrNotFound)
	}
	o, err := t.s.decodeFull(schema.KindSecret, raw)
	if err != nil {
		return nil, err
	}
	return o.(*schema.Secret), nil
}

// ListSecretData calls fn with every stored Secret with its values, in
// name order (see GetSecretData).
func (t *Txn) ListSecretData(fn func(*schema.Secret) error) error {
	res, _ := ResourceForKind(schema.KindSecret)
	return t.Scan(objectPrefix(res), func(_ string, val []byte) error {
		o, err := t.s.decodeFull(schema.KindSecret, val)
		if err != nil {
			return err
		}
		return fn(o.(*schema.Secret))
	})
}
