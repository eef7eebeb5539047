package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// clientCertValidity is the lifetime of a device's client certificate.
const clientCertValidity = 365 * 24 * time.Hour

// ClientCA signs devices' client certificates with the hub's own CA (the
// one in the data directory, ca.crt and ca.key): at enrollment, and on
// POST /v1/devices/{name}/certificate for devices added with a token.
// The embedded broker verifies client certificates against it
// (--mqtt-client-certs).
type ClientCA struct {
	cas *CAs
	now func() time.Time
}

// NewClientCA loads the hub's CA from dataDir, creating it if there is
// none yet (a hub with --tls-cert and --tls-key has no CA of its own
// until client certificates are asked for).
func NewClientCA(dataDir string, log *slog.Logger) (*ClientCA, error) {
	cas, err := LoadCAs(dataDir, time.Now(), log)
	if err != nil {
		return nil, fmt.Errorf("client certificates: %w", err)
	}
	return NewClientCAOf(cas), nil
}

// NewClientCAOf signs with the active CA of cas (the one ServerTLS
// shares).
func NewClientCAOf(cas *CAs) *ClientCA { return &ClientCA{cas: cas, now: time.Now} }

// CAs are the CAs the ClientCA signs with.
func (c *ClientCA) CAs() *CAs { return c.cas }

// PEM is every CA devices are to trust (CAs.BundlePEM), PEM-encoded, as
// devices are given it.
func (c *ClientCA) PEM() []byte { return c.cas.BundlePEM() }

// Pool is the CAs whose client certificates the broker accepts: the
// active one and, during a rotation, the next (CAs.Pool). Ask again at
// each handshake: a completed rotation drops the old CA.
func (c *ClientCA) Pool() *x509.CertPool { return c.cas.Pool() }

// ParseCSR decodes a PEM certificate signing request, checks its
// signature and that it is for device (CommonName). Errors wrap
// schema.ErrInvalid.
func ParseCSR(csrPEM, device string) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode([]byte(csrPEM))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("csr: want a PEM CERTIFICATE REQUEST: %w", schema.ErrInvalid)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("csr: %w: %w", schema.ErrInvalid, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr: signature: %w: %w", schema.ErrInvalid, err)
	}
	if csr.Subject.CommonName != device {
		return nil, fmt.Errorf("csr: common name %q: a certificate for device %q must name it: %w", csr.Subject.CommonName, device, schema.ErrInvalid)
	}
	return csr, nil
}

// Sign issues the client certificate of device for csr: CommonName the
// device's name, client authentication only, one year (never past the
// CA's end). It returns the certificate's PEM and its end.
func (c *ClientCA) Sign(csr *x509.CertificateRequest, device string) ([]byte, time.Time, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("client certificate of %s: serial number: %w", device, err)
	}
	now := c.now()
	ca, caKey := c.cas.Active()
	notAfter := now.Add(clientCertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: device, Organization: []string{"Fleet devices"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, csr.PublicKey, caKey)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("client certificate of %s: sign: %w", device, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), notAfter, nil
}
