package pki

import (
	"bytes"
	"context"
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
	"sync"
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
// certificate, swapped atomically on reload or renewal, and the CAs that
// sign it when the hub made its own (none with --tls-cert/--tls-key).
type ServerTLS struct {
	cas *CAs // nil with a given certificate

	// certFile and keyFile are the given certificate, reloaded by reload;
	// "" for the hub's own.
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]

	// The hub's own certificate: where it lives, what it names, how long
	// it lasts, and the clock that says when to renew it.
	dir      string
	sans     []string
	lifetime time.Duration
	log      *slog.Logger
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time
	kick     chan struct{} // the CAs changed
	renewMu  sync.Mutex
	renewals atomic.Int64
}

// ServerTLSOptions configure NewServerTLS.
type ServerTLSOptions struct {
	// CertFile and KeyFile are a given certificate (--tls-cert,
	// --tls-key); both or neither. Default none: the hub's own.
	CertFile, KeyFile string
	// DataDir holds the hub's CA and own certificate.
	DataDir string
	// SANs are the names the own certificate carries (ServerSANs).
	SANs []string
	// Lifetime of the own certificate (--tls-cert-lifetime); default one
	// year. It is renewed once a third of it is left (at most 30 days
	// before its end), while the hub runs (Run).
	Lifetime time.Duration
	// CAs sign the own certificate; default: LoadCAs(DataDir).
	CAs *CAs
	// Now is the time of the first check; default time.Now().
	Now    time.Time
	Logger *slog.Logger
}

// NewServerTLS loads the given certificate, or makes sure the hub's CA
// and a current server certificate for o.SANs exist in o.DataDir.
func NewServerTLS(o ServerTLSOptions) (*ServerTLS, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Lifetime <= 0 {
		o.Lifetime = serverValidity
	}
	t := &ServerTLS{dir: o.DataDir, sans: o.SANs, lifetime: o.Lifetime, log: o.Logger,
		now: time.Now, after: time.After, kick: make(chan struct{}, 1)}
	switch {
	case o.CertFile != "" && o.KeyFile != "":
		t.certFile, t.keyFile = o.CertFile, o.KeyFile
		if err := t.Reload(); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		return t, nil
	case o.CertFile != "" || o.KeyFile != "":
		return nil, errors.New("tls: give both --tls-cert and --tls-key")
	}
	t.cas = o.CAs
	if t.cas == nil {
		cas, err := LoadCAs(o.DataDir, o.Now, o.Logger)
		if err != nil {
			return nil, err
		}
		t.cas = cas
	}
	if _, err := t.RenewIfDue(o.Now); err != nil {
		return nil, err
	}
	t.cas.OnChange(func() {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	})
	return t, nil
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

// renewWindow is how long before its end a certificate of lifetime is
// renewed: a third of it, at most renewBefore.
func renewWindow(lifetime time.Duration) time.Duration {
	return min(renewBefore, lifetime/3)
}

// Leaf is the server certificate presented now.
func (t *ServerTLS) Leaf() *x509.Certificate {
	c := t.cert.Load()
	if c == nil {
		return nil
	}
	return c.Leaf
}

// Renewals counts the server certificates issued since the hub started
// (the first one included when there was none).
func (t *ServerTLS) Renewals() int64 { return t.renewals.Load() }

// NextRenewal is when the hub's own certificate is due for renewal (the
// zero time with a given certificate).
func (t *ServerTLS) NextRenewal() time.Time {
	leaf := t.Leaf()
	if t.cas == nil || leaf == nil {
		return time.Time{}
	}
	return leaf.NotAfter.Add(-renewWindow(t.lifetime))
}

// RenewIfDue issues a new own certificate when the current one is within
// its renewal window at now, is not signed by the active CA (after a CA
// rotation) or lacks a name; the next handshake presents it, connections
// already up are not touched. It reports whether it issued one.
func (t *ServerTLS) RenewIfDue(now time.Time) (bool, error) {
	if t.cas == nil {
		return false, nil
	}
	t.renewMu.Lock()
	defer t.renewMu.Unlock()
	ca, caKey := t.cas.Active()
	cert, issued, err := ensureServerCert(t.dir, ca, caKey, t.sans, now, t.lifetime, t.log)
	if err != nil {
		return false, err
	}
	if cur := t.cert.Load(); cur == nil || issued || !bytes.Equal(cur.Certificate[0], cert.Certificate[0]) {
		t.cert.Store(&cert)
	}
	if issued {
		t.renewals.Add(1)
	}
	return issued, nil
}

// Run renews the hub's own certificate when it is due, and at once
// after a CA rotation completes, until ctx is done. A failed renewal is
// retried after a tenth of the lifetime (at most a minute). With a given
// certificate it only waits for ctx.
func (t *ServerTLS) Run(ctx context.Context) error {
	if t.cas == nil {
		<-ctx.Done()
		return nil
	}
	wait := t.NextRenewal().Sub(t.now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.after(max(wait, 0)):
		case <-t.kick:
		}
		issued, err := t.RenewIfDue(t.now())
		switch {
		case err != nil:
			t.log.Error("renew the hub's server certificate", "err", err)
			wait = min(t.lifetime/10, time.Minute)
			continue
		case issued:
			leaf := t.Leaf()
			t.log.Info("renewed the hub's server certificate; new connections get it, connected clients keep theirs",
				"expires", leaf.NotAfter.Format(time.RFC3339), "ca_hash", t.CAHash())
		}
		wait = t.NextRenewal().Sub(t.now())
	}
}

