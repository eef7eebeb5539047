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
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// newCAServer returns a CA and a TLS listener on loopback presenting a
// certificate it signed, with the CA in the chain, as the hub does.
func newCAServer(t *testing.T) (*x509.Certificate, string) {
	t.Helper()
	return newCAServerFor(t, []net.IP{net.ParseIP("127.0.0.1")}, nil)
}

// newCAServerFor is newCAServer with a certificate for ips and names.
func newCAServerFor(t *testing.T, ips []net.IP, names []string) (*x509.Certificate, string) {
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
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: ips, DNSNames: names}
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
	cfg, err := PinCATLSConfig(&tls.Config{ServerName: "127.0.0.1"}, schema.CAHash(caA), func(c *x509.Certificate) { got = c })
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
	// Dialled by IP with no name configured: refused, not left unchecked.
	noName, err := PinCATLSConfig(nil, schema.CAHash(caA), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", addrA, noName); err == nil || !strings.Contains(err.Error(), "no server name") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("an IP broker with no server name to check: %v", err)
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

// TestPinCATLSConfigIPSAN: a broker dialled by IP address (no SNI) must
// present a certificate carrying that address as an IP SAN, even when
// it is signed by the pinned CA: a certificate the CA issued for another
// name or address is refused.
func TestPinCATLSConfigIPSAN(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ips   []net.IP
		names []string
		ok    bool
	}{
		{"the IP dialled", []net.IP{net.ParseIP("127.0.0.1")}, nil, true},
		{"a DNS name only", nil, []string{"hub.example"}, false},
		{"another IP", []net.IP{net.ParseIP("10.9.9.9")}, []string{"localhost"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ca, addr := newCAServerFor(t, tt.ips, tt.names)
			dir := t.TempDir()
			cfg, src, err := BrokerTLS(TrustOptions{CAHash: schema.CAHash(ca), StateDir: dir, ServerName: "127.0.0.1"})
			if err != nil || src != TrustCAHash {
				t.Fatalf("BrokerTLS = %q, %v", src, err)
			}
			err = dialWith(cfg, addr)
			if tt.ok != (err == nil) {
				t.Fatalf("dial %s: %v, want ok=%v", addr, err, tt.ok)
			}
			if !tt.ok && !strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("the refusal does not name the address: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, CAFile)); tt.ok == errors.Is(err, os.ErrNotExist) {
				t.Errorf("CA saved = %v, want %v", err == nil, tt.ok)
			}
		})
	}
}
