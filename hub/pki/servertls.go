package pki

import (
	"crypto"
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
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// The hub's TLS files, in the data directory. Keys are written with mode
// 0600, certificates 0644.
const (
	// CACertName is the hub's own CA certificate: what admin.conf carries
	// (certificate-authority-data) and bootstrap tokens pin by hash.
	CACertName = "ca.crt"
	// CAKeyName is the CA's private key. Whoever holds it can pose as the
	// hub to every device and CLI: back it up with the store, share it
	// with no one.
	CAKeyName = "ca.key"
	// ServerCertName and ServerKeyName are the server certificate the
	// HTTPS and MQTT-over-TLS listeners present, signed by the CA.
	ServerCertName = "hub.crt"
	ServerKeyName  = "hub.key"
)

// Lifetimes of the generated certificates.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
	// renewBefore: a server certificate this close to its end is
	// replaced when the hub starts.
	renewBefore = 30 * 24 * time.Hour
	// backdate covers clocks that are a little behind the hub's.
	backdate = time.Hour
)

// ServerTLS is what the hub's TLS listeners present: a server
// certificate, swapped atomically on reload, and the CA that signed it
// when the hub made its own (no CA with --tls-cert/--tls-key).
type ServerTLS struct {
	ca    *x509.Certificate
	caPEM []byte

	// certFile and keyFile are the given certificate, reloaded by reload;
	// "" for the hub's own.
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

// Config is the server TLS configuration of every TLS listener: TLS 1.2
// or later, the current certificate on every handshake.
func (t *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return t.cert.Load(), nil
		},
	}
}

// Reload reads the given certificate and key again (on SIGHUP); a
// certificate that fails to load leaves the current one in place. With
// the hub's own certificate it does nothing.
func (t *ServerTLS) Reload() error {
	if t.certFile == "" {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return fmt.Errorf("reload --tls-cert %s and --tls-key %s: %w", t.certFile, t.keyFile, err)
	}
	t.cert.Store(&cert)
	return nil
}

// CertFile is the given certificate's file (--tls-cert), "" for the
// hub's own.
func (t *ServerTLS) CertFile() string { return t.certFile }

// OwnCA reports whether the hub made its own CA (no --tls-cert).
func (t *ServerTLS) OwnCA() bool { return t != nil && t.ca != nil }

// CAPEM is the PEM of the hub's own CA; nil without one.
func (t *ServerTLS) CAPEM() []byte { return t.caPEM }

// CAHash is the CA's pin for bootstrap tokens, "" without an own CA.
func (t *ServerTLS) CAHash() string {
	if t == nil || t.ca == nil {
		return ""
	}
	return schema.CAHash(t.ca)
}

// SetupServerTLS loads the given certificate, or makes sure the hub's CA
// and a current server certificate for sans exist in dataDir.
func SetupServerTLS(certFile, keyFile, dataDir string, sans []string, now time.Time, log *slog.Logger) (*ServerTLS, error) {
	switch {
	case certFile != "" && keyFile != "":
		t := &ServerTLS{certFile: certFile, keyFile: keyFile}
		if err := t.Reload(); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		return t, nil
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: give both --tls-cert and --tls-key")
	}
	ca, caKey, caPEM, err := EnsureCA(dataDir, now, log)
	if err != nil {
		return nil, err
	}
	cert, err := ensureServerCert(dataDir, ca, caKey, sans, now, log)
	if err != nil {
		return nil, err
	}
	t := &ServerTLS{ca: ca, caPEM: caPEM}
	t.cert.Store(&cert)
	return t, nil
}

