package hub

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

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
