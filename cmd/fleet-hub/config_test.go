package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/hub/leader"
	"github.com/fleetmq/fleet/hub/store"
)

// runRoot runs the root command with args and env, and returns the
// settings the hub would have been started with.
func runRoot(t *testing.T, args []string, env map[string]string) (settings, string, error) {
	t.Helper()
	var got settings
	cmd := newRootCmd(func(k string) string { return env[k] }, func(_ *cobra.Command, s settings) error {
		got = s
		return nil
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return got, out.String(), err
}

func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hub.yaml")
	if err := os.WriteFile(file, []byte("data-dir: /from/file\nhttp-addr: 127.0.0.1:1\nlog-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want settings
	}{
		{"defaults", nil, nil, settings{DataDir: "./fleet-data", HTTPAddr: "127.0.0.1:8080", LogLevel: "info"}},
		{"config file", []string{"--config", file}, nil, settings{DataDir: "/from/file", HTTPAddr: "127.0.0.1:1", LogLevel: "debug", Config: file}},
		{"config file from env", nil, map[string]string{"FLEET_HUB_CONFIG": file}, settings{DataDir: "/from/file", HTTPAddr: "127.0.0.1:1", LogLevel: "debug"}},
		{"env beats file", []string{"--config", file}, map[string]string{"FLEET_HUB_DATA_DIR": "/from/env"},
			settings{DataDir: "/from/env", HTTPAddr: "127.0.0.1:1", LogLevel: "debug", Config: file}},
		{"flag beats env and file", []string{"--config", file, "--data-dir", "/from/flag"}, map[string]string{"FLEET_HUB_DATA_DIR": "/from/env", "FLEET_HUB_HTTP_ADDR": ":9"},
			settings{DataDir: "/from/flag", HTTPAddr: ":9", LogLevel: "debug", Config: file}},
		{"env alone", nil, map[string]string{"FLEET_HUB_LOG_LEVEL": "warn"}, settings{DataDir: "./fleet-data", HTTPAddr: "127.0.0.1:8080", LogLevel: "warn"}},
		{"audit bounds", []string{"--audit-max-bytes", "1Gi"}, map[string]string{"FLEET_HUB_AUDIT_RETENTION": "24h"},
			settings{DataDir: "./fleet-data", HTTPAddr: "127.0.0.1:8080", LogLevel: "info", AuditRetention: 24 * time.Hour, AuditMaxBytes: "1Gi"}},
		{"etcd store", []string{"--store", "etcd://h1:2379,h2:2379", "--etcd-prefix", "/fleet/prod/", "--etcd-cacert", "ca.crt"},
			map[string]string{"FLEET_HUB_ETCD_CERT": "hub.crt", "FLEET_HUB_ETCD_KEY": "hub.key"},
			settings{DataDir: "./fleet-data", HTTPAddr: "127.0.0.1:8080", LogLevel: "info", Store: "etcd://h1:2379,h2:2379",
				EtcdPrefix: "/fleet/prod/", EtcdCACert: "ca.crt", EtcdCert: "hub.crt", EtcdKey: "hub.key"}},
		{"several hubs", []string{"--hub-id", "hub-2"}, map[string]string{"FLEET_HUB_LEADER_LEASE": "5s"},
			settings{DataDir: "./fleet-data", HTTPAddr: "127.0.0.1:8080", LogLevel: "info", HubID: "hub-2", LeaderLease: 5 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, out, err := runRoot(t, tt.args, tt.env)
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if tt.want.MQTT == (mqttSettings{}) {
				tt.want.MQTT = defaultMQTTSettings
			}
			if tt.want.HTTPSAddr == "" {
				tt.want.HTTPSAddr = hub.DefaultHTTPSAddr
			}
			if tt.want.Backup.Every == 0 {
				tt.want.Backup.Every, tt.want.Backup.Keep = hub.DefaultBackupEvery, 48
			}
			if tt.want.HistoryInterval == 0 {
				tt.want.HistoryInterval = hub.DefaultHistoryInterval
			}
			if tt.want.AuditRetention == 0 {
				tt.want.AuditRetention, tt.want.AuditMaxBytes = store.DefaultAuditRetention, "100Mi"
			}
			if tt.want.Store == "" {
				tt.want.Store = "badger"
			}
			if tt.want.LeaderLease == 0 {
				tt.want.LeaderLease = leader.DefaultLeaseTTL
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSettingsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"--config", write("typo.yaml", "data_dir: /x\n")}, `unknown key "data_dir"`},
		{"not YAML", []string{"--config", write("bad.yaml", "{{{")}, "config"},
		{"duplicate key", []string{"--config", write("dup.yaml", "data-dir: a\ndata-dir: b\n")}, "config"},
		{"nested value", []string{"--config", write("nested.yaml", "data-dir: {a: b}\n")}, "data-dir"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, "read config"},
		{"unknown flag", []string{"--data-dri", "x"}, "--help"},
		{"stray argument", []string{"serve"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, out, err := runRoot(t, tt.args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v (output %q), want it to mention %q", err, out, tt.want)
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	_, out, err := runRoot(t, []string{"version"}, nil)
	if err != nil || !strings.HasPrefix(out, "fleet-hub ") {
		t.Errorf("version: %v %q", err, out)
	}
	_, out, err = runRoot(t, []string{"--help"}, nil)
	for _, want := range []string{"FLEET_HUB_DATA_DIR", "--config", "admin.conf", "Examples:", "admin-token"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("--help does not mention %s: %v", want, err)
		}
	}
}

func TestAdminTokenCommand(t *testing.T) {
	dir := t.TempDir()
	_, _, err := runRoot(t, []string{"admin-token", "--data-dir", dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "--rotate") {
		t.Errorf("admin-token without admin.conf: %v", err)
	}
	_, out, err := runRoot(t, []string{"admin-token", "--rotate", "--log-level", "error"}, map[string]string{"FLEET_HUB_DATA_DIR": dir})
	if err != nil || !strings.Contains(out, filepath.Join(dir, "admin.conf")) {
		t.Fatalf("rotate: %v %q", err, out)
	}
	_, out, err = runRoot(t, []string{"admin-token", "--data-dir", dir}, nil)
	if err != nil || strings.TrimSpace(out) != filepath.Join(dir, "admin.conf") {
		t.Errorf("admin-token: %v %q", err, out)
	}
}

func TestMQTTSettings(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, out, err := runRoot(t, []string{"--mqtt-addr", "127.0.0.1:0", "--broker", "tcp://mq:1883", "--broker-password-file", pwFile},
		map[string]string{"FLEET_HUB_ADVERTISE_MQTT_URL": "ssl://hub.example:8883"})
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.MQTT.Addr != "127.0.0.1:0" || got.MQTT.Broker != "tcp://mq:1883" || got.MQTT.AdvertiseURL != "ssl://hub.example:8883" || got.MQTT.BrokerUsername != "fleet-hub" {
		t.Errorf("settings %+v", got.MQTT)
	}
	if pw, err := got.MQTT.brokerPassword(); err != nil || pw != "s3cret" {
		t.Errorf("password %q %v", pw, err)
	}
	got.MQTT.BrokerPassword = "x"
	if _, err := got.MQTT.brokerPassword(); err == nil {
		t.Error("both --broker-password and --broker-password-file accepted")
	}
	_, out, err = runRoot(t, []string{"mosquitto-config", "--help"}, nil)
	if err != nil || !strings.Contains(out, "SIGHUP") || !strings.Contains(out, "--broker-username") {
		t.Errorf("mosquitto-config --help: %v %s", err, out)
	}
}

// TestAuditMaxBytes: --audit-max-bytes takes a size or -1, and names
// itself when it is neither.
func TestAuditMaxBytes(t *testing.T) {
	for in, want := range map[string]int64{"100Mi": 100 << 20, "1Gi": 1 << 30, "2M": 2_000_000, "-1": -1} {
		if got, err := auditMaxBytes(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "0", "-5Mi"} {
		if _, err := auditMaxBytes(in); err == nil || !strings.Contains(err.Error(), "--audit-max-bytes") {
			t.Errorf("%q: %v, want an error naming the flag", in, err)
		}
	}
}

func TestHomeAssistantDiscoverySources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(file, []byte("homeassistant-discovery: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want bool
	}{
		"default off":   {nil, nil, false},
		"flag":          {[]string{"--homeassistant-discovery"}, nil, true},
		"env":           {nil, map[string]string{"FLEET_HUB_HOMEASSISTANT_DISCOVERY": "true"}, true},
		"config file":   {[]string{"--config", file}, nil, true},
		"flag off wins": {[]string{"--config", file, "--homeassistant-discovery=false"}, nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, out, err := runRoot(t, tc.args, tc.env)
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.HomeAssistantDiscovery != tc.want {
				t.Errorf("HomeAssistantDiscovery = %v, want %v", got.HomeAssistantDiscovery, tc.want)
			}
		})
	}
	if _, out, err := runRoot(t, []string{"--homeassistant-discovery=maybe"}, nil); err == nil || !strings.Contains(err.Error()+out, "homeassistant-discovery") {
		t.Errorf("a bad value: %v %s", err, out)
	}
}
