package main

import (
	"strings"
	"testing"
)

// TestDeviceRekeyRefusals: what fleet device rekey refuses before asking
// the hub (its answer is tested end to end in test/e2e_devicekey_test.go,
// on a real hub); --help teaches when to use it.
func TestDeviceRekeyRefusals(t *testing.T) {
	e := newEnv(t)
	n := len(e.requestsSince(0))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"device", "rekey"}, "takes NAME, got 0"},
		{[]string{"device", "rekey", "a", "b"}, "takes NAME, got 2"},
		{[]string{"device", "rekey", "Bad_Name"}, "device name"},
		{[]string{"device", "rekey", "pi-1", "-o", "name"}, "prints json or yaml"},
	} {
		if r := e.run("", tc.args...); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fleet %s: %+v, want exit 1 and %q", strings.Join(tc.args, " "), r, tc.want)
		}
	}
	if got := e.requestsSince(n); len(got) != 0 {
		t.Errorf("refused commands asked the hub: %v", got)
	}
	help := e.ok("", "device", "rekey", "--help")
	for _, w := range []string{"DeviceKeyRefused", "fleet device rotate-token pi-1", "Admin only"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help does not say %q:\n%s", w, help)
		}
	}
	if out := e.ok("", "device", "--help"); !strings.Contains(out, "rekey") {
		t.Errorf("fleet device --help does not list rekey:\n%s", out)
	}
}
