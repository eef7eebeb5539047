// Package devicekey is the device's own key pair: an X25519 key the agent
// creates at its first start and keeps in its state directory (mode 0600),
// whose public half it reports to the hub (DeviceStatus.publicKey). The
// hub seals the values of the Secrets a device's pods use to that key
// (NaCl box.SealAnonymous), so they never travel in clear and no other
// device can read them; Open unseals them on the device.
package devicekey

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/crypto/nacl/box"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// FileName is the key's file in the agent's state directory.
const FileName = "device.key"

// Key is a device's key pair.
type Key struct {
	pub, priv *[32]byte
	public    string
}

// LoadOrCreate reads the key from dir/device.key, or creates it (0600,
// written atomically) when the file does not exist.
func LoadOrCreate(dir string) (*Key, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parse(b, path)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("device key: %w", err)
	}
	k, err := Generate(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeFile(path, []byte(base64.StdEncoding.EncodeToString(k.priv[:])+"\n")); err != nil {
		return nil, fmt.Errorf("device key: %w", err)
	}
	return k, nil
}

// Generate makes a new key pair from r.
func Generate(r io.Reader) (*Key, error) {
	pub, priv, err := box.GenerateKey(r)
	if err != nil {
		return nil, fmt.Errorf("device key: generate: %w", err)
	}
	return newKey(pub, priv), nil
}

func newKey(pub, priv *[32]byte) *Key {
	return &Key{pub: pub, priv: priv, public: base64.StdEncoding.EncodeToString(pub[:])}
}

func parse(b []byte, path string) (*Key, error) {
	raw, err := base64.StdEncoding.DecodeString(string(trimSpace(b)))
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("device key %s: not the base64 of a 32-byte X25519 private key; move it aside to make a new one (the hub then seals Secrets to the new key)", path)
	}
	var priv [32]byte
	copy(priv[:], raw)
	pub, err := publicOf(&priv)
	if err != nil {
		return nil, err
	}
	return newKey(pub, &priv), nil
}

// PublicKey is the public half, base64 (std): DeviceStatus.publicKey.
func (k *Key) PublicKey() string { return k.public }

// ID is schema.DeviceKeyID of the public key: what SealedSecret.KeyID
// names.
func (k *Key) ID() string { return schema.DeviceKeyID(k.public) }

// Open unseals a value sealed to this key.
func (k *Key) Open(sealed []byte) ([]byte, error) {
	out, ok := box.OpenAnonymous(nil, sealed, k.pub, k.priv)
	if !ok {
		return nil, errors.New("device key: the value is not sealed to this device's key")
	}
	return out, nil
}

// Seal seals plaintext to a device's public key (base64, as reported):
// what the hub does for each Secret value.
func Seal(publicKey string, plaintext []byte, r io.Reader) ([]byte, error) {
	pub, err := schema.ParseDevicePublicKey(publicKey)
	if err != nil {
		return nil, err
	}
	out, err := box.SealAnonymous(nil, plaintext, pub, r)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// writeFile writes data to path atomically with mode 0600.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return state.WriteFileAtomic(path, data, 0o600)
}
