package mqttio

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSConfig returns a client TLS configuration: a clone of base (nil: TLS
// 1.2 or later and the system roots) that also trusts the PEM certificates
// in caFile, if one is given. With a caFile and a base without RootCAs,
// the CA file's certificates are the only roots trusted.
func TLSConfig(base *tls.Config, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	if cfg.RootCAs == nil {
		cfg.RootCAs = x509.NewCertPool()
	} else {
		cfg.RootCAs = cfg.RootCAs.Clone() // base's pool stays as it was
	}
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificates", caFile)
	}
	return cfg, nil
}
