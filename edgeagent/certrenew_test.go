package edgeagent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/enroll"
)

// TestClientCertDue: a certificate is due once two thirds of its life
// have passed, and when expired; none, or a certificate that does not
// match the key, is never due (nothing to renew).
func TestClientCertDue(t *testing.T) {
	dir := t.TempDir()
	csrPEM, err := enroll.ClientCSR(dir, "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(csrPEM)
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	if due, _ := clientCertDue(dir, t0); due {
		t.Fatal("due without a certificate")
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: t0.Add(-time.Hour),
		NotAfter: t0.Add(100 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pi-1"},
		NotBefore: t0, NotAfter: t0.Add(30 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, csr.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, enroll.ClientCertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {19*time.Hour + 59*time.Minute, false}, {20 * time.Hour, true}, {29 * time.Hour, true}, {31 * time.Hour, true}} {
		if due, leaf := clientCertDue(dir, t0.Add(c.at)); due != c.want || leaf == nil {
			t.Errorf("at %v of a 30 h certificate: due %v, want %v", c.at, due, c.want)
		}
	}
	// Another key's certificate does not load: nothing to renew with.
	if err := os.Remove(filepath.Join(dir, enroll.ClientKeyFile)); err != nil {
		t.Fatal(err)
	}
	if due, _ := clientCertDue(dir, t0.Add(29*time.Hour)); due {
		t.Error("due without its key")
	}
}
