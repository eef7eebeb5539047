package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/schema"
)

// Trust sources, as BrokerTLS reports them.
const (
	// TrustCAFile: the CA file given (--ca-file) is the only root.
	TrustCAFile = "ca-file"
	// TrustSavedCA: the CA saved at the first verified contact (CAFile in
	// the state directory) is the only root.
	TrustSavedCA = "saved-ca"
	// TrustCAHash: no CA is known yet; the broker's chain must carry the
	// CA of the pinned hash, which is then saved.
	TrustCAHash = "ca-hash"
	// TrustSystem: the system's roots, as for any TLS client.
	TrustSystem = "system-roots"
)

// TrustOptions say how an agent verifies a TLS broker.
type TrustOptions struct {
	// CAFile is a PEM file of the broker's CA (--ca-file): its
	// certificates are the only roots. Default none.
	CAFile string
	// CAHash pins the hub's CA (--ca-hash, schema.CAHash): a CA file or
	// saved CA must match it, and without either the first contact
	// verifies the broker by it. Default none.
	CAHash string
	// StateDir is the agent's state directory, where the CA verified by
	// the hash is kept (CAFile). Required with CAHash.
	StateDir string
	// Logger, if set, notes when a CA is saved.
	Logger *slog.Logger
	// ServerName is the broker's host as dialled (its URL's host): the
	// certificate must name it, as a DNS name or, for an address, an IP
	// SAN. Default: the name the handshake sends, which is none for an
	// IP address, so set it.
	ServerName string
}

// BrokerTLS returns the TLS configuration of an agent's connections to
// a TLS broker and which trust it uses (Trust…), in this order:
//
//  1. o.CAFile: its certificates are the only roots; with o.CAHash one
//     of them must match it.
//  2. the CA saved in o.StateDir by an earlier verified contact: the only
//     root; with o.CAHash it must match it (else the error says how to
//     pin again).
//  3. o.CAHash alone: PinCATLSConfig, and the CA that first matches is
//     saved to o.StateDir (SaveCA), so the next start uses it as 2.
//  4. nothing: TLS 1.2 or later with the system roots.
//
// The configuration is for ssl:// brokers; plain tcp:// ignores it.
func BrokerTLS(o TrustOptions) (*tls.Config, string, error) {
	hash := ""
	if o.CAHash != "" {
		h, err := schema.ParseCAHash(o.CAHash)
		if err != nil {
			return nil, "", fmt.Errorf("--ca-hash: %w", err)
		}
		hash = h
	}
	if o.CAFile != "" {
		cfg, err := mqttio.TLSConfig(nil, o.CAFile)
		if err != nil {
			return nil, "", fmt.Errorf("--ca-file: %w", err)
		}
		if hash != "" {
			if err := fileMatches(o.CAFile, hash); err != nil {
				return nil, "", fmt.Errorf("--ca-file %s: %w", o.CAFile, err)
			}
		}
		return cfg, TrustCAFile, nil
	}
	if o.StateDir != "" {
		saved := filepath.Join(o.StateDir, CAFile)
		_, err := os.Stat(saved)
		switch {
		case err == nil:
			if hash != "" {
				if err := fileMatches(saved, hash); err != nil {
					return nil, "", fmt.Errorf("the hub CA saved at enrollment (%s) does not match --ca-hash: %w; remove the file to pin the CA of --ca-hash again", saved, err)
				}
			}
			cfg, err := mqttio.TLSConfig(nil, saved)
			if err != nil {
				return nil, "", fmt.Errorf("hub CA saved at enrollment: %w", err)
			}
			return cfg, TrustSavedCA, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, "", fmt.Errorf("hub CA saved at enrollment: %w", err)
		}
	}
	if hash != "" {
		if o.StateDir == "" {
			return nil, "", errors.New("--ca-hash: no state directory to keep the verified CA in")
		}
		var once sync.Once
		log := o.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		cfg, err := PinCATLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}, hash, func(ca *x509.Certificate) {
			once.Do(func() {
				if err := SaveCA(o.StateDir, ca); err != nil {
					log.Warn("could not save the hub CA verified by --ca-hash; it will be verified by the hash again", "err", err)
					return
				}
				log.Info("verified the hub's CA against --ca-hash and saved it", "ca_hash", hash, "file", filepath.Join(o.StateDir, CAFile))
			})
		})
		if err != nil {
			return nil, "", err
		}
		return cfg, TrustCAHash, nil
	}
	cfg, err := mqttio.TLSConfig(nil, "")
	if err != nil {
		return nil, "", err
	}
	return cfg, TrustSystem, nil
}

// fileMatches reports whether the PEM file holds a certificate of the
// (canonical) hash.
func fileMatches(path, hash string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			continue
		}
		if schema.MatchCAHash(c, hash) {
			return nil
		}
	}
	return fmt.Errorf("pinned CA %s: no certificate in %s has that hash: %w", hash, path, ErrCAMismatch)
}
