package test

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestCLIDevice runs fleet device and fleet monitor against a real
// fleet-hub: add shows the token once (and only it, with -o json), the
// device is listed with its fleet/device label, labels are set, refused,
// overwritten and removed with kubectl's rules, rotate-token issues a new
// token, delete removes it; monitor add/list/delete. The subtests share
// one hub and run in order.
func TestCLIDevice(t *testing.T) {
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	hub := StartHub(t, HubOptions{})
	f := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + hub.AdminConfig()}}
	var tokens []string // every token shown, to check none leaks elsewhere
	var first schema.DeviceCredentials

	labels := func(t *testing.T, name string) map[string]string {
		t.Helper()
		var d schema.Device
		f.on(t).json(&d, "get", "device", name, "-o", "json")
		return d.Metadata.Labels
	}

	t.Run("add -o json prints only the credentials", func(t *testing.T) {
		f := f.on(t)
		r := f.run("", "device", "add", "pi-e2e", "--label", "site=lab", "--description", "bench Pi", "-o", "json")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("device add -o json: %+v", r)
		}
		var raw map[string]string
		if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
			t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
		}
		if keys := slices.Sorted(maps.Keys(raw)); !slices.Equal(keys, []string{"name", "token"}) || raw["name"] != "pi-e2e" || raw["token"] == "" {
			t.Fatalf("credentials %s", r.stdout)
		}
		if want := `{"name":"pi-e2e","token":"` + raw["token"] + `"}` + "\n"; r.stdout != want {
			t.Fatalf("stdout %q, want %q", r.stdout, want)
		}
		first = schema.DeviceCredentials{Name: raw["name"], Token: raw["token"]}
		tokens = append(tokens, first.Token)
	})

	t.Run("add again is AlreadyExists", func(t *testing.T) {
		r := f.on(t).run("", "device", "add", "pi-e2e")
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "AlreadyExists") || !strings.Contains(r.stderr, "fleet device rotate-token pi-e2e") {
			t.Fatalf("add existing: %+v", r)
		}
	})

	t.Run("add prints the agent command with the hub's MQTT URL", func(t *testing.T) {
		f := f.on(t)
		r := f.run("", "device", "add", "pi-human")
		if r.code != 0 {
			t.Fatalf("device add: %+v", r)
		}
		lines := strings.Split(r.stdout, "\n")
		if len(lines) < 4 || lines[0] != "device/pi-human created" || !strings.HasPrefix(lines[1], "Token (shown once, store it safely): ") ||
			lines[2] != "Start the agent on the device:" || !strings.HasPrefix(lines[3], "  fleet-agent --broker ") ||
			!strings.Contains(lines[3], " --device pi-human --token-file /etc/fleet/token") ||
			!strings.HasSuffix(lines[3], "   (write the token there, mode 0600)") {
			t.Fatalf("device add:\n%s", r.stdout)
		}
		tok := strings.TrimPrefix(lines[1], "Token (shown once, store it safely): ")
		if tok == "" || strings.Count(r.stdout, tok) != 1 || strings.Contains(r.stderr, tok) {
			t.Fatalf("the token is not shown exactly once:\n%s%s", r.stdout, r.stderr)
		}
		tokens = append(tokens, tok)
		// The broker URL is the one the hub reports (GET /v1/info).
		code, body := hub.Do(t, http.MethodGet, "/v1/info", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/info: %d %s (the hub does not implement it yet?); device add fell back to:\n%s", code, body, r.stderr)
		}
		var info schema.HubInfo
		if err := json.Unmarshal(body, &info); err != nil || info.MQTTURL == "" {
			t.Fatalf("GET /v1/info: %v %s", err, body)
		}
		if !strings.Contains(lines[3], "--broker "+info.MQTTURL+" ") || r.stderr != "" {
			t.Fatalf("agent command does not use the hub's MQTT URL %s:\n%s%s", info.MQTTURL, r.stdout, r.stderr)
		}
		// Over TLS the device pins the hub's CA by its hash.
		if strings.HasPrefix(info.MQTTURL, "ssl://") && (info.CAHash == "" || !strings.Contains(lines[3], " --ca-hash "+info.CAHash)) {
			t.Fatalf("agent command for %s does not pin the hub's CA %q:\n%s", info.MQTTURL, info.CAHash, r.stdout)
		}
	})

	t.Run("listed with its labels", func(t *testing.T) {
		f := f.on(t)
		out := f.ok("get", "devices")
		if !strings.HasPrefix(out, "NAME       ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE\n") || !strings.Contains(out, "\npi-e2e     false    <never>     0/") {
			t.Fatalf("get devices:\n%s", out)
		}
		if l := labels(t, "pi-e2e"); l[schema.LabelDevice] != "pi-e2e" || l["site"] != "lab" || len(l) != 2 {
			t.Fatalf("labels %v", l)
		}
		if out := f.ok("device", "list", "-l", "fleet/device=pi-e2e", "-o", "name"); out != "device/pi-e2e\n" {
			t.Fatalf("device list -l fleet/device=pi-e2e: %q", out)
		}
		if out := f.ok("describe", "device", "pi-e2e"); !strings.Contains(out, "bench Pi") || !strings.Contains(out, "site=lab") {
			t.Fatalf("describe:\n%s", out)
		}
	})

	t.Run("label", func(t *testing.T) {
		f := f.on(t)
		if out := f.ok("device", "label", "pi-e2e", "env=prod"); out != "device/pi-e2e labeled\n" {
			t.Fatalf("label add: %q", out)
		}
		if l := labels(t, "pi-e2e"); l["env"] != "prod" || l["site"] != "lab" {
			t.Fatalf("after add: %v", l)
		}
		r := f.run("", "device", "label", "pi-e2e", "env=dev")
		if r.code == 0 || !strings.Contains(r.stderr, `label "env" already has the value "prod"`) || !strings.Contains(r.stderr, "--overwrite") {
			t.Fatalf("change without --overwrite: %+v", r)
		}
		if out := f.ok("device", "label", "pi-e2e", "env=dev", "--overwrite"); out != "device/pi-e2e labeled\n" {
			t.Fatalf("overwrite: %q", out)
		}
		if out := f.ok("get", "devices", "-l", "env=dev", "-o", "name"); out != "device/pi-e2e\n" {
			t.Fatalf("select the new value: %q", out)
		}
		if out := f.ok("device", "label", "pi-e2e", "env-"); out != "device/pi-e2e labeled\n" {
			t.Fatalf("remove: %q", out)
		}
		if l := labels(t, "pi-e2e"); len(l) != 2 || l["env"] != "" || l[schema.LabelDevice] != "pi-e2e" {
			t.Fatalf("after remove: %v", l)
		}
		for _, arg := range []string{"fleet/device-", "fleet/device=other", "fleet/arch=arm64"} {
			if r := f.run("", "device", "label", "pi-e2e", arg, "--overwrite"); r.code == 0 || !strings.Contains(r.stderr, "set by the hub") {
				t.Errorf("label %s: %+v", arg, r)
			}
		}
		if r := f.run("", "device", "label", "nope", "a=b"); r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("label a missing device: %+v", r)
		}
	})

	t.Run("rotate-token", func(t *testing.T) {
		f := f.on(t)
		var creds schema.DeviceCredentials
		f.json(&creds, "device", "rotate-token", "pi-e2e", "-o", "json")
		if creds.Name != "pi-e2e" || creds.Token == "" || creds.Token == first.Token {
			t.Fatalf("rotated %+v, first %+v", creds, first)
		}
		tokens = append(tokens, creds.Token)
		r := f.run("", "device", "rotate-token", "pi-e2e")
		if r.code != 0 || !strings.Contains(r.stdout, "the old token stopped working") || !strings.Contains(r.stdout, "Token (shown once, store it safely): ") {
			t.Fatalf("rotate-token: %+v", r)
		}
		if r := f.run("", "device", "rotate-token", "nope"); r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("rotate a missing device: %+v", r)
		}
	})

	t.Run("monitor", func(t *testing.T) {
		f := f.on(t)
		var cred schema.Credential
		f.json(&cred, "monitor", "add", "mon-e2e", "-o", "json")
		if cred.Name != "mon-e2e" || cred.Role != schema.RoleMonitor || cred.Token == "" {
			t.Fatalf("monitor add: %+v", cred)
		}
		tokens = append(tokens, cred.Token)
		out := f.ok("monitor", "list")
		if !strings.HasPrefix(out, "NAME      ROLE\n") || !strings.Contains(out, "\nmon-e2e   monitor\n") || strings.Contains(out, cred.Token) {
			t.Fatalf("monitor list:\n%s", out)
		}
		if out := f.ok("monitor", "list", "-o", "json"); strings.Contains(out, "token") {
			t.Fatalf("monitor list -o json shows tokens:\n%s", out)
		}
		if r := f.run("", "monitor", "add", "admin"); r.code == 0 {
			t.Fatalf("a monitor named admin: %+v", r)
		}
		if out := f.ok("monitor", "delete", "mon-e2e"); out != "monitor/mon-e2e deleted\n" {
			t.Fatalf("monitor delete: %q", out)
		}
		if r := f.run("", "monitor", "list", "-o", "name"); r.code != 0 || strings.Contains(r.stdout, "mon-e2e") {
			t.Fatalf("after delete: %+v", r)
		}
		// The CLI still works: the admin credential is untouched.
		f.ok("get", "devices")
	})

	t.Run("tokens appear nowhere else", func(t *testing.T) {
		f := f.on(t)
		outs := []string{
			f.ok("get", "devices", "-o", "yaml"),
			f.ok("describe", "devices"),
			hub.Logs(),
		}
		for _, tok := range tokens {
			for _, out := range outs {
				if strings.Contains(out, tok) {
					t.Errorf("a token shows up in:\n%s", out)
				}
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		f := f.on(t)
		if out := f.ok("device", "delete", "pi-e2e", "pi-human"); out != "device/pi-e2e deleted\ndevice/pi-human deleted\n" {
			t.Fatalf("device delete: %q", out)
		}
		r := f.run("", "device", "delete", "pi-e2e")
		if r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("delete again: %+v", r)
		}
		if r := f.run("", "device", "delete", "pi-e2e", "--ignore-not-found"); r.code != 0 || r.stdout != "" {
			t.Fatalf("--ignore-not-found: %+v", r)
		}
		if r := f.run("", "device", "rotate-token", "pi-e2e"); r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("a deleted device got a token: %+v", r)
		}
		if r := f.run("", "get", "devices"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "No resources found") {
			t.Fatalf("get after delete: %+v", r)
		}
	})
}
