package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) (config, error) {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c.bind(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	err := c.resolve(fs)
	return c, err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	want := "fleet-agent dev " + goruntime.GOOS + "/" + goruntime.GOARCH
	if !strings.HasPrefix(out.String(), want) {
		t.Fatalf("version output %q, want prefix %q", out.String(), want)
	}
}

func TestDefaults(t *testing.T) {
	c, err := parse(t, "--device", "pi-1")
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/var/lib/fleet-agent" || c.Namespace != "fleet" || c.ContainerdSocket != "/run/containerd/containerd.sock" ||
		c.ResyncInterval != "30s" || c.Broker != "tcp://localhost:1883" || c.LogLevel != "info" || c.ReleasePages != "5s" ||
		c.KeepAlive != "2m0s" || c.StatusHeartbeat != "0" {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestConfigFileEnvAndFlagPrecedence(t *testing.T) {
	cfg := writeFile(t, "agent.yaml", `
device: from-file
broker: tcp://file:1883
state-dir: /file/state
namespace: filens
resync-interval: 45s
log-level: debug
registry:
  mirrors:
    docker.io: ["mirror.local:5000"]
  plainHTTP: ["mirror.local:5000"]
  auth:
    mirror.local:5000: {username: u, password: p}
`)
	t.Setenv("FLEET_AGENT_STATE_DIR", "/env/state")
	t.Setenv("FLEET_AGENT_NAMESPACE", "envns")
	c, err := parse(t, "--config", cfg, "--namespace", "flagns")
	if err != nil {
		t.Fatal(err)
	}
	if c.Device != "from-file" || c.Broker != "tcp://file:1883" || c.ResyncInterval != "45s" || c.LogLevel != "debug" {
		t.Errorf("file values not used: %+v", c)
	}
	if c.StateDir != "/env/state" {
		t.Errorf("env should beat the file: state-dir %q", c.StateDir)
	}
	if c.Namespace != "flagns" {
		t.Errorf("flag should beat env and file: namespace %q", c.Namespace)
	}
	if got := c.Registry.Mirrors["docker.io"]; len(got) != 1 || got[0] != "mirror.local:5000" ||
		c.Registry.PlainHTTP[0] != "mirror.local:5000" || c.Registry.Auth["mirror.local:5000"].Password != "p" {
		t.Errorf("registry = %+v", c.Registry)
	}
}

func TestConfigErrors(t *testing.T) {
	tokenFile := writeFile(t, "token", "  s3cret\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no device", nil, "--device is required"},
		{"bad device", []string{"--device", "Pi_1"}, "DNS-1123"},
		{"both tokens", []string{"--device", "pi", "--token", "a", "--token-file", tokenFile}, "mutually exclusive"},
		{"bad resync", []string{"--device", "pi", "--resync-interval", "soon"}, "resync-interval"},
		{"bad image gc floor", []string{"--device", "pi", "--token", "x", "--image-gc-min-free", "lots"}, "--image-gc-min-free"},
		{"unknown config key", []string{"--config", writeFile(t, "c.yaml", "device: pi\nbrokr: tcp://x\n")}, "brokr"},
		{"missing config", []string{"--config", "/nonexistent/agent.yaml"}, "config file"},
		{"wildcard prefix", []string{"--device", "pi", "--topic-prefix", "fleet/#"}, "topic-prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	c, err := parse(t, "--device", "pi", "--token-file", tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := c.token(); err != nil || tok != "s3cret" {
		t.Fatalf("token = %q, %v", tok, err)
	}
}

func TestRunRejectsBadSettingsBeforeConnecting(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{
		{"--device", "pi", "--broker", "http://x"},
		{"--device", "pi", "--log-level", "loud"},
		{"--device", "pi", "--ca", "/nonexistent.pem", "--broker", "ssl://h:8883"},
		{"--device", "pi", "--ca", writeFile(t, "ca.pem", "not pem"), "--broker", "ssl://h:8883"},
		{"--device", "pi", "unexpected-arg"},
		{"--device", "pi", "--release-startup-pages", "soon"},
		{"--device", "pi", "--release-startup-pages", "-1s"},
		{"--device", "pi", "--keepalive", "1s"},
		{"--device", "pi", "--keepalive", "soon"},
		{"--device", "pi", "--status-heartbeat", "1s"},
		{"--device", "pi", "--status-heartbeat", "hourly"},
	} {
		if err := run(args, &out, &out); err == nil {
			t.Errorf("run(%v) succeeded", args)
		}
	}
}

// TestDependencies guards what the agent binary links: never the hub's
// store (Badger), the broker, or Kubernetes' libraries (k8s.io/…: the
// label-selector parser of the hub and the CLI comes from apimachinery;
// the agent matches selectors with schema alone). Of broker/ it links
// exactly broker/mqttio, the leaf every MQTT client of Fleet shares.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/fleetmq/fleet/broker/mqttio": true}
	for _, dep := range strings.Fields(string(out)) {
		if allowed[dep] {
			continue
		}
		for _, banned := range []string{"github.com/dgraph-io/badger", "github.com/mochi-mqtt/server", "github.com/fleetmq/fleet/hub", "github.com/fleetmq/fleet/broker", "k8s.io/", "go.etcd.io/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("fleet-agent links %s", dep)
			}
		}
	}
}

// TestCAFlags: --ca-file is --ca; --ca-hash is checked and made canonical;
// both come from the config file too; either on a plain broker is refused
// before anything connects.
func TestCAFlags(t *testing.T) {
	hash := "SHA256:" + strings.Repeat("ab", 32)
	c, err := parse(t, "--device", "pi", "--broker", "ssl://h:8883", "--ca-file", "/etc/fleet/ca.crt", "--ca-hash", hash)
	if err != nil {
		t.Fatal(err)
	}
	if c.CA != "/etc/fleet/ca.crt" || c.CAHash != "sha256:"+strings.Repeat("ab", 32) {
		t.Fatalf("ca %q, ca-hash %q", c.CA, c.CAHash)
	}
	file := writeFile(t, "agent.yaml", "device: pi\nbroker: ssl://h:8883\nca-hash: "+hash+"\nca-file: /x/ca.crt\n")
	if c, err = parse(t, "--config", file); err != nil || c.CA != "/x/ca.crt" || !strings.HasPrefix(c.CAHash, "sha256:") {
		t.Fatalf("config file: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"--device", "pi", "--ca-hash", "sha256:12"},
		{"--device", "pi", "--ca", "/a.crt", "--ca-file", "/b.crt"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("parse(%v) accepted", args)
		}
	}
	c, err = parse(t, "--device", "pi", "--broker", "tcp://h:1883", "--ca-hash", hash)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.brokerTLS(nil); err == nil || !strings.Contains(err.Error(), "not TLS") {
		t.Fatalf("--ca-hash on a plain broker: %v", err)
	}
	var out bytes.Buffer
	if err := run([]string{"--device", "pi", "--broker", "tcp://h:1883", "--ca-hash", hash, "--state-dir", t.TempDir()}, &out, &out); err == nil {
		t.Error("run with --ca-hash on a plain broker succeeded")
	}
}
