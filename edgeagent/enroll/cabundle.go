package enroll

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// CABundleFile is where, in the state directory, the agent keeps the CA
// bundle of the last desired state it accepted (DesiredState.caBundle):
// the hub's CA and, during a CA rotation, the new one. Once it exists it
// is the only trust for the hub's TLS broker, in place of --ca-file,
// --ca-hash or the CA saved at enrollment: it came in a state signed by
// the pinned key, over a connection those verified.
const CABundleFile = "hub-ca-bundle.crt"

// ParseCABundle parses a PEM bundle of CA certificates: at least one,
// every block a CA certificate.
func ParseCABundle(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := bundle
	for len(bytes.TrimSpace(rest)) > 0 {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			return nil, errors.New("CA bundle: trailing data that is not PEM")
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle: a %s block, want CERTIFICATE", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("CA bundle: %q is not a CA certificate", c.Subject.CommonName)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("CA bundle: no certificate")
	}
	return out, nil
}

// SaveCABundle writes bundle as CABundleFile unless it holds it already,
// and reports whether it changed. A bundle that does not parse is
// refused and the file kept.
func SaveCABundle(stateDir string, bundle []byte) (bool, error) {
	if _, err := ParseCABundle(bundle); err != nil {
		return false, err
	}
	p := filepath.Join(stateDir, CABundleFile)
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, bundle) {
		return false, nil
	}
	if err := state.WriteFileAtomic(p, bundle, 0o644); err != nil {
		return false, fmt.Errorf("save the hub's CA bundle: %w", err)
	}
	return true, nil
}

// TrustedCAs returns the pins (schema.CAHash), sorted, of the CAs the
// agent verifies the hub with: those of CABundleFile, else the CA saved
// at enrollment (CAFile), else extra (a --ca-file); nil when it knows
// none.
func TrustedCAs(stateDir, extra string) []string {
	for _, p := range []string{filepath.Join(stateDir, CABundleFile), filepath.Join(stateDir, CAFile), extra} {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		certs, err := ParseCABundle(b)
		if err != nil {
			continue
		}
		var out []string
		for _, c := range certs {
			out = append(out, schema.CAHash(c))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return nil
}

// WithCABundle returns a copy of cfg (nil stays nil: a plain broker)
// that, at each handshake, verifies the broker against CABundleFile in
// stateDir when there is one, for serverName (the broker's host, needed
// for an IP address, which sends no SNI); without the file it verifies
// as cfg would. A bundle saved while the agent runs is used from the
// next connection on; connections up are not touched.
func WithCABundle(cfg *tls.Config, stateDir, serverName string) *tls.Config {
	if cfg == nil {
		return nil
	}
	base := cfg.Clone()
	out := cfg.Clone()
	// Verification moves to VerifyConnection, which always runs.
	out.InsecureSkipVerify = true
	path := filepath.Join(stateDir, CABundleFile)
	out.VerifyConnection = func(cs tls.ConnectionState) error {
		name := cs.ServerName
		if name == "" {
			name = serverName
		}
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			certs, err := ParseCABundle(b)
			if err != nil {
				return fmt.Errorf("hub CA bundle %s: %w", path, err)
			}
			roots := x509.NewCertPool()
			for _, c := range certs {
				roots.AddCert(c)
			}
			if err := verifyServer(cs, roots, name); err != nil {
				return fmt.Errorf("hub CA bundle %s: %w", path, err)
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("hub CA bundle: %w", err)
		}
		if base.InsecureSkipVerify {
			// A pinned-hash first contact (PinCATLSConfig) or an
			// explicitly insecure config: its own VerifyConnection.
			if base.VerifyConnection != nil {
				return base.VerifyConnection(cs)
			}
			return nil
		}
		if err := verifyServer(cs, base.RootCAs, name); err != nil {
			return err
		}
		if base.VerifyConnection != nil {
			return base.VerifyConnection(cs)
		}
		return nil
	}
	return out
}

// verifyServer verifies the presented chain against roots (nil: the
// system's) for name, as the TLS client would.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, name string) error {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return errors.New("the broker presented no certificate")
	}
	if name == "" {
		return errors.New("no server name to verify the broker's certificate for")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}
