package mqttiotest

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// TestSelfSigned: the forms agree, and a client trusting Pool (or the
// written certificate file) accepts the certificate for 127.0.0.1.
func TestSelfSigned(t *testing.T) {
	c := SelfSigned(t)
	if _, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatalf("PEMs do not pair: %v", err)
	}
	opts := x509.VerifyOptions{Roots: c.Pool, DNSName: "127.0.0.1"}
	if _, err := c.TLS.Leaf.Verify(opts); err != nil {
		t.Fatalf("not trusted through Pool: %v", err)
	}
	certFile, keyFile := c.WriteFiles(t, t.TempDir(), "hub")
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatalf("written files: %v", err)
	}
	caPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("certificate file is not a CA file")
	}
	if _, err := c.TLS.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("not trusted through the certificate file: %v", err)
	}
}
