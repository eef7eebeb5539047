package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Files of a CA rotation, in the data directory beside ca.crt and ca.key.
const (
	// NextCACertName and NextCAKeyName are the new CA while a rotation
	// is under way (fleet-hub ca rotate): devices are given it beside the
	// current one and the broker accepts client certificates of both.
	NextCACertName = "ca-next.crt"
	NextCAKeyName  = "ca-next.key"
	// RetiredCACertName holds the certificates of every retired CA
	// (their keys are deleted): what the hub refuses from then on.
	RetiredCACertName = "ca-retired.crt"
)

// ErrNoRotation: CAs.Complete was asked with no rotation under way.
var ErrNoRotation = errors.New("no CA rotation under way: start one with fleet-hub ca rotate")

// ErrRotating: CAs.Rotate was asked during a rotation.
var ErrRotating = errors.New("a CA rotation is already under way: finish it with fleet-hub ca retire (fleet-hub ca status lists the devices it waits for)")

// caPair is a CA certificate, its key and its PEM.
type caPair struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

// CAs is the hub's CA and, during a rotation, the next one: one
// instance shared by the server certificate (ServerTLS), the client
// certificates (ClientCA) and the desired states (BundlePEM). A rotation
// goes in two steps:
//
//  1. Rotate makes the next CA (ca-next.crt, ca-next.key). The bundle
//     devices get in their signed desired state holds both CAs, and the
//     broker accepts client certificates of both; the server certificate
//     and new client certificates still come from the current CA, which
//     every device trusts.
//  2. Complete (once every device reported the next CA among its
//     trusted ones, or forced by an operator) makes the next CA the
//     current one: the old CA's certificate goes to ca-retired.crt, its
//     key is deleted, the server certificate is reissued by the new CA
//     and the old CA is trusted no more.
//
// It is safe for concurrent use.
type CAs struct {
	dir string
	log *slog.Logger
	now func() time.Time

	mu       sync.RWMutex
	active   caPair
	next     *caPair // nil unless rotating
	retired  []*x509.Certificate
	onChange []func()
}

// LoadCAs loads the hub's CA from dataDir (creating it on first start,
// EnsureCA), the next CA of a rotation under way and the retired ones,
// and finishes a completion a crash interrupted.
func LoadCAs(dataDir string, now time.Time, log *slog.Logger) (*CAs, error) {
	if err := finishCompletion(dataDir); err != nil {
		return nil, err
	}
	cert, key, certPEM, err := EnsureCA(dataDir, now, log)
	if err != nil {
		return nil, err
	}
	c := &CAs{dir: dataDir, log: log, now: time.Now, active: caPair{cert: cert, key: key, pem: certPEM}}
	next, err := readCAPair(filepath.Join(dataDir, NextCACertName), filepath.Join(dataDir, NextCAKeyName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("next hub CA: %w", err)
	default:
		c.next = next
	}
	if c.retired, err = readCerts(filepath.Join(dataDir, RetiredCACertName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("retired hub CAs: %w", err)
	}
	return c, nil
}

// finishCompletion ends a Complete a crash interrupted: ca.key is
// already the next CA's key while ca.crt is not yet its certificate.
func finishCompletion(dir string) error {
	nextCert, nextCertErr := os.ReadFile(filepath.Join(dir, NextCACertName))
	nextKey, nextKeyErr := os.ReadFile(filepath.Join(dir, NextCAKeyName))
	if nextCertErr != nil || nextKeyErr != nil {
		return nil
	}
	curKey, err := os.ReadFile(filepath.Join(dir, CAKeyName))
	if err != nil || !bytes.Equal(curKey, nextKey) {
		return nil
	}
	if err := store.WriteFileAtomic(filepath.Join(dir, CACertName), nextCert, 0o644); err != nil {
		return fmt.Errorf("finish the CA rotation: %w", err)
	}
	return removeNext(dir)
}

func removeNext(dir string) error {
	for _, n := range []string{NextCACertName, NextCAKeyName} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("finish the CA rotation: %w", err)
		}
	}
	return nil
}

// readCAPair reads a CA certificate and key; the error wraps
// fs.ErrNotExist when neither file is there.
func readCAPair(certPath, keyPath string) (*caPair, error) {
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	if errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		return nil, fs.ErrNotExist
	}
	if certErr != nil || keyErr != nil {
		return nil, fmt.Errorf("need both %s and %s: %w", certPath, keyPath, errors.Join(certErr, keyErr))
	}
	cert, key, err := parseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	return &caPair{cert: cert, key: key, pem: certPEM}, nil
}

// readCerts reads every certificate of a PEM file.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for len(b) > 0 {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// OnChange registers fn, called (outside any lock) after Rotate and
// Complete.
func (c *CAs) OnChange(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onChange = append(c.onChange, fn)
}

func (c *CAs) changed() {
	c.mu.RLock()
	fns := slices.Clone(c.onChange)
	c.mu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

// Active returns the CA that signs the server and client certificates.
func (c *CAs) Active() (*x509.Certificate, crypto.Signer) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.active.cert, c.active.key
}

// ActivePEM is the PEM of the active CA.
func (c *CAs) ActivePEM() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.active.pem
}

