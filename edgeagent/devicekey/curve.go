package devicekey

import (
	"fmt"

	"golang.org/x/crypto/curve25519"
)

// publicOf returns the public key of an X25519 private key.
func publicOf(priv *[32]byte) (*[32]byte, error) {
	b, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("device key: %w", err)
	}
	var pub [32]byte
	copy(pub[:], b)
	return &pub, nil
}
