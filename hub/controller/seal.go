package controller

import (
	"crypto/rand"
	"fmt"
	"io"

	"golang.org/x/crypto/nacl/box"

	"github.com/fleetmq/fleet/schema"
)

// sealSecret returns a Secret as one device receives it: every value
// sealed to the device's X25519 public key (base64: its bound key,
// deviceKey; never merely the last key a status carried) with NaCl
// box.SealAnonymous, which only the device's
// private key opens (edgeagent/devicekey.Key.Open). Sealing is randomised:
// two sealings of the same value differ, so desired states are compared by
// name, version and key ID (sameConfig), never by sealed bytes. r is the
// randomness (crypto/rand when nil).
func sealSecret(s *schema.Secret, publicKey, keyID string, r io.Reader) (schema.SealedSecret, error) {
	if r == nil {
		r = rand.Reader
	}
	pub, err := schema.ParseDevicePublicKey(publicKey)
	if err != nil {
		return schema.SealedSecret{}, fmt.Errorf("seal secret %q: %w", s.Metadata.Name, err)
	}
	out := schema.SealedSecret{
		Name:    s.Metadata.Name,
		Type:    s.Type,
		Version: s.Metadata.ResourceVersion,
		KeyID:   keyID,
		Data:    make(map[string][]byte, len(s.Data)),
	}
	for k, v := range s.Data {
		sealed, err := box.SealAnonymous(nil, v, pub, r)
		if err != nil {
			// The key, never the value.
			return schema.SealedSecret{}, fmt.Errorf("seal secret %q key %q: %w", s.Metadata.Name, k, err)
		}
		out.Data[k] = sealed
	}
	return out, nil
}