// CertFile is the given certificate's file (--tls-cert), "" for the
// hub's own.
func (t *ServerTLS) CertFile() string { return t.certFile }

// OwnCA reports whether the hub made its own CA (no --tls-cert).
func (t *ServerTLS) OwnCA() bool { return t != nil && t.cas != nil }

// CAs are the hub's own CAs; nil with a given certificate.
func (t *ServerTLS) CAs() *CAs {
	if t == nil {
		return nil
	}
	return t.cas
}

// CAPEM is the PEM of the hub's own CA; nil without one.
func (t *ServerTLS) CAPEM() []byte {
	if t == nil || t.cas == nil {
		return nil
	}
	return t.cas.ActivePEM()
}

// CAHash is the CA's pin for bootstrap tokens, "" without an own CA.
func (t *ServerTLS) CAHash() string {
	if t == nil || t.cas == nil {
		return ""
	}
	ca, _ := t.cas.Active()
	return schema.CAHash(ca)
}

// CAHashFunc returns CAHash as a function, nil without an own CA.
func (t *ServerTLS) CAHashFunc() func() string {
	if !t.OwnCA() {
		return nil
	}
	return t.CAHash
}

// SetupServerTLS loads the given certificate, or makes sure the hub's CA
// and a current server certificate (one year) for sans exist in dataDir.
func SetupServerTLS(certFile, keyFile, dataDir string, sans []string, now time.Time, log *slog.Logger) (*ServerTLS, error) {
	return NewServerTLS(ServerTLSOptions{CertFile: certFile, KeyFile: keyFile, DataDir: dataDir, SANs: sans, Now: now, Logger: log})
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
// signed by ca, covers every name of sans and has more than its renewal
// window left (renewWindow of lifetime); else it issues a new one
// (lifetime long, never past the CA's end) and reports so.
func ensureServerCert(dataDir string, ca *x509.Certificate, caKey crypto.Signer, sans []string, now time.Time, lifetime time.Duration, log *slog.Logger) (tls.Certificate, bool, error) {
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
		case !now.Add(renewWindow(lifetime)).Before(cert.NotAfter):
			reason = "expires at " + cert.NotAfter.Format(time.RFC3339)
		case !coversSANs(cert, sans):
			reason = "names changed"
		default:
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err == nil {
				return pair, false, nil
			}
			reason = err.Error()
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, false, fmt.Errorf("hub certificate: generate key: %w", err)
	}
	dns, ips := splitSANs(sans)
	notAfter := now.Add(lifetime)
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
		return tls.Certificate{}, false, fmt.Errorf("hub certificate: %w", err)
	}
	// Chain: the server certificate, then the CA, so that a client
	// pinning the CA by hash sees it in the handshake.
	chainPEM := append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	if err := store.WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, false, fmt.Errorf("hub certificate: write %s: %w", keyPath, err)
	}
	if err := store.WriteFileAtomic(certPath, chainPEM, 0o644); err != nil {
		return tls.Certificate{}, false, fmt.Errorf("hub certificate: write %s: %w", certPath, err)
	}
	log.Info("issued the hub's server certificate", "cert", certPath, "why", reason, "expires", cert.NotAfter.Format(time.RFC3339), "names", strings.Join(sans, ","), "ca_hash", schema.CAHash(ca))
	pair, err := tls.X509KeyPair(chainPEM, keyPEM)
	return pair, err == nil, err
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
