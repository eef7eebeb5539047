package enroll

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// NameSource says where an enrolling device takes its name from.
type NameSource string

// Name sources (the agent's --name-from).
const (
	// FromHostname: the host name (os.Hostname), the default.
	FromHostname NameSource = "hostname"
	// FromSerial: the board serial number, /proc/device-tree/serial-number
	// (Raspberry Pi and other device-tree boards).
	FromSerial NameSource = "serial"
	// FromMachineID: /etc/machine-id (systemd; unique per installation,
	// unless the image was cloned with it).
	FromMachineID NameSource = "machine-id"
)

// Files read by FromSerial and FromMachineID, relative to NameOptions.Root.
const (
	SerialPath    = "proc/device-tree/serial-number"
	MachineIDPath = "etc/machine-id"
)

// ParseNameSource checks a --name-from value.
func ParseNameSource(s string) (NameSource, error) {
	switch NameSource(s) {
	case FromHostname, FromSerial, FromMachineID:
		return NameSource(s), nil
	}
	return "", fmt.Errorf("name source %q: want %s, %s or %s", s, FromHostname, FromSerial, FromMachineID)
}

// NameOptions are the system facts DeviceName reads; the zero value reads
// the real system.
type NameOptions struct {
	// Root is prefixed to SerialPath and MachineIDPath; default "/".
	Root string
	// Hostname returns the host name; default os.Hostname.
	Hostname func() (string, error)
}

// DeviceName derives the device's name from src, sanitised to a DNS-1123
// label (SanitizeName).
func DeviceName(src NameSource, o NameOptions) (string, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Hostname == nil {
		o.Hostname = os.Hostname
	}
	var raw string
	switch src {
	case FromHostname, "":
		h, err := o.Hostname()
		if err != nil {
			return "", fmt.Errorf("device name from the host name: %w", err)
		}
		raw = h
	case FromSerial, FromMachineID:
		p := SerialPath
		if src == FromMachineID {
			p = MachineIDPath
		}
		b, err := os.ReadFile(filepath.Join(o.Root, p))
		if err != nil {
			return "", fmt.Errorf("device name from the %s: %w", src, err)
		}
		// The device tree's strings end in NUL.
		raw = strings.TrimRight(string(b), "\x00\n\r\t ")
	default:
		return "", fmt.Errorf("device name: unknown source %q", src)
	}
	name, err := SanitizeName(raw)
	if err != nil {
		return "", fmt.Errorf("device name from the %s: %w", src, err)
	}
	return name, nil
}

// SanitizeName turns s into a DNS-1123 label, the form of device names:
// lower case; every run of characters other than letters and digits
// becomes one '-'; no '-' at either end; at most 63 characters. A board
// serial's leading zeros are kept: they are part of the serial. It fails
// when nothing is left.
func SanitizeName(s string) (string, error) {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	name := b.String()
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	if name == "" {
		return "", errors.New("no letters or digits to make a name of")
	}
	if err := schema.ValidateName(name); err != nil {
		return "", err // cannot happen; kept as a guard
	}
	return name, nil
}
