package printers

import (
	"bytes"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestPrintCredentials(t *testing.T) {
	items := []schema.Credential{{Name: "grafana", Role: schema.RoleMonitor}, {Name: "node-red", Role: schema.RoleMonitor}}
	for _, tt := range []struct {
		format    Format
		noHeaders bool
		items     []schema.Credential
		want      string
	}{
		{Table, false, items, "NAME       ROLE\ngrafana    monitor\nnode-red   monitor\n"},
		{Table, true, items, "grafana    monitor\nnode-red   monitor\n"},
		{Name, false, items, "monitor/grafana\nmonitor/node-red\n"},
		{JSON, false, items[:1], "{\n    \"items\": [\n        {\n            \"name\": \"grafana\",\n            \"role\": \"monitor\"\n        }\n    ]\n}\n"},
		{JSON, false, nil, "{\n    \"items\": []\n}\n"},
		{YAML, false, items[:1], "items:\n- name: grafana\n  role: monitor\n"},
		{Table, false, nil, ""},
	} {
		var b bytes.Buffer
		p := &Printer{Out: &b, Format: tt.format, NoHeaders: tt.noHeaders}
		if err := p.PrintCredentials(tt.items); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s (no headers %t): got\n%s\nwant\n%s", tt.format, tt.noHeaders, b.String(), tt.want)
		}
	}
}

func TestWriteSecret(t *testing.T) {
	creds := schema.DeviceCredentials{Name: "pi-1", Token: "3q2+7w/x="}
	var b bytes.Buffer
	if err := WriteSecret(&b, JSON, creds); err != nil || b.String() != `{"name":"pi-1","token":"3q2+7w/x="}`+"\n" {
		t.Fatalf("json: %q %v", b.String(), err)
	}
	b.Reset()
	if err := WriteSecret(&b, YAML, creds); err != nil || b.String() != "name: pi-1\ntoken: 3q2+7w/x=\n" {
		t.Fatalf("yaml: %q %v", b.String(), err)
	}
	if err := WriteSecret(&b, Table, creds); err == nil {
		t.Fatal("a table of a secret")
	}
}

func TestCommandLines(t *testing.T) {
	if got, want := AgentCommand("tcp://10.0.0.5:1883", "pi-1"), "fleet-agent --broker tcp://10.0.0.5:1883 --device pi-1 --token-file /etc/fleet/token"; got != want {
		t.Errorf("agent:\n got %s\nwant %s", got, want)
	}
	if got, want := MosquittoSubCommand("10.0.0.5", "1883", "grafana", "fleet/v1/devices/+/status", false),
		`mosquitto_sub -h 10.0.0.5 -p 1883 -u grafana -P "$TOKEN" -t 'fleet/v1/devices/+/status' -v`; got != want {
		t.Errorf("mosquitto_sub:\n got %s\nwant %s", got, want)
	}
	if got, want := MosquittoSubCommand("fd00::5", "8883", "grafana", "x", true), `mosquitto_sub -h fd00::5 -p 8883 --cafile ca.pem -u grafana -P "$TOKEN" -t x -v`; got != want {
		t.Errorf("mosquitto_sub over TLS:\n got %s\nwant %s", got, want)
	}
	for in, want := range map[string]string{"": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$HOME": "'$HOME'", "tcp://h:1": "tcp://h:1"} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}
