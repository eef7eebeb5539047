package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/schema"
)

// TestPrintCAStatus: the table lists every device with whether it has
// the new CA, wide adds the pins, json and yaml carry the whole status,
// and an unknown format is an error naming the flag.
func TestPrintCAStatus(t *testing.T) {
	st := &schema.CARotationStatus{
		Active: "sha256:aa", ActiveExpires: time.Date(2036, 1, 2, 0, 0, 0, 0, time.UTC), Next: "sha256:bb",
		Rotating: true, Pending: 1,
		Devices: []schema.CADevice{
			{Name: "pi-1", Online: true, TrustedCAs: []string{"sha256:aa", "sha256:bb"}, HasNext: true},
			{Name: "pi-2", Online: false, TrustedCAs: []string{"sha256:aa"}},
		},
	}
	var b bytes.Buffer
	if err := printCAStatus(&b, st, "table"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"ACTIVE CA:  sha256:aa (until 2036-01-02)", "NEW CA:     sha256:bb", "PENDING:    1 of 2", "pi-1", "pi-2", "no (pending)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "TRUSTED CAS") {
		t.Errorf("table shows the wide column:\n%s", out)
	}
	b.Reset()
	if err := printCAStatus(&b, st, "wide"); err != nil || !strings.Contains(b.String(), "TRUSTED CAS") || !strings.Contains(b.String(), "sha256:aa,sha256:bb") {
		t.Errorf("wide: %v\n%s", err, b.String())
	}
	for _, format := range []string{"json", "yaml"} {
		b.Reset()
		if err := printCAStatus(&b, st, format); err != nil {
			t.Fatal(err)
		}
		var back schema.CARotationStatus
		var err error
		if format == "json" {
			err = json.Unmarshal(b.Bytes(), &back)
		} else {
			err = yaml.Unmarshal(b.Bytes(), &back)
		}
		if err != nil || back.Next != "sha256:bb" || len(back.Devices) != 2 || back.Devices[1].HasNext {
			t.Errorf("%s: %v %+v", format, err, back)
		}
	}
	if err := printCAStatus(&b, st, "xml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("-o xml: %v", err)
	}
}

// TestSigningKeyRotateCommand: with no hub running on the data
// directory, `signing-key rotate` rotates the files, as its older name
// does.
func TestSigningKeyRotateCommand(t *testing.T) {
	dir := t.TempDir()
	if _, out, err := runRoot(t, []string{"signing-key", "rotate", "--data-dir", dir}, nil); err != nil || !strings.Contains(out, "created key") {
		t.Fatalf("first: %v %q", err, out)
	}
	if _, out, err := runRoot(t, []string{"signing-key", "rotate", "--data-dir", dir}, nil); err != nil || !strings.Contains(out, "signing key rotated: ") {
		t.Fatalf("rotation: %v %q", err, out)
	}
	if _, _, err := runRoot(t, []string{"ca", "status", "--data-dir", dir}, nil); err == nil || !strings.Contains(err.Error(), "admin config") {
		t.Errorf("ca status without a hub: %v", err)
	}
}
