package enroll

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestSanitizeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"raspberrypi", "raspberrypi"},
		{"Pi-Kitchen", "pi-kitchen"},
		{"pi_kitchen.local", "pi-kitchen-local"},
		{"  --pi  4--  ", "pi-4"},
		{"PI__1..2", "pi-1-2"},
		{"10000000a3b4c5d6", "10000000a3b4c5d6"},
		{"0000000012345678", "0000000012345678"}, // a serial keeps its zeros
		{"3f0c2e1d9b8a4c7e8f6a5b4c3d2e1f00", "3f0c2e1d9b8a4c7e8f6a5b4c3d2e1f00"},
		{"café-01", "caf-01"},
		{strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 10), strings.Repeat("a", 62)},
		{strings.Repeat("x", 80), strings.Repeat("x", 63)},
	}
	for _, tt := range tests {
		got, err := SanitizeName(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("SanitizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		if err := schema.ValidateName(got); err != nil {
			t.Errorf("SanitizeName(%q) = %q: not a device name: %v", tt.in, got, err)
		}
	}
	for _, bad := range []string{"", "---", "...", "é", "\x00\x00"} {
		if got, err := SanitizeName(bad); err == nil {
			t.Errorf("SanitizeName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestDeviceName(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As the kernel exposes them: the device tree's string ends in NUL,
	// machine-id in a newline.
	write(SerialPath, "10000000ABCDEF12\x00")
	write(MachineIDPath, "3f0c2e1d9b8a4c7e8f6a5b4c3d2e1f00\n")
	o := NameOptions{Root: root, Hostname: func() (string, error) { return "Pi_Garage.lan", nil }}
	for src, want := range map[NameSource]string{
		FromHostname:  "pi-garage-lan",
		"":            "pi-garage-lan",
		FromSerial:    "10000000abcdef12",
		FromMachineID: "3f0c2e1d9b8a4c7e8f6a5b4c3d2e1f00",
	} {
		got, err := DeviceName(src, o)
		if err != nil || got != want {
			t.Errorf("DeviceName(%q) = %q, %v; want %q", src, got, err, want)
		}
	}

	empty := NameOptions{Root: t.TempDir(), Hostname: func() (string, error) { return "", errors.New("no hostname") }}
	for _, src := range []NameSource{FromHostname, FromSerial, FromMachineID, "bogus"} {
		if got, err := DeviceName(src, empty); err == nil {
			t.Errorf("DeviceName(%q) without the facts = %q, want an error", src, got)
		}
	}
	write(MachineIDPath, "\n")
	if _, err := DeviceName(FromMachineID, o); err == nil || !strings.Contains(err.Error(), "machine-id") {
		t.Errorf("empty machine-id: %v", err)
	}
}

func TestParseNameSource(t *testing.T) {
	for _, s := range []string{"hostname", "serial", "machine-id"} {
		if got, err := ParseNameSource(s); err != nil || string(got) != s {
			t.Errorf("ParseNameSource(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseNameSource("mac"); err == nil {
		t.Error("ParseNameSource(mac) succeeded")
	}
}
