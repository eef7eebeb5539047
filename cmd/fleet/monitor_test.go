package main

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestMonitorAdd(t *testing.T) {
	e := newEnv(t)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "tcp://10.0.0.5:1883"})
	r := e.run("", "monitor", "add", "grafana")
	role, tok := e.hub.Credential("grafana")
	want := "monitor/grafana created\n" +
		"Token (shown once, store it safely): " + tok + "\n" +
		"It may subscribe to every device's status, online and events topics. Try it, with TOKEN set to the token:\n" +
		`  mosquitto_sub -h 10.0.0.5 -p 1883 -u grafana -P "$TOKEN" -t 'fleet/v1/devices/+/status' -v` + "\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" || role != schema.RoleMonitor || tok == "" {
		t.Fatalf("monitor add: %+v\nwant stdout:\n%s", r, want)
	}
	// -o json: the credential and nothing else.
	r = e.run("", "monitor", "add", "node-red", "-o", "json")
	_, tok = e.hub.Credential("node-red")
	if want := `{"name":"node-red","role":"monitor","token":"` + tok + `"}` + "\n"; r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Fatalf("-o json: %+v\nwant %s", r, want)
	}
	// TLS broker: port and CA file.
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://mqtt.example.com"})
	if out := e.ok("", "monitor", "add", "telegraf"); !strings.Contains(out, "mosquitto_sub -h mqtt.example.com -p 8883 --cafile ca.pem -u telegraf ") {
		t.Fatalf("TLS:\n%s", out)
	}

	// An existing name is refused, whatever its role: a monitor never
	// replaces the admin credential.
	adminTok := e.hub.AddCredential("admin", "admin")
	for _, name := range []string{"grafana", "admin"} {
		r := e.run("", "monitor", "add", name)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `credential "`+name+`" already exists`) {
			t.Errorf("add existing %s: %+v", name, r)
		}
	}
	if role, tok := e.hub.Credential("admin"); role != "admin" || tok != adminTok {
		t.Fatal("the admin credential changed")
	}
	for _, args := range [][]string{{"monitor", "add"}, {"monitor", "add", "Bad_Name"}, {"monitor", "add", "x", "-o", "table"}} {
		if r := e.run("", args...); r.code != 1 || r.stdout != "" {
			t.Errorf("fleet %s: %+v", strings.Join(args, " "), r)
		}
	}
}

func TestMonitorListAndDelete(t *testing.T) {
	e := newEnv(t)
	if r := e.run("", "monitor", "list"); r.code != 0 || r.stdout != "" || r.stderr != "No resources found.\n" {
		t.Fatalf("empty list: %+v", r)
	}
	if out := e.ok("", "monitor", "list", "-o", "json"); out != "{\n    \"items\": []\n}\n" {
		t.Fatalf("empty list -o json: %q", out)
	}
	e.ok("", "monitor", "add", "grafana", "-o", "json")
	e.ok("", "monitor", "add", "node-red", "-o", "json")
	e.hub.AddCredential("admin", "admin")
	if out := e.ok("", "monitor", "list"); out != "NAME       ROLE\ngrafana    monitor\nnode-red   monitor\n" {
		t.Fatalf("list:\n%s", out)
	}
	if out := e.ok("", "monitor", "ls", "-o", "name"); out != "monitor/grafana\nmonitor/node-red\n" {
		t.Fatalf("list -o name:\n%s", out)
	}
	_, tok := e.hub.Credential("grafana")
	if out := e.ok("", "monitor", "list", "-o", "yaml"); strings.Contains(out, tok) || strings.Contains(out, "token") || !strings.Contains(out, "name: grafana") {
		t.Fatalf("list -o yaml:\n%s", out)
	}

	if out := e.ok("", "__complete", "monitor", "delete", "grafana", ""); !strings.HasPrefix(out, "node-red\n:4") {
		t.Fatalf("completion (monitors only):\n%s", out)
	}
	if out := e.ok("", "monitor", "delete", "grafana"); out != "monitor/grafana deleted\n" {
		t.Fatalf("delete: %q", out)
	}
	if role, _ := e.hub.Credential("grafana"); role != "" {
		t.Fatal("grafana is still there")
	}
	r := e.run("", "monitor", "delete", "admin", "grafana", "node-red")
	if r.code != 1 || r.stdout != "monitor/node-red deleted\n" ||
		!strings.Contains(r.stderr, `credential "admin" has role admin, not monitor`) || !strings.Contains(r.stderr, "Error from server (NotFound)") {
		t.Fatalf("delete admin, a missing and a monitor: %+v", r)
	}
	if role, _ := e.hub.Credential("admin"); role != "admin" {
		t.Fatal("the admin credential was deleted")
	}
	if r := e.run("", "monitor", "delete", "grafana", "--ignore-not-found"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("--ignore-not-found: %+v", r)
	}
	if out := e.ok("", "monitor"); !strings.Contains(out, "Available Commands:") {
		t.Fatalf("fleet monitor:\n%s", out)
	}
}