// BundlePEM is the PEM of every CA devices are to trust: the active one
// and, during a rotation, the next.
func (c *CAs) BundlePEM() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := slices.Clone(c.active.pem)
	if c.next != nil {
		out = append(out, c.next.pem...)
	}
	return out
}

// Pool is the CAs the broker accepts client certificates of: the active
// one and, during a rotation, the next.
func (c *CAs) Pool() *x509.CertPool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p := x509.NewCertPool()
	p.AddCert(c.active.cert)
	if c.next != nil {
		p.AddCert(c.next.cert)
	}
	return p
}

// CAStatus is where a CA rotation stands.
type CAStatus struct {
	// Active is the pin of the CA that signs certificates now.
	Active string `json:"active"`
	// ActiveExpires is the active CA's end.
	ActiveExpires time.Time `json:"activeExpires"`
	// Next is the pin of the CA a rotation under way brings in ("" none).
	Next string `json:"next,omitempty"`
	// Retired are the pins of the CAs retired, refused from then on.
	Retired []string `json:"retired,omitempty"`
}

// Status says which CAs there are.
func (c *CAs) Status() CAStatus {
	c.mu.RLock()
	defer c.mu.RUnlock()
	st := CAStatus{Active: schema.CAHash(c.active.cert), ActiveExpires: c.active.cert.NotAfter}
	if c.next != nil {
		st.Next = schema.CAHash(c.next.cert)
	}
	for _, r := range c.retired {
		st.Retired = append(st.Retired, schema.CAHash(r))
	}
	return st
}

// Rotate makes the next CA (ECDSA P-256, 10 years) and writes it, key
// first. It fails with ErrRotating during a rotation.
func (c *CAs) Rotate() (CAStatus, error) {
	c.mu.Lock()
	if c.next != nil {
		c.mu.Unlock()
		return CAStatus{}, ErrRotating
	}
	next, err := newCA(c.now())
	if err == nil {
		err = writeCAPair(c.dir, NextCACertName, NextCAKeyName, next)
	}
	if err != nil {
		c.mu.Unlock()
		return CAStatus{}, fmt.Errorf("rotate the hub CA: %w", err)
	}
	c.next = next
	c.mu.Unlock()
	st := c.Status()
	c.log.Info("CA rotation started: devices get the new CA beside the current one", "current", st.Active, "next", st.Next)
	c.changed()
	return st, nil
}

// Complete makes the next CA the active one and retires the old: its
// certificate is appended to ca-retired.crt and its key deleted. It
// fails with ErrNoRotation when no rotation is under way.
func (c *CAs) Complete() (CAStatus, error) {
	c.mu.Lock()
	if c.next == nil {
		c.mu.Unlock()
		return CAStatus{}, ErrNoRotation
	}
	old, next := c.active, *c.next
	retiredPEM := slices.Clone(old.pem)
	if prev, err := os.ReadFile(filepath.Join(c.dir, RetiredCACertName)); err == nil {
		retiredPEM = append(prev, retiredPEM...)
	}
	keyPEM, err := os.ReadFile(filepath.Join(c.dir, NextCAKeyName))
	steps := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{RetiredCACertName, retiredPEM, 0o644},
		{CAKeyName, keyPEM, 0o600}, // a crash after this one: finishCompletion
		{CACertName, next.pem, 0o644},
	}
	for _, s := range steps {
		if err != nil {
			break
		}
		err = store.WriteFileAtomic(filepath.Join(c.dir, s.name), s.data, s.mode)
	}
	if err == nil {
		err = removeNext(c.dir)
	}
	if err != nil {
		c.mu.Unlock()
		return CAStatus{}, fmt.Errorf("complete the CA rotation: %w", err)
	}
	c.active, c.next = next, nil
	c.retired = append(c.retired, old.cert)
	c.mu.Unlock()
	st := c.Status()
	c.log.Info("CA rotation complete: the old CA is retired and refused", "active", st.Active, "retired", schema.CAHash(old.cert))
	c.changed()
	return st, nil
}

// newCA makes a CA certificate and key.
func newCA(now time.Time) (*caPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		Subject: pkix.Name{
			CommonName:   strings.TrimSpace("Fleet hub CA " + host + " " + now.UTC().Format("2006-01-02T15:04:05Z")),
			Organization: []string{"Fleet"},
		},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	cert, certPEM, keyPEM, err := issue(tmpl, nil, key, key)
	if err != nil {
		return nil, err
	}
	return &caPair{cert: cert, key: &caKeyPEM{Signer: key, pem: keyPEM}, pem: certPEM}, nil
}

// caKeyPEM is a new CA's key with its PEM, until it is written.
type caKeyPEM struct {
	crypto.Signer
	pem []byte
}

// writeCAPair writes a new CA's key, then its certificate.
func writeCAPair(dir, certName, keyName string, p *caPair) error {
	k, ok := p.key.(*caKeyPEM)
	if !ok {
		return errors.New("write CA: the key has no PEM")
	}
	if err := store.WriteFileAtomic(filepath.Join(dir, keyName), k.pem, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyName, err)
	}
	if err := store.WriteFileAtomic(filepath.Join(dir, certName), p.pem, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", certName, err)
	}
	p.key = k.Signer
	return nil
}
