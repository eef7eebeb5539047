package mqttio

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
)

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	caFile, _ := mqttiotest.SelfSigned(t).WriteFiles(t, dir, "ca")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	basePool := x509.NewCertPool()
	base := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: basePool, ServerName: "hub"}

	tests := []struct {
		name      string
		base      *tls.Config
		caFile    string
		roots     int // certificates in RootCAs; -1 for nil (system roots)
		minTLS13  bool
		serverHub bool
		err       string
	}{
		{name: "defaults", roots: -1},
		{name: "CA file only", caFile: caFile, roots: 1},
		{name: "base kept", base: base, roots: 0, minTLS13: true, serverHub: true},
		{name: "base and CA file", base: base, caFile: caFile, roots: 1, minTLS13: true, serverHub: true},
		{name: "missing CA file", caFile: filepath.Join(dir, "missing.pem"), err: "read CA file"},
		{name: "CA file without PEM", caFile: notPEM, err: "no PEM certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := TLSConfig(tt.base, tt.caFile)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg == tt.base {
				t.Fatal("returned the base itself, not a clone")
			}
			switch {
			case tt.roots < 0 && cfg.RootCAs != nil:
				t.Errorf("RootCAs set, want the system roots")
			case tt.roots >= 0 && (cfg.RootCAs == nil || len(cfg.RootCAs.Subjects()) != tt.roots):
				t.Errorf("RootCAs = %v, want %d certificates", cfg.RootCAs, tt.roots)
			}
			if (cfg.MinVersion == tls.VersionTLS13) != tt.minTLS13 || cfg.MinVersion < tls.VersionTLS12 {
				t.Errorf("MinVersion = %#x", cfg.MinVersion)
			}
			if (cfg.ServerName == "hub") != tt.serverHub {
				t.Errorf("ServerName = %q", cfg.ServerName)
			}
		})
	}
	if len(basePool.Subjects()) != 0 {
		t.Error("TLSConfig added the CA to the base's pool")
	}
}
