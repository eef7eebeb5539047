package client_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
)

// testCA is a CA and a server certificate for 127.0.0.1 it signed.
type testCA struct {
	pem    []byte
	server tls.Certificate
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		server: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
	}
}

// startTLSHub serves /v1/info over HTTPS with ca's server certificate.
func startTLSHub(t *testing.T, ca testCA) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"version":"v1","store":"s"}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPinnedCAAcceptsItsHubAndRefusesAnother(t *testing.T) {
	caA, caB := newTestCA(t, "hub A CA"), newTestCA(t, "hub B CA")
	hubA, hubB := startTLSHub(t, caA), startTLSHub(t, caB)

	pinnedToA := func(hub string) (*client.Client, error) {
		return client.Config{Hub: hub, Token: "t", CA: caA.pem, CASource: "context \"a\""}.Client()
	}
	cl, err := pinnedToA(hubA)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cl.Info(t.Context()); err != nil || info.Version != "v1" {
		t.Fatalf("the hub of the pinned CA: %v %+v", err, info)
	}
	// Hub B's certificate is valid, but not signed by the pinned CA.
	cl, err = pinnedToA(hubB)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Info(t.Context())
	if !errors.Is(err, client.ErrUntrustedHub) || !strings.Contains(err.Error(), `context "a"`) || !strings.Contains(err.Error(), "--certificate-authority") {
		t.Fatalf("a hub of another CA: %v", err)
	}
	// Without a pinned CA, the system's roots do not know either.
	cl, err = client.Config{Hub: hubA, Token: "t"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Info(t.Context()); err == nil {
		t.Fatal("an unpinned client trusted a private CA")
	}
	// A CA that is not PEM is an error, not a silent fallback.
	if _, err := (client.Config{Hub: hubA, Token: "t", CA: []byte("junk"), CASource: "x"}).Client(); err == nil {
		t.Fatal("a junk CA made a client")
	}
}
