package schema

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
)

// CAHashPrefix starts every CA hash: the algorithm, as kubeadm's
// --discovery-token-ca-cert-hash names it.
const CAHashPrefix = "sha256:"

// CAHash is the pin of a hub's CA, printed beside bootstrap tokens and
// carried by join strings (--ca-hash):
// "sha256:" and the hex SHA-256 of the CA certificate's
// SubjectPublicKeyInfo (kubeadm's discovery hash). It survives the CA
// being re-issued with the same key.
func CAHash(ca *x509.Certificate) string {
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return CAHashPrefix + hex.EncodeToString(sum[:])
}

// ParseCAHash checks a CA hash ("sha256:" and 64 hex digits; the prefix
// may be left out) and returns it in its canonical form.
func ParseCAHash(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	h = strings.TrimPrefix(h, CAHashPrefix)
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA hash %q: want sha256: and 64 hex digits", s)
	}
	return CAHashPrefix + h, nil
}

// MatchCAHash reports whether ca is the CA a (canonical) hash pins, in
// constant time.
func MatchCAHash(ca *x509.Certificate, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(CAHash(ca)), []byte(hash)) == 1
}
