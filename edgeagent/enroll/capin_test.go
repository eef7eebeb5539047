package enroll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// newCAServer returns a CA and a TLS listener on loopback presenting a
// certificate it signed, with the CA in the chain, as the hub does.
func newCAServer(t *testing.T) (*x509.Certificate, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der, caDER}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ca, ln.Addr().String()
}

func TestPinCATLSConfig(t *testing.T) {
	caA, addrA := newCAServer(t)
	caB, addrB := newCAServer(t)
	var got *x509.Certificate
	cfg, err := PinCATLSConfig(nil, schema.CAHash(caA), func(c *x509.Certificate) { got = c })
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addrA, cfg)
	if err != nil {
		t.Fatalf("the hub of the pinned CA: %v", err)
	}
	c.Close()
	if got == nil || !got.Equal(caA) {
		t.Fatal("onCA did not get the pinned CA")
	}
	// Another CA: refused.
	if c, err := tls.Dial("tcp", addrB, cfg); err == nil || !errors.Is(err, ErrCAMismatch) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a hub of another CA: %v", err)
	}
	// The right CA but the wrong name: normal verification still runs.
	cfgName := cfg.Clone()
	cfgName.ServerName = "elsewhere.example"
	if c, err := tls.Dial("tcp", addrA, cfgName); err == nil {
		c.Close()
		t.Fatal("a certificate for another name was accepted")
	}
	if _, err := PinCATLSConfig(nil, "sha256:zz", nil); err == nil {
		t.Error("a malformed hash was accepted")
	}
	dir := t.TempDir()
	if err := SaveCA(dir, caB); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, CAFile)); err != nil || len(b) == 0 {
		t.Fatalf("saved CA: %v", err)
	}
}
