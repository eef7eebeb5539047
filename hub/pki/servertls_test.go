package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// readCert reads the first certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSetupTLSMakesCAAndServerCertificate(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	now := time.Now()
	sans := ServerSANs([]string{"ssl://mqtt.example.com:8883", "https://api.example.com:8443", ""}, []string{"extra.example.com", "10.9.8.7"})
	for _, want := range []string{"localhost", "127.0.0.1", "::1", "mqtt.example.com", "api.example.com", "extra.example.com", "10.9.8.7"} {
		if !slices.Contains(sans, want) {
			t.Errorf("SANs %v lack %s", sans, want)
		}
	}
	if h, err := os.Hostname(); err == nil && !slices.Contains(sans, strings.ToLower(h)) {
		t.Errorf("SANs %v lack the host name %s", sans, h)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !slices.Contains(sans, n.IP.String()) {
			t.Errorf("SANs %v lack the interface address %s", sans, n.IP)
		}
	}

	first, err := SetupServerTLS("", "", dir, sans, now, log)
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{CACertName: 0o644, CAKeyName: 0o600, ServerCertName: 0o644, ServerKeyName: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	ca := readCert(t, filepath.Join(dir, CACertName))
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA || ca.NotAfter.Sub(now) < 9*365*24*time.Hour {
		t.Errorf("CA: IsCA %v, %v, until %v", ca.IsCA, ca.PublicKeyAlgorithm, ca.NotAfter)
	}
	if first.CAHash() != schema.CAHash(ca) || !strings.HasPrefix(first.CAHash(), "sha256:") || len(first.CAHash()) != 7+64 {
		t.Errorf("CA hash %q", first.CAHash())
	}
	leaf := readCert(t, filepath.Join(dir, ServerCertName))
	if d := leaf.NotAfter.Sub(now); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("server certificate valid for %v, want a year", d)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"localhost", "127.0.0.1", "::1", "mqtt.example.com", "extra.example.com", "10.9.8.7"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	// The presented chain carries the CA, for clients that pin it by hash.
	if c := first.cert.Load(); len(c.Certificate) != 2 || !bytes.Equal(c.Certificate[1], ca.Raw) {
		t.Errorf("chain of %d certificates, want the leaf and the CA", len(c.Certificate))
	}

	// A second start keeps both.
	if _, err := SetupServerTLS("", "", dir, sans, now.Add(time.Hour), log); err != nil {
		t.Fatal(err)
	}
	if again := readCert(t, filepath.Join(dir, ServerCertName)); again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Error("a current server certificate was replaced")
	}
	// Within 30 days of its end it is renewed, by the same CA.
	if _, err := SetupServerTLS("", "", dir, sans, leaf.NotAfter.Add(-29*24*time.Hour), log); err != nil {
		t.Fatal(err)
	}
	renewed := readCert(t, filepath.Join(dir, ServerCertName))
	if renewed.SerialNumber.Cmp(leaf.SerialNumber) == 0 || !renewed.NotAfter.After(leaf.NotAfter) {
		t.Errorf("not renewed within 30 days of its end: until %v", renewed.NotAfter)
	}
	if again := readCert(t, filepath.Join(dir, CACertName)); !bytes.Equal(again.Raw, ca.Raw) {
		t.Error("the CA changed")
	}
	// A new name reissues it.
	if _, err := SetupServerTLS("", "", dir, append(sans, "new.example.com"), now, log); err != nil {
		t.Fatal(err)
	}
	if got := readCert(t, filepath.Join(dir, ServerCertName)); !slices.Contains(got.DNSNames, "new.example.com") {
		t.Errorf("names %v lack the new one", got.DNSNames)
	}
	// A CA key without its certificate is never replaced silently.
	if err := os.Remove(filepath.Join(dir, CACertName)); err != nil {
		t.Fatal(err)
	}
	if _, err := SetupServerTLS("", "", dir, sans, now, log); err == nil || !strings.Contains(err.Error(), CACertName) {
		t.Errorf("a half CA: %v", err)
	}
}
