package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/enroll"
)

func TestBootstrapConfig(t *testing.T) {
	bt := writeFile(t, "bootstrap-token", "abcdef.0123456789abcdefghijklmnopqrstuv\n")
	// With a bootstrap token the device name may come from the system.
	c, err := parse(t, "--bootstrap-token-file", bt, "--name-from", "serial")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := c.bootstrapToken(); err != nil || tok != "abcdef.0123456789abcdefghijklmnopqrstuv" {
		t.Fatalf("bootstrap token = %q, %v", tok, err)
	}
	t.Setenv("FLEET_AGENT_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdefghijklmnopqrstuv")
	if c, err := parse(t); err != nil || !c.bootstrap() || c.NameFrom != "hostname" {
		t.Fatalf("bootstrap token from the environment: %+v %v", c, err)
	}
	t.Setenv("FLEET_AGENT_BOOTSTRAP_TOKEN", "")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"both bootstrap flags", []string{"--bootstrap-token", "x", "--bootstrap-token-file", bt}, "mutually exclusive"},
		{"bootstrap and token", []string{"--device", "pi", "--token", "t", "--bootstrap-token-file", bt}, "mutually exclusive"},
		{"bad name source", []string{"--bootstrap-token-file", bt, "--name-from", "mac"}, "--name-from"},
		{"neither device nor bootstrap", []string{"--state-dir", t.TempDir()}, "--bootstrap-token-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parse(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEnrolledNeedsNoDevice: an enrolled agent restarted with neither
// --device nor a bootstrap token uses what enrollment saved.
func TestEnrolledNeedsNoDevice(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, enroll.DeviceFile), []byte("pi-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, enroll.TokenFile), []byte("device-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parse(t, "--state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	dev, tok, err := identity(t.Context(), c, discardLog(), nil, nil)
	if err != nil || dev != "pi-7" || tok != "device-token" {
		t.Fatalf("identity = %q, %q, %v", dev, tok, err)
	}
	// Still enrolled with the bootstrap token configured: it is not used
	// (the broker URL is unreachable; nothing is dialled).
	bt := writeFile(t, "bt", "abcdef.0123456789abcdefghijklmnopqrstuv")
	c, err = parse(t, "--state-dir", dir, "--bootstrap-token-file", bt, "--broker", "tcp://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if dev, tok, err := identity(t.Context(), c, discardLog(), nil, nil); err != nil || dev != "pi-7" || tok != "device-token" {
		t.Fatalf("identity with a bootstrap token = %q, %q, %v", dev, tok, err)
	}
	c, err = parse(t, "--state-dir", dir, "--device", "pi-8")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := identity(t.Context(), c, discardLog(), nil, nil); err == nil || !strings.Contains(err.Error(), `"pi-7"`) {
		t.Fatalf("identity for another --device: %v", err)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
