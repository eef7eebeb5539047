package enroll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestClientCertFiles: the key is made once (0600) and reused, the CSR
// names the device, and WithClientCert presents nothing until a
// certificate for the key is saved, then that certificate.
func TestClientCertFiles(t *testing.T) {
	dir := t.TempDir()
	p, err := WriteClientCSR(dir, "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, ClientKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("client key: %v %v", st, err)
	}
	keyBefore, _ := os.ReadFile(filepath.Join(dir, ClientKeyFile))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil || csr.Subject.CommonName != "pi-1" || csr.CheckSignature() != nil {
		t.Fatalf("CSR: %v %v", csr.Subject, err)
	}
	if _, err := ClientCSR(dir, "pi-1"); err != nil {
		t.Fatal(err)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dir, ClientKeyFile)); string(keyAfter) != string(keyBefore) {
		t.Error("a second CSR made a new key")
	}

	cfg := WithClientCert(&tls.Config{MinVersion: tls.VersionTLS12}, dir)
	if c, err := cfg.GetClientCertificate(nil); err != nil || len(c.Certificate) != 0 || HasClientCert(dir) {
		t.Fatalf("without a certificate: %v %v", c, err)
	}
	if WithClientCert(nil, dir) != nil {
		t.Error("a plain broker's nil configuration became one")
	}

	// Sign the CSR with a throwaway CA, as the hub does.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pi-1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		ca, csr.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveClientCert(dir, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the CSR outlived the certificate: %v", err)
	}
	c, err := cfg.GetClientCertificate(nil)
	if err != nil || len(c.Certificate) != 1 || string(c.Certificate[0]) != string(der) {
		t.Fatalf("with a certificate: %v", err)
	}
	// An expired certificate is presented when there is nothing newer:
	// the broker admits it, with the token, to renew it.
	expired, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(4), Subject: pkix.Name{CommonName: "pi-1"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		ca, csr.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveClientCert(dir, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: expired})); err != nil {
		t.Fatal(err)
	}
	if c, err := cfg.GetClientCertificate(nil); err != nil || len(c.Certificate) != 1 || string(c.Certificate[0]) != string(expired) {
		t.Fatalf("the expired certificate is not presented: %d certificate(s), %v", len(c.Certificate), err)
	}
	if !ClientCertExpired(dir, time.Now()) || ClientCertExpired(dir, time.Now().Add(-90*time.Minute)) {
		t.Error("ClientCertExpired: wrong at or before the end of the certificate")
	}
	// A certificate for another key is refused.
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der2, _ := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "pi-1"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}, ca, &otherKey.PublicKey, caKey)
	if err := SaveClientCert(dir, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der2})); err == nil {
		t.Error("saved a certificate of another key")
	}
}
