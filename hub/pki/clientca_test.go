package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

func parseCertPEM(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", s)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientCASignsCSR: the certificate is the device's (CommonName),
// for client authentication only, a year long, and verifies against the
// hub's CA; a CSR for another name, or no CSR, is refused as invalid.
func TestClientCASignsCSR(t *testing.T) {
	ca, err := NewClientCA(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	ca.now = func() time.Time { return now }
	csrPEM, err := enroll.ClientCSR(t.TempDir(), "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSR(string(csrPEM), "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, notAfter, err := ca.Sign(csr, "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCertPEM(t, string(certPEM))
	if cert.Subject.CommonName != "pi-1" || len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || cert.IsCA {
		t.Errorf("certificate: CN %q, usage %v, CA %v", cert.Subject.CommonName, cert.ExtKeyUsage, cert.IsCA)
	}
	if want := now.Add(365 * 24 * time.Hour); !cert.NotAfter.Equal(want) || !notAfter.Equal(want) || !cert.NotBefore.Equal(now.Add(-time.Hour)) {
		t.Errorf("valid %s to %s (reported %s), want a year from %s", cert.NotBefore, cert.NotAfter, notAfter, now)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify as a client certificate: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate verifies as a server certificate")
	}

	for name, in := range map[string]string{
		"another device's CSR": string(csrPEM),
		"no CSR":               "",
		"a certificate":        string(certPEM),
		"garbage":              "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
	} {
		if _, err := ParseCSR(in, "pi-2"); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