// EnsureCA loads the hub's CA from dataDir, creating it (ECDSA P-256,
// 10 years) on first start. It returns the CA, its key and its PEM.
func EnsureCA(dataDir string, now time.Time, log *slog.Logger) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPath, keyPath := filepath.Join(dataDir, CACertName), filepath.Join(dataDir, CAKeyName)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, key, err := parseKeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("hub CA %s: %w", certPath, err)
		}
		if now.After(ca.NotAfter) {
			return nil, nil, nil, fmt.Errorf("hub CA %s expired on %s: move %s and %s away to make a new one (devices and CLIs must then pin the new CA)",
				certPath, ca.NotAfter.Format(time.DateOnly), CACertName, CAKeyName)
		}
		return ca, key, certPEM, nil
	case !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist):
		// One of them is there, or unreadable: never replace a CA that
		// devices may have pinned.
		return nil, nil, nil, fmt.Errorf("hub CA: need both %s and %s: %w", certPath, keyPath, errors.Join(certErr, keyErr))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("hub CA: generate key: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: strings.TrimSpace("Fleet hub CA " + host), Organization: []string{"Fleet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	ca, certPEM, keyPEM, err := issue(tmpl, nil, key, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("hub CA: %w", err)
	}
	// The key first: a crash between the two leaves a key alone, which
	// the next start refuses instead of silently making another CA.
	if err := store.WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, nil, fmt.Errorf("hub CA: write %s: %w", keyPath, err)
	}
	if err := store.WriteFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, nil, nil, fmt.Errorf("hub CA: write %s: %w", certPath, err)
	}
	log.Info("created the hub's CA", "cert", certPath, "ca_hash", schema.CAHash(ca), "expires", ca.NotAfter.Format(time.DateOnly))
	return ca, key, certPEM, nil
}

// ensureServerCert returns the server certificate in dataDir when it is
// signed by ca, covers every name of sans and has more than renewBefore
// left; else it issues a new one (1 year, never past the CA's end).
func ensureServerCert(dataDir string, ca *x509.Certificate, caKey crypto.Signer, sans []string, now time.Time, log *slog.Logger) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dataDir, ServerCertName), filepath.Join(dataDir, ServerKeyName)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	reason := "none yet"
	if certErr == nil && keyErr == nil {
		cert, _, err := parseKeyPair(certPEM, keyPEM)
		switch {
		case err != nil:
			reason = err.Error()
		case cert.CheckSignatureFrom(ca) != nil:
			reason = "not signed by the hub's CA"
		case now.Add(renewBefore).After(cert.NotAfter):
			reason = "expires on " + cert.NotAfter.Format(time.DateOnly)
		case !coversSANs(cert, sans):
			reason = "names changed"
		default:
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err == nil {
				return pair, nil
			}
			reason = err.Error()
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("hub certificate: generate key: %w", err)
	}
	dns, ips := splitSANs(sans)
	notAfter := now.Add(serverValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := "fleet-hub"
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"Fleet"}},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dns,
		IPAddresses: ips,
	}
	cert, certPEM, keyPEM, err := issue(tmpl, ca, key, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("hub certificate: %w", err)
	}
	// Chain: the server certificate, then the CA, so that a client
	// pinning the CA by hash sees it in the handshake.
	chainPEM := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	if err := store.WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("hub certificate: write %s: %w", keyPath, err)
	}
	if err := store.WriteFileAtomic(certPath, chainPEM, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("hub certificate: write %s: %w", certPath, err)
	}
	log.Info("issued the hub's server certificate", "cert", certPath, "why", reason, "expires", cert.NotAfter.Format(time.DateOnly), "names", strings.Join(sans, ","))
	return tls.X509KeyPair(chainPEM, keyPEM)
}

// issue signs tmpl with parentKey (self-signed when parent is nil) and
// returns the certificate and the PEM of it and of key.
func issue(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (*x509.Certificate, []byte, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sign: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// parseKeyPair parses a PEM certificate (the first of a chain) and its
// PKCS #8 key.
func parseKeyPair(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key: %T cannot sign", k)
	}
	return cert, signer, nil
}

// ServerSANs are the names the hub's own certificate carries: localhost
// and the loopback addresses, the host name, every non-loopback interface
// address, the hosts of the advertised URLs and the extra names.
func ServerSANs(advertised []string, extra []string) []string {
	sans := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		sans = append(sans, strings.ToLower(h))
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				sans = append(sans, n.IP.String())
			}
		}
	}
	for _, s := range advertised {
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			sans = append(sans, strings.ToLower(u.Hostname()))
		}
	}
	for _, s := range extra {
		if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
			sans = append(sans, s)
		}
	}
	slices.Sort(sans)
	return slices.Compact(sans)
}

// splitSANs parts names into DNS names and IP addresses.
func splitSANs(sans []string) (dns []string, ips []net.IP) {
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// coversSANs reports whether cert names every one of sans.
func coversSANs(cert *x509.Certificate, sans []string) bool {
	dns, ips := splitSANs(sans)
	for _, d := range dns {
		if !slices.ContainsFunc(cert.DNSNames, func(n string) bool { return strings.EqualFold(n, d) }) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}
