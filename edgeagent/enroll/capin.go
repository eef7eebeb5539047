package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// CAFile is where, in the state directory, an agent keeps the hub's CA it
// verified against the pinned CA hash (--ca-hash, the join string's); later connections trust
// that CA alone (mqttio.TLSConfig with it as the CA file).
const CAFile = "hub-ca.crt"

// ErrCAMismatch says that the broker presented no CA matching the pinned
// hash: another hub, or someone in the middle.
var ErrCAMismatch = errors.New("the broker's certificate chain has no CA matching the pinned CA hash")

// PinCATLSConfig returns a clone of base (nil: TLS 1.2 or later) for a
// first contact that trusts the broker only if the chain it presents
// carries a CA whose hash is caHash (schema.CAHash, kubeadm's discovery
// hash) and the server certificate verifies against that CA, for the
// server name dialled, as normal verification would. Go's own
// verification is replaced (it knows no root yet), never skipped: every
// handshake runs VerifyConnection. onCA, if set, gets the CA that
// matched.
//
// The name verified is the one the handshake sent (SNI), or else
// base.ServerName: a broker dialled by IP address sends no SNI, so its
// address must be in base.ServerName (BrokerTLS sets it from the broker
// URL) and the certificate must carry it as an IP SAN. With neither, the
// handshake is refused rather than the name left unchecked.
func PinCATLSConfig(base *tls.Config, caHash string, onCA func(*x509.Certificate)) (*tls.Config, error) {
	hash, err := schema.ParseCAHash(caHash)
	if err != nil {
		return nil, fmt.Errorf("--ca-hash: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.RootCAs = nil
	// Verification moves to VerifyConnection, which always runs.
	cfg.InsecureSkipVerify = true
	dialled := cfg.ServerName
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.ServerName == "" {
			// No SNI: an IP address (Go sends none for one).
			cs.ServerName = dialled
		}
		ca, err := verifyPinned(cs, hash)
		if err != nil {
			return err
		}
		if onCA != nil {
			onCA(ca)
		}
		return nil
	}
	return cfg, nil
}

// verifyPinned finds the CA of hash in the presented chain and verifies
// the server certificate against it.
func verifyPinned(cs tls.ConnectionState, hash string) (*x509.Certificate, error) {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("pinned CA: the broker presented no certificate")
	}
	var ca *x509.Certificate
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		if c.IsCA && schema.MatchCAHash(c, hash) {
			ca = c
		} else {
			inter.AddCert(c)
		}
	}
	if ca == nil {
		return nil, fmt.Errorf("pinned CA %s: %w", hash, ErrCAMismatch)
	}
	if cs.ServerName == "" {
		return nil, fmt.Errorf("pinned CA %s: no server name to verify the broker's certificate for (set the TLS configuration's ServerName to the host dialled)", hash)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, fmt.Errorf("pinned CA %s: %w", hash, err)
	}
	return ca, nil
}

// SaveCA writes the verified CA to the state directory (CAFile), for the
// connections that follow.
func SaveCA(stateDir string, ca *x509.Certificate) error {
	p := filepath.Join(stateDir, CAFile)
	if err := state.WriteFileAtomic(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644); err != nil {
		return fmt.Errorf("save hub CA: %w", err)
	}
	return nil
}
