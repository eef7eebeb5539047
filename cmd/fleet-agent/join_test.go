package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func testJoinString(t *testing.T, j schema.JoinInfo) (string, schema.JoinInfo) {
	t.Helper()
	if j.SigningKey == "" {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		j.SigningKey = schema.EncodeSigningKey(pub)
	}
	s, err := schema.EncodeJoin(j)
	if err != nil {
		t.Fatal(err)
	}
	return s, j
}

// TestJoinFillsSettings: --join (or @FILE, or FLEET_AGENT_JOIN) sets the
// broker, CA hash, signing key, device and token.
func TestJoinFillsSettings(t *testing.T) {
	s, j := testJoinString(t, schema.JoinInfo{
		Brokers: []string{"ssl://10.0.0.5:8883", "ssl://hub.example:8883"}, CAHash: "sha256:" + strings.Repeat("ab", 32),
		Device: "pi-1", Token: "device-token",
	})
	for name, args := range map[string][]string{
		"flag":       {"--join", s},
		"file":       {"--join", "@" + writeFile(t, "join", s+"\n")},
		"agreeing":   {"--join", s, "--broker", "ssl://hub.example", "--device", "pi-1", "--ca-hash", strings.Repeat("AB", 32), "--token-file", writeFile(t, "token", "device-token\n")},
		"agreed key": {"--join", s, "--hub-signing-key", j.SigningKey},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := parse(t, append(args, "--state-dir", t.TempDir())...)
			if err != nil {
				t.Fatal(err)
			}
			// Every broker of the join string, in its order.
			if want := strings.Join(j.Brokers, ","); name != "agreeing" && string(c.Broker) != want {
				t.Errorf("broker %q, want %q", c.Broker, want)
			}
			if c.CAHash != j.CAHash || c.HubSigningKey != j.SigningKey || c.Device != "pi-1" {
				t.Errorf("ca-hash %q, hub-signing-key %q, device %q", c.CAHash, c.HubSigningKey, c.Device)
			}
			if tok, err := c.token(); err != nil || tok != "device-token" {
				t.Errorf("token %q, %v", tok, err)
			}
		})
	}
	t.Setenv("FLEET_AGENT_JOIN", s)
	if c, err := parse(t, "--state-dir", t.TempDir()); err != nil || c.Device != "pi-1" {
		t.Fatalf("FLEET_AGENT_JOIN: device %q, %v", c.Device, err)
	}
}

// TestJoinErrors: a malformed join string, and flags that disagree with
// it, are errors that name what is wrong (and never show a token).
func TestJoinErrors(t *testing.T) {
	s, _ := testJoinString(t, schema.JoinInfo{Brokers: []string{"ssl://10.0.0.5:8883"}, CAHash: "sha256:" + strings.Repeat("ab", 32), Device: "pi-1", Token: "device-token"})
	bs, _ := testJoinString(t, schema.JoinInfo{Brokers: []string{"tcp://hub:1883"}, BootstrapToken: "abc123." + strings.Repeat("x", 32)})
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed", []string{"--join", "fleetjoin1:!!!"}, "--join: join string: not base64url"},
		{"not a join string", []string{"--join", "device-token"}, "--join: join string: does not start with fleetjoin1:"},
		{"missing file", []string{"--join", "@/nonexistent/join"}, "--join: open /nonexistent/join"},
		{"another broker", []string{"--join", s, "--broker", "ssl://rogue:8883"}, "--broker disagrees with --join: ssl://rogue:8883 is not one of its brokers (ssl://10.0.0.5:8883)"},
		{"another CA", []string{"--join", s, "--ca-hash", "sha256:" + strings.Repeat("cd", 32)}, "--ca-hash disagrees with --join: it pins the hub's CA sha256:abab"},
		{"another signing key", []string{"--join", s, "--hub-signing-key", schema.EncodeSigningKey(other)}, "--hub-signing-key disagrees with --join: it pins the hub's signing key"},
		{"another device", []string{"--join", s, "--device", "pi-2"}, "--device disagrees with --join: it is for device pi-1"},
		{"another token", []string{"--join", s, "--token", "other-token"}, "--token disagrees with --join: they hold different tokens"},
		{"another token file", []string{"--join", s, "--token-file", writeFile(t, "tok", "other-token")}, "--token-file disagrees with --join"},
		{"a bootstrap token too", []string{"--join", s, "--bootstrap-token", "abc123." + strings.Repeat("y", 32)}, "--bootstrap-token disagrees with --join: it carries a device token"},
		{"a device token with a bootstrap join", []string{"--join", bs, "--token", "device-token"}, "--token disagrees with --join: it carries a bootstrap token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, append(tt.args, "--state-dir", t.TempDir())...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "device-token") || strings.Contains(err.Error(), "other-token") {
				t.Fatalf("the error shows a token: %v", err)
			}
		})
	}
}

// TestInsecureTrustFirstKeyFromFileAndEnv: the bool flag is a config
// file key and an environment variable like every other flag.
func TestInsecureTrustFirstKeyFromFileAndEnv(t *testing.T) {
	conf := writeFile(t, "agent.yaml", "device: pi-1\ninsecure-trust-first-key: true\n")
	if c, err := parse(t, "--config", conf, "--state-dir", t.TempDir()); err != nil || !c.InsecureTrustFirstKey {
		t.Fatalf("config file: %v, %v", c.InsecureTrustFirstKey, err)
	}
	if c, err := parse(t, "--device", "pi-1", "--state-dir", t.TempDir()); err != nil || c.InsecureTrustFirstKey {
		t.Fatalf("default: %v, %v", c.InsecureTrustFirstKey, err)
	}
	t.Setenv("FLEET_AGENT_INSECURE_TRUST_FIRST_KEY", "true")
	if c, err := parse(t, "--device", "pi-1", "--state-dir", t.TempDir()); err != nil || !c.InsecureTrustFirstKey {
		t.Fatalf("environment: %v, %v", c.InsecureTrustFirstKey, err)
	}
}
