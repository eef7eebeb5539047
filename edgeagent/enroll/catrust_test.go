package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func writeCA(t *testing.T, ca *x509.Certificate) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func dialWith(cfg *tls.Config, addr string) error {
	c := cfg.Clone()
	c.ServerName = "127.0.0.1" // as mqttio.Dial sets it from the URL
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		return err
	}
	return conn.Close()
}

// TestBrokerTLSPinThenSaved: a first contact by the hash alone refuses
// another CA and saves nothing; against the pinned hub it saves the CA,
// which the next configuration trusts alone.
func TestBrokerTLSPinThenSaved(t *testing.T) {
	caA, addrA := newCAServer(t)
	_, addrB := newCAServer(t)
	dir := t.TempDir()
	o := TrustOptions{CAHash: schema.CAHash(caA), StateDir: dir, ServerName: "127.0.0.1"}

	cfg, src, err := BrokerTLS(o)
	if err != nil || src != TrustCAHash {
		t.Fatalf("BrokerTLS = %q, %v; want %q", src, err, TrustCAHash)
	}
	err = dialWith(cfg, addrB)
	if !errors.Is(err, ErrCAMismatch) || !strings.Contains(err.Error(), schema.CAHash(caA)) {
		t.Fatalf("a broker of another CA: %v; want ErrCAMismatch naming the pinned hash", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a CA was saved after a refused handshake: %v", err)
	}
	if err := dialWith(cfg, addrA); err != nil {
		t.Fatalf("the pinned broker: %v", err)
	}
	if err := fileMatches(filepath.Join(dir, CAFile), schema.CAHash(caA)); err != nil {
		t.Fatalf("saved CA: %v", err)
	}

	cfg, src, err = BrokerTLS(o)
	if err != nil || src != TrustSavedCA {
		t.Fatalf("after the first contact BrokerTLS = %q, %v; want %q", src, err, TrustSavedCA)
	}
	if cfg.InsecureSkipVerify || cfg.RootCAs == nil {
		t.Fatal("the saved CA's configuration does not verify by its roots")
	}
	if err := dialWith(cfg, addrA); err != nil {
		t.Fatalf("the pinned broker with the saved CA: %v", err)
	}
	var verr *tls.CertificateVerificationError
	if err := dialWith(cfg, addrB); !errors.As(err, &verr) {
		t.Fatalf("another CA with the saved CA: %v; want a verification error", err)
	}
	// Without the hash the saved CA is still the only root.
	if _, src, err := BrokerTLS(TrustOptions{StateDir: dir}); err != nil || src != TrustSavedCA {
		t.Fatalf("saved CA without --ca-hash: %q, %v", src, err)
	}
}

func TestBrokerTLSSources(t *testing.T) {
	caA, addrA := newCAServer(t)
	caB, _ := newCAServer(t)
	fileA := writeCA(t, caA)

	// A CA file: the only root; a hash it does not carry is refused.
	cfg, src, err := BrokerTLS(TrustOptions{CAFile: fileA, CAHash: schema.CAHash(caA), StateDir: t.TempDir()})
	if err != nil || src != TrustCAFile {
		t.Fatalf("CA file = %q, %v", src, err)
	}
	if err := dialWith(cfg, addrA); err != nil {
		t.Fatalf("CA file: %v", err)
	}
	if _, _, err := BrokerTLS(TrustOptions{CAFile: fileA, CAHash: schema.CAHash(caB)}); !errors.Is(err, ErrCAMismatch) {
		t.Fatalf("CA file of another hash: %v", err)
	}

	// A saved CA that is not the hash's: refused, saying how to re-pin.
	dir := t.TempDir()
	if err := SaveCA(dir, caB); err != nil {
		t.Fatal(err)
	}
	if _, _, err := BrokerTLS(TrustOptions{CAHash: schema.CAHash(caA), StateDir: dir}); !errors.Is(err, ErrCAMismatch) || !strings.Contains(err.Error(), "remove the file") {
		t.Fatalf("saved CA of another hash: %v", err)
	}

	// Nothing: the system roots, which do not know the test CA.
	cfg, src, err = BrokerTLS(TrustOptions{StateDir: t.TempDir()})
	if err != nil || src != TrustSystem || cfg.RootCAs != nil || cfg.InsecureSkipVerify {
		t.Fatalf("no CA = %q, %v", src, err)
	}
	if err := dialWith(cfg, addrA); err == nil {
		t.Fatal("the system roots trusted a private CA")
	}

	for _, o := range []TrustOptions{
		{CAHash: "sha256:00", StateDir: dir},
		{CAHash: schema.CAHash(caA)}, // nowhere to save the CA
		{CAFile: filepath.Join(dir, "missing.crt")},
	} {
		if _, _, err := BrokerTLS(o); err == nil {
			t.Errorf("BrokerTLS(%+v) accepted", o)
		}
	}
}
