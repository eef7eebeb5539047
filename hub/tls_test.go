package hub

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/client"
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
	sans := serverSANs([]string{"ssl://mqtt.example.com:8883", "https://api.example.com:8443", ""}, []string{"extra.example.com", "10.9.8.7"})
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

	first, err := setupTLS("", "", dir, sans, now, log)
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
	if first.caHash() != schema.CAHash(ca) || !strings.HasPrefix(first.caHash(), "sha256:") || len(first.caHash()) != 7+64 {
		t.Errorf("CA hash %q", first.caHash())
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
	if _, err := setupTLS("", "", dir, sans, now.Add(time.Hour), log); err != nil {
		t.Fatal(err)
	}
	if again := readCert(t, filepath.Join(dir, ServerCertName)); again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Error("a current server certificate was replaced")
	}
	// Within 30 days of its end it is renewed, by the same CA.
	if _, err := setupTLS("", "", dir, sans, leaf.NotAfter.Add(-29*24*time.Hour), log); err != nil {
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
	if _, err := setupTLS("", "", dir, append(sans, "new.example.com"), now, log); err != nil {
		t.Fatal(err)
	}
	if got := readCert(t, filepath.Join(dir, ServerCertName)); !slices.Contains(got.DNSNames, "new.example.com") {
		t.Errorf("names %v lack the new one", got.DNSNames)
	}
	// A CA key without its certificate is never replaced silently.
	if err := os.Remove(filepath.Join(dir, CACertName)); err != nil {
		t.Fatal(err)
	}
	if _, err := setupTLS("", "", dir, sans, now, log); err == nil || !strings.Contains(err.Error(), CACertName) {
		t.Errorf("a half CA: %v", err)
	}
}

func TestPlainListenersOnlyOnLoopback(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // in the error; "" for none
	}{
		{"defaults", Options{}, ""},
		{"loopback", Options{HTTPAddr: "127.0.0.1:0", MQTTAddr: "[::1]:0"}, ""},
		{"localhost", Options{HTTPAddr: "localhost:0", MQTTAddr: "localhost:0"}, ""},
		{"http on every interface", Options{HTTPAddr: ":8080"}, "--insecure-plaintext"},
		{"http on an address", Options{HTTPAddr: "10.0.0.1:8080"}, "--http-addr 10.0.0.1:8080"},
		{"mqtt on every interface", Options{MQTTAddr: ":1883"}, "--mqtt-addr :1883"},
		{"mqtt unspecified", Options{MQTTAddr: "0.0.0.0:1883"}, "MQTT over TLS"},
		{"insecure", Options{HTTPAddr: ":8080", MQTTAddr: ":1883", InsecurePlaintext: true}, ""},
		{"external broker", Options{MQTTAddr: ":1883", Broker: "tcp://mq:1883"}, ""},
		{"https only", Options{HTTPAddr: Off, HTTPSAddr: ":8443"}, ""},
		{"no api", Options{HTTPAddr: Off}, "no API listener"},
		{"no mqtt", Options{MQTTAddr: Off}, "no MQTT listener"},
		{"mqtts only", Options{MQTTAddr: Off, MQTTTLSAddr: ":8883"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.setDefaults()
			err := o.check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
	// New refuses before binding anything or creating the store.
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := New(t.Context(), Options{DataDir: dir, HTTPAddr: ":0"}); err == nil || !strings.Contains(err.Error(), "--insecure-plaintext") {
		t.Errorf("New with plain HTTP on every interface: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused hub left %s: %v", dir, err)
	}
}

func TestHubServesTLSWithItsOwnCA(t *testing.T) {
	h := startHub(t, Options{HTTPAddr: Off, MQTTAddr: Off, HTTPSAddr: "127.0.0.1:0", MQTTTLSAddr: "127.0.0.1:0"})
	info := h.Info()
	if !strings.HasPrefix(info.URL, "https://127.0.0.1:") || info.URL != info.HTTPSURL || info.MQTTAddr != "" || info.MQTTPlainURL != "" ||
		!strings.HasPrefix(info.MQTTURL, "ssl://127.0.0.1:") || info.CAHash == "" {
		t.Fatalf("info %+v", info)
	}
	// admin.conf names the HTTPS URL and carries the CA; the client
	// built from it verifies the hub against that CA alone.
	cfg, err := client.LoadConfigFile(info.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hub != info.URL || !bytes.Equal(cfg.CA, info.CA) {
		t.Fatalf("admin.conf: hub %s, CA %d bytes", cfg.Hub, len(cfg.CA))
	}
	cl, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	hi, err := cl.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if hi.CAHash != info.CAHash || hi.HTTPSURL != info.HTTPSURL {
		t.Errorf("/v1/info %+v", hi)
	}
	// The hash pins the CA the MQTT listener presents too.
	pool, err := client.CertPool(info.CA)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", info.MQTTTLSAddr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("MQTT over TLS with the hub's CA: %v", err)
	}
	chain := conn.ConnectionState().PeerCertificates
	conn.Close()
	if root := chain[len(chain)-1]; !schema.MatchCAHash(root, info.CAHash) {
		t.Error("the MQTT listener's chain does not end in the pinned CA")
	}
}

func TestHubReloadsGivenCertificateOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	one, two := mqttiotest.SelfSigned(t), mqttiotest.SelfSigned(t)
	certFile, keyFile := one.WriteFiles(t, dir, "hub")
	h := startHub(t, Options{TLSCertFile: certFile, TLSKeyFile: keyFile, HTTPSAddr: "127.0.0.1:0", MQTTTLSAddr: "127.0.0.1:0"})
	info := h.Info()
	if info.CAHash != "" || info.CA != nil {
		t.Errorf("a given certificate has no hub CA: %+v", info)
	}
	u, err := url.Parse(info.HTTPSURL)
	if err != nil {
		t.Fatal(err)
	}
	pool := one.Pool.Clone()
	pool.AddCert(two.TLS.Leaf)
	presented := func(addr string) []byte {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	for _, addr := range []string{u.Host, info.MQTTTLSAddr} {
		if !bytes.Equal(presented(addr), one.TLS.Leaf.Raw) {
			t.Fatalf("%s does not present the given certificate", addr)
		}
	}
	// A broken pair is refused and the current one kept.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, h, "tls certificate not reloaded")
	if !bytes.Equal(presented(u.Host), one.TLS.Leaf.Raw) {
		t.Fatal("a broken pair replaced the certificate")
	}
	two.WriteFiles(t, dir, "hub")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range []string{u.Host, info.MQTTTLSAddr} {
		for !bytes.Equal(presented(addr), two.TLS.Leaf.Raw) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still presents the old certificate after SIGHUP", addr)
			}
			time.Sleep(10 * time.Millisecond) // poll interval
		}
	}
}

// awaitLog polls the hub's logs for s.
func awaitLog(t *testing.T, h *testHub, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for !strings.Contains(h.logs.String(), s) {
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the logs", s)
		case <-time.After(10 * time.Millisecond): // poll interval
		}
	}
}
