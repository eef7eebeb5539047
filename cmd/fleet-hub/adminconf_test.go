package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/adminconf"
)

// testCAPEM is a CA's PEM as the hub writes it into admin.conf.
const testCAPEM = "-----BEGIN CERTIFICATE-----\n" +
	"MIIBdzCCAR2gAwIBAgIBATAKBggqhkjOPQQDAjAUMRIwEAYDVQQDEwlmbGVldCBD\n" +
	"QTAeFw0yNjAxMDEwMDAwMDBaFw0zNjAxMDEwMDAwMDBaMBQxEjAQBgNVBAMTCWZs\n" +
	"-----END CERTIFICATE-----\n"

// TestAdminConfigAgreesWithClient: hub/adminconf keeps admin.conf's
// format itself (the hub must not import client), so it must write what
// client.AdminConfig.Marshal writes, byte for byte, and each side must
// read what the other wrote: the fleet CLI reads admin.conf with the
// client's parser.
func TestAdminConfigAgreesWithClient(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, adminconf.Name)
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []adminconf.Config{
		{Hub: "http://127.0.0.1:8080", Token: "7YpR0b2n0FQ3kq9zv1xWm8cT4dLs6aHe"},
		{Hub: "http://[::1]:18080", Token: "tok"},
		{Hub: "https://hub.example:8443", Token: "tok", CA: testCAPEM},
		{Hub: "https://10.0.0.7:443", Token: "a-b_c.d", CA: testCAPEM + testCAPEM},
		{Hub: "http://hub.example", Token: "tok", CA: "not PEM, still carried"},
	} {
		got, want := adminconf.Marshal(c), client.AdminConfig(c).Marshal()
		if string(got) != string(want) {
			t.Errorf("%+v: adminconf.Marshal:\n%s\nclient.AdminConfig.Marshal:\n%s", c, got, want)
		}
		write(got)
		if back, err := client.ReadAdminConfig(path); err != nil || adminconf.Config(back) != c {
			t.Errorf("client.ReadAdminConfig(adminconf.Marshal(%+v)) = %+v, %v", c, back, err)
		}
		// The CLI loads admin.conf as any config file, too.
		if cfg, err := client.LoadConfigFile(path); err != nil || cfg.Hub != c.Hub || cfg.Token != c.Token || string(cfg.CA) != c.CA {
			t.Errorf("client.LoadConfigFile(adminconf.Marshal(%+v)) = %+v, %v", c, cfg, err)
		}
		write(want)
		if back, err := adminconf.Read(path); err != nil || back != c {
			t.Errorf("adminconf.Read(client.AdminConfig.Marshal(%+v)) = %+v, %v", c, back, err)
		}
	}

	// A config file the user wrote, with contexts and comments: both read
	// its flat keys alike and ignore the rest.
	write([]byte("# my admin.conf\ncurrent-context: edge\ncontexts:\n" +
		"- name: edge\n  hub: http://edge:8080\n  token: other # not this one\n" +
		"hub: ' http://hub.example:8080 '   # the hub\n" +
		"token: \"tok\"\n" +
		"certificate-authority-data: " + base64.StdEncoding.EncodeToString([]byte(testCAPEM)) + "\n"))
	want := adminconf.Config{Hub: "http://hub.example:8080", Token: "tok", CA: testCAPEM}
	fromClient, err := client.ReadAdminConfig(path)
	if err != nil || adminconf.Config(fromClient) != want {
		t.Errorf("client.ReadAdminConfig: %+v, %v; want %+v", fromClient, err, want)
	}
	if got, err := adminconf.Read(path); err != nil || got != want {
		t.Errorf("adminconf.Read: %+v, %v; want %+v", got, err, want)
	}

	// Both refuse a file without a token.
	write([]byte("hub: http://hub.example:8080\n"))
	if _, err := client.ReadAdminConfig(path); err == nil {
		t.Error("client.ReadAdminConfig read a file without a token")
	}
	if _, err := adminconf.Read(path); err == nil {
		t.Error("adminconf.Read read a file without a token")
	}
}
