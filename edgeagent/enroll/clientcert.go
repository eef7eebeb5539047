package enroll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleet/edgeagent/state"
)

// The device's client certificate, in the state directory (mutual TLS,
// the hub's --mqtt-client-certs).
const (
	// ClientKeyFile is the device's private key for its client
	// certificate (ECDSA P-256, PKCS #8, mode 0600). It never leaves the
	// device: the hub gets a CSR.
	ClientKeyFile = "client.key"
	// ClientCertFile is the client certificate the hub's CA signed: at
	// enrollment, or put there by the operator from POST
	// /v1/devices/{name}/certificate. Read again on every TLS handshake,
	// so a renewed file is used at the next connection.
	ClientCertFile = "client.crt"
	// ClientCSRFile is the CSR an agent with a token but no certificate
	// writes, for the operator to have signed (WriteClientCSR).
	ClientCSRFile = "client.csr"
)

// ClientCSR returns a PEM certificate signing request for the device's
// client certificate (CommonName device), with the key in stateDir,
// which it creates on first use.
func ClientCSR(stateDir, device string) ([]byte, error) {
	key, err := clientKey(stateDir)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: device},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("client certificate request for %s: %w", device, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// WriteClientCSR writes ClientCSR as ClientCSRFile in stateDir and
// returns its path.
func WriteClientCSR(stateDir, device string) (string, error) {
	csr, err := ClientCSR(stateDir, device)
	if err != nil {
		return "", err
	}
	p := filepath.Join(stateDir, ClientCSRFile)
	if err := state.WriteFileAtomic(p, csr, 0o644); err != nil {
		return "", fmt.Errorf("write client certificate request: %w", err)
	}
	return p, nil
}

// clientKey loads the device's client key, or makes and saves one.
func clientKey(stateDir string) (*ecdsa.PrivateKey, error) {
	p := filepath.Join(stateDir, ClientKeyFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("client key %s: no PEM block", p)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("client key %s: %w", p, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("client key %s: %T, want ECDSA", p, k)
		}
		return ek, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("client key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("client key: generate: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("client key: encode: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("client key: %w", err)
	}
	if err := state.WriteFileAtomic(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("client key: write %s: %w", p, err)
	}
	return key, nil
}

// SaveClientCert checks that certPEM is a certificate for the client key
// in stateDir and saves it as ClientCertFile; the CSR file, if any, is
// then removed.
func SaveClientCert(stateDir string, certPEM []byte) error {
	keyPEM, err := os.ReadFile(filepath.Join(stateDir, ClientKeyFile))
	if err != nil {
		return fmt.Errorf("save client certificate: %w", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("save client certificate: it does not match %s: %w", ClientKeyFile, err)
	}
	if err := state.WriteFileAtomic(filepath.Join(stateDir, ClientCertFile), certPEM, 0o644); err != nil {
		return fmt.Errorf("save client certificate: %w", err)
	}
	if err := os.Remove(filepath.Join(stateDir, ClientCSRFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("save client certificate: remove the request: %w", err)
	}
	return nil
}

// HasClientCert reports whether stateDir holds a client certificate.
func HasClientCert(stateDir string) bool {
	_, err := os.Stat(filepath.Join(stateDir, ClientCertFile))
	return err == nil
}

// WithClientCert returns a copy of cfg that presents the client
// certificate of stateDir (ClientCertFile, ClientKeyFile) when the broker
// asks for one. The files are read at each handshake: a certificate
// saved or renewed later is used from the next connection on. Without
// them the agent presents none (the broker decides whether it may
// connect: with optional client certificates the token alone); an
// expired one is presented (the broker admits the device only to renew
// it); a certificate that does not load fails the handshake with the
// reason. A nil cfg stays nil (a plain broker).
func WithClientCert(cfg *tls.Config, stateDir string) *tls.Config {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	certPath, keyPath := filepath.Join(stateDir, ClientCertFile), filepath.Join(stateDir, ClientKeyFile)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if _, err := os.Stat(certPath); errors.Is(err, fs.ErrNotExist) {
			return &tls.Certificate{}, nil
		}
		cert, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s: %w", certPath, err)
		}
		// An expired certificate is presented too, when there is
		// nothing newer: the broker admits a device whose certificate
		// only expired, with its token, to renew it (and nothing else).
		return &cert, nil
	}
	return cfg
}

// ClientCertExpired reports whether the client certificate of stateDir
// expired at now (false without one, or one that does not load).
func ClientCertExpired(stateDir string, now time.Time) bool {
	cert, err := tls.LoadX509KeyPair(filepath.Join(stateDir, ClientCertFile), filepath.Join(stateDir, ClientKeyFile))
	return err == nil && cert.Leaf != nil && now.After(cert.Leaf.NotAfter)
}
