package enroll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/schema"
)

// testCA signs broker certificates for tests of several brokers.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key}
}

// serve listens on addr (host:0) with a certificate the CA signed for
// ip, the CA in the chain, and returns the address.
func (ca testCA) serve(t *testing.T, addr string, ip net.IP) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{ip}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}}})
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
	return ln.Addr().String()
}

// dialBroker dials the broker URL as the agent does, with ForBroker.
func dialBroker(t *testing.T, cfg *tls.Config, broker string) error {
	t.Helper()
	u, err := schema.ParseBrokerURL(broker)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	conn, err := mqttio.Dial(ctx, u, ForBroker(cfg, u), 5*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// TestForBrokerPinCoversEveryBroker: one trust made for the first broker
// of a list (ServerName its address) verifies each broker for its own
// address: the pinned CA hash admits a second broker at another IP that
// the same CA signed, and refuses one another CA signed, or one whose
// certificate names another address; a saved CA and a CA bundle do the
// same.
func TestForBrokerPinCoversEveryBroker(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	ip1, ip2 := net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.2")
	first := "ssl://" + ca.serve(t, "127.0.0.1:0", ip1)
	second := "ssl://" + ca.serve(t, "127.0.0.2:0", ip2)
	rogue := "ssl://" + other.serve(t, "127.0.0.2:0", ip2)
	misnamed := "ssl://" + ca.serve(t, "127.0.0.2:0", ip1) // signed by the CA for another address

	dir := t.TempDir()
	u1, _ := url.Parse(first)
	pinned, src, err := BrokerTLS(TrustOptions{CAHash: schema.CAHash(ca.cert), StateDir: dir, ServerName: u1.Hostname()})
	if err != nil || src != TrustCAHash {
		t.Fatalf("BrokerTLS = %q, %v", src, err)
	}
	check := func(what string, cfg *tls.Config) {
		t.Helper()
		if err := dialBroker(t, cfg, first); err != nil {
			t.Errorf("%s: first broker: %v", what, err)
		}
		if err := dialBroker(t, cfg, second); err != nil {
			t.Errorf("%s: second broker, same CA, its own address: %v", what, err)
		}
		if err := dialBroker(t, cfg, rogue); err == nil {
			t.Errorf("%s: a broker of another CA was accepted", what)
		}
		if err := dialBroker(t, cfg, misnamed); err == nil {
			t.Errorf("%s: a certificate for another address was accepted", what)
		}
	}
	check("pinned CA hash", pinned)
	// The second broker's certificate alone would fail without ForBroker:
	// the pinned configuration falls back to the first broker's address.
	if conn, err := tls.Dial("tcp", second[len("ssl://"):], pinned); err == nil {
		conn.Close()
		t.Fatal("without ForBroker the second broker verified: the test proves nothing")
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); err != nil {
		t.Fatalf("the CA verified by the hash was not saved: %v", err)
	}
	saved, src, err := BrokerTLS(TrustOptions{CAHash: schema.CAHash(ca.cert), StateDir: dir, ServerName: u1.Hostname()})
	if err != nil || src != TrustSavedCA {
		t.Fatalf("BrokerTLS after the first contact = %q, %v", src, err)
	}
	check("saved CA", saved)
	check("saved CA with the bundle wrapper", WithCABundle(saved, dir, u1.Hostname()))
	check("saved CA with a client certificate", WithClientCert(WithCABundle(saved, dir, u1.Hostname()), dir))

	if ForBroker(nil, u1) != nil {
		t.Error("ForBroker(nil) is not nil")
	}
	plain, _ := url.Parse("tcp://127.0.0.1:1883")
	if got := ForBroker(saved, plain); got != saved {
		t.Error("a plain broker's configuration was changed")
	}
}
