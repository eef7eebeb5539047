package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// requestsSince returns the requests the hub served after the first n.
func (e *env) requestsSince(n int) []string {
	return e.hub.Requests()[n:]
}

func TestDeviceAdd(t *testing.T) {
	e := newEnv(t)
	e.hub.SetInfo(&schema.HubInfo{Version: "v1", Store: "s", MQTTURL: "tcp://10.0.0.5:1883"})
	n := len(e.hub.Requests())
	r := e.run("", "device", "add", "pi-1", "--label", "site=lab", "-l", "room=kitchen,floor=1", "--description", "Pi 4 in the kitchen")
	tok := e.hub.DeviceToken("pi-1")
	want := "device/pi-1 created\n" +
		"Token (shown once, store it safely): " + tok + "\n" +
		"Start the agent on the device:\n" +
		"  fleet-agent --broker tcp://10.0.0.5:1883 --device pi-1 --token-file /etc/fleet/token   (write the token there, mode 0600)\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" || tok == "" {
		t.Fatalf("device add: exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
	}
	if got := e.requestsSince(n); !slices.Equal(got, []string{"GET /v1/info", "POST /v1/devices", "POST /v1/devices/pi-1/token"}) {
		t.Fatalf("requests %v", got)
	}
	d := e.hub.Device("pi-1")
	if d.Spec.Description != "Pi 4 in the kitchen" || d.Metadata.Labels["site"] != "lab" || d.Metadata.Labels["room"] != "kitchen" || d.Metadata.Labels["floor"] != "1" || d.Metadata.Labels[schema.LabelDevice] != "pi-1" {
		t.Fatalf("stored device %+v", d)
	}

	// Again: AlreadyExists, pointing at rotate-token; the token is untouched.
	r = e.run("", "device", "add", "pi-1")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "Error from server (AlreadyExists)") || !strings.Contains(r.stderr, "fleet device rotate-token pi-1") {
		t.Fatalf("add again: %+v", r)
	}
	if e.hub.DeviceToken("pi-1") != tok {
		t.Fatal("a refused add changed the token")
	}

	// -o json is the credentials and nothing else; /v1/info is not asked.
	n = len(e.hub.Requests())
	r = e.run("", "device", "add", "pi-2", "-o", "json")
	if want := `{"name":"pi-2","token":"` + e.hub.DeviceToken("pi-2") + `"}` + "\n"; r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Fatalf("-o json: %+v, want stdout %q", r, want)
	}
	var creds schema.DeviceCredentials
	mustJSON(t, r.stdout, &creds)
	if slices.Contains(e.requestsSince(n), "GET /v1/info") {
		t.Fatal("-o json asked for the broker URL")
	}
	if out := e.ok("", "device", "add", "pi-3", "-o", "yaml"); out != "name: pi-3\ntoken: "+e.hub.DeviceToken("pi-3")+"\n" {
		t.Fatalf("-o yaml: %q", out)
	}
}

func TestDeviceAddBrokerURL(t *testing.T) {
	e := newEnv(t)
	// A hub that predates /v1/info: the hub's host and port 1883, said so.
	e.hub.SetInfo(nil)
	r := e.run("", "device", "add", "pi-1")
	if r.code != 0 || !strings.Contains(r.stdout, "fleet-agent --broker tcp://127.0.0.1:1883 --device pi-1 ") ||
		!strings.Contains(r.stderr, "note: the hub did not say which MQTT URL devices use (GET /v1/info: ") || !strings.Contains(r.stderr, "assuming tcp://127.0.0.1:1883") {
		t.Fatalf("without /v1/info: %+v", r)
	}
	// A TLS broker, behind an external broker.
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://mqtt.example.com:8883", ExternalBroker: true})
	r = e.run("", "device", "add", "pi-2")
	for _, w := range []string{"--broker ssl://mqtt.example.com:8883 --device pi-2", "add --ca-file FILE", "external MQTT broker", "GET /v1/mosquitto/passwd"} {
		if r.code != 0 || !strings.Contains(r.stdout, w) {
			t.Errorf("TLS, external: no %q in %+v", w, r)
		}
	}
	// The hub's own CA: the agent pins it by hash (or takes the file).
	hash := "sha256:" + strings.Repeat("0f", 32)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "ssl://0.0.0.0:8883", MQTTPlainURL: "tcp://127.0.0.1:1883", CAHash: hash})
	r = e.run("", "device", "add", "pi-4")
	for _, w := range []string{"--broker ssl://127.0.0.1:8883 --device pi-4 --token-file /etc/fleet/token --ca-hash " + hash, "--ca-file FILE"} {
		if r.code != 0 || !strings.Contains(r.stdout, w) {
			t.Errorf("TLS, own CA: no %q in %+v", w, r)
		}
	}
	// A plain broker gets no hash, even from a hub with a CA.
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "tcp://127.0.0.1:1883", CAHash: hash})
	if out := e.ok("", "device", "add", "pi-5"); strings.Contains(out, "--ca-hash") {
		t.Fatalf("plain broker with --ca-hash:\n%s", out)
	}
	// A listen address is not dialled: the hub's host replaces it.
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "tcp://0.0.0.0:1884"})
	if out := e.ok("", "device", "add", "pi-3"); !strings.Contains(out, "--broker tcp://127.0.0.1:1884 ") {
		t.Fatalf("wildcard MQTT URL:\n%s", out)
	}
}

func TestDeviceAddTokenFails(t *testing.T) {
	e := newEnv(t)
	e.hub.Fail(http.MethodPost, "/v1/devices/pi-1/token", 1, http.StatusInternalServerError, "InternalError")
	r := e.run("", "device", "add", "pi-1")
	if r.code != 1 || r.stdout != "device/pi-1 created\n" ||
		!strings.Contains(r.stderr, "device/pi-1 was created, but issuing its token failed: ") ||
		!strings.Contains(r.stderr, "fleet device rotate-token pi-1") {
		t.Fatalf("token step failed: %+v", r)
	}
	if e.hub.Device("pi-1") == nil {
		t.Fatal("the device is gone")
	}
	// A hub that cannot be reached: its error, without a broker note.
	r = e.run("", "device", "add", "pi-3", "--hub", "http://127.0.0.1:1")
	if r.code != 1 || r.stdout != "" || strings.Contains(r.stderr, "note:") || !strings.Contains(r.stderr, "Is fleet-hub running?") {
		t.Fatalf("unreachable hub: %+v", r)
	}
	// With -o json, stdout stays empty.
	e.hub.Fail(http.MethodPost, "/v1/devices/pi-2/token", 1, http.StatusInternalServerError, "InternalError")
	if r := e.run("", "device", "add", "pi-2", "-o", "json"); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "was created, but issuing its token failed") {
		t.Fatalf("-o json, token step failed: %+v", r)
	}
	// The advice works.
	var creds schema.DeviceCredentials
	mustJSON(t, e.ok("", "device", "rotate-token", "pi-1", "-o", "json"), &creds)
	if creds.Name != "pi-1" || creds.Token == "" {
		t.Fatalf("rotate after a failed add: %+v", creds)
	}
}

func TestDeviceAddRefusals(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"device", "add"}, "fleet device add takes NAME, got 0"},
		{[]string{"device", "add", "a", "b"}, "fleet device add takes NAME, got 2"},
		{[]string{"device", "add", "Pi_1"}, "device name \"Pi_1\" must be a DNS-1123 label"},
		{[]string{"device", "add", "pi-1", "--label", "fleet/arch=arm64"}, "keys under fleet/ are set by the hub"},
		{[]string{"device", "add", "pi-1", "--label", "site"}, `"site": want key=value`},
		{[]string{"device", "add", "pi-1", "--label", "site-"}, "a new device has no labels to remove"},
		{[]string{"device", "add", "pi-1", "--description", strings.Repeat("x", 1025)}, "spec.description"},
		{[]string{"device", "add", "pi-1", "-o", "wide"}, "-o wide: fleet device add prints json or yaml"},
	} {
		r := e.run("", tt.args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: %+v; want %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
	if len(e.hub.Requests()) != 0 {
		t.Fatalf("refused locally, yet the hub was asked: %v", e.hub.Requests())
	}
}

func TestDeviceLabel(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true, Agent: &schema.AgentInfo{Arch: "arm64"}}); err != nil {
		t.Fatal(err)
	}
	labels := func() map[string]string { return e.hub.Device("pi-1").Metadata.Labels }

	if out := e.ok("", "device", "label", "pi-1", "env=prod", "room=kitchen"); out != "device/pi-1 labeled\n" {
		t.Fatalf("label: %q", out)
	}
	if l := labels(); l["env"] != "prod" || l["room"] != "kitchen" || l["site"] != "lab" || l[schema.LabelArch] != "arm64" || l[schema.LabelDevice] != "pi-1" {
		t.Fatalf("labels %v", l)
	}
	if !e.hub.Device("pi-1").Status.Online {
		t.Fatal("labelling lost the status")
	}

	// Changing a value needs --overwrite; nothing is written without it.
	rev := e.hub.Revision()
	r := e.run("", "device", "label", "pi-1", "site=garage", "env=dev")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `label "env" already has the value "prod"`) ||
		!strings.Contains(r.stderr, `label "site" already has the value "lab"`) || !strings.Contains(r.stderr, "Pass --overwrite") {
		t.Fatalf("without --overwrite: %+v", r)
	}
	if e.hub.Revision() != rev {
		t.Fatal("a refused label wrote")
	}
	// The value it already has: nothing to do, nothing written.
	if out := e.ok("", "device", "label", "pi-1", "site=lab"); out != "device/pi-1 not labeled\n" || e.hub.Revision() != rev {
		t.Fatalf("same value: %q", out)
	}
	if out := e.ok("", "device", "label", "pi-1", "site=garage", "env-", "--overwrite"); out != "device/pi-1 labeled\n" {
		t.Fatalf("--overwrite: %q", out)
	}
	if l := labels(); l["site"] != "garage" || l["env"] != "" || len(l) != 4 {
		t.Fatalf("after overwrite and remove: %v", l)
	}
	// Removing a label that is not there warns, as kubectl does.
	if r := e.run("", "device", "label", "pi-1", "nope-"); r.code != 0 || r.stdout != "device/pi-1 not labeled\n" || r.stderr != "label \"nope\" not found.\n" {
		t.Fatalf("remove absent: %+v", r)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"device", "label", "pi-1"}, "no label change given"},
		{[]string{"device", "label", "pi-1", "fleet/arch-"}, `label "fleet/arch": keys under fleet/ are set by the hub`},
		{[]string{"device", "label", "pi-1", "fleet/device=x", "--overwrite"}, "keys under fleet/ are set by the hub"},
		{[]string{"device", "label", "pi-1", "a=b", "a-"}, "cannot be both set and removed"},
		{[]string{"device", "label", "pi-9", "a=b"}, `Error from server (NotFound): Device "pi-9" not found`},
		{[]string{"device", "label"}, "requires at least 1 arg"},
	} {
		r := e.run("", tt.args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: %+v; want %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
}

func TestDeviceLabelRetriesConflicts(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	// Two writers got in first: the third write succeeds.
	e.hub.Fail(http.MethodPut, "/v1/devices/pi-1", 2, http.StatusConflict, "Conflict")
	n := len(e.hub.Requests())
	if out := e.ok("", "device", "label", "pi-1", "env=prod"); out != "device/pi-1 labeled\n" {
		t.Fatalf("label: %q", out)
	}
	want := slices.Repeat([]string{"GET /v1/devices/pi-1", "PUT /v1/devices/pi-1"}, 3)
	if got := e.requestsSince(n); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	if e.hub.Device("pi-1").Metadata.Labels["env"] != "prod" {
		t.Fatal("not labeled")
	}
	// A write that never gets through fails, in the end.
	e.hub.Fail(http.MethodPut, "/v1/devices/pi-1", -1, http.StatusConflict, "Conflict")
	if r := e.run("", "device", "label", "pi-1", "env=dev", "--overwrite"); r.code != 1 || !strings.Contains(r.stderr, "still conflicting with other writers after 5 attempts") {
		t.Fatalf("endless conflict: %+v", r)
	}
}

func TestDeviceRotateToken(t *testing.T) {
	e := newEnv(t)
	e.hub.SetInfo(&schema.HubInfo{MQTTURL: "tcp://10.0.0.5:1883"})
	var first, second schema.DeviceCredentials
	mustJSON(t, e.ok("", "device", "add", "pi-1", "-o", "json"), &first)
	r := e.run("", "device", "rotate-token", "pi-1", "-o", "json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("rotate -o json: %+v", r)
	}
	mustJSON(t, r.stdout, &second)
	if second.Name != "pi-1" || second.Token == "" || second.Token == first.Token || second.Token != e.hub.DeviceToken("pi-1") {
		t.Fatalf("rotated %+v after %+v", second, first)
	}
	r = e.run("", "device", "rotate-token", "pi-1")
	tok := e.hub.DeviceToken("pi-1")
	want := "device/pi-1 token rotated: the old token stopped working and its MQTT sessions were disconnected\n" +
		"Token (shown once, store it safely): " + tok + "\n" +
		"Restart the agent on the device with the new token:\n" +
		"  fleet-agent --broker tcp://10.0.0.5:1883 --device pi-1 --token-file /etc/fleet/token   (write the token there, mode 0600)\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Fatalf("rotate: %+v\nwant stdout:\n%s", r, want)
	}
	if r := e.run("", "device", "rotate-token", "pi-9"); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "NotFound") {
		t.Fatalf("rotate a missing device: %+v", r)
	}
	if r := e.run("", "device", "rotate-token", "pi-1", "-o", "name"); r.code != 1 || !strings.Contains(r.stderr, "prints json or yaml") {
		t.Fatalf("-o name: %+v", r)
	}
}

func TestDeviceDelete(t *testing.T) {
	e := newEnv(t)
	e.ok("", "device", "add", "pi-1", "-o", "json")
	e.ok("", "device", "add", "pi-2", "-o", "json")
	if out := e.ok("", "device", "delete", "pi-1", "pi-2"); out != "device/pi-1 deleted\ndevice/pi-2 deleted\n" {
		t.Fatalf("delete: %q", out)
	}
	if e.hub.Device("pi-1") != nil || e.hub.DeviceToken("pi-1") != "" {
		t.Fatal("pi-1 or its token is still there")
	}
	r := e.run("", "device", "delete", "pi-1", "pi-2")
	if r.code != 1 || strings.Count(r.stderr, "Error from server (NotFound)") != 2 {
		t.Fatalf("delete again: %+v", r)
	}
	if r := e.run("", "device", "delete", "pi-1", "--ignore-not-found"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("--ignore-not-found: %+v", r)
	}
	if r := e.run("", "device", "delete", "pi-1", "Bad_Name"); r.code != 1 || !strings.Contains(r.stderr, "DNS-1123") {
		t.Fatalf("bad name: %+v", r)
	}
}

func TestDeviceGroupAndList(t *testing.T) {
	e := newEnv(t)
	if out := e.ok("", "device"); !strings.Contains(out, "Available Commands:") || !strings.Contains(out, "rotate-token") {
		t.Fatalf("fleet device:\n%s", out)
	}
	if r := e.run("", "device", "lable", "pi-1"); r.code != 1 || !strings.Contains(r.stderr, `unknown command "lable" for "fleet device"`) || !strings.Contains(r.stderr, "Did you mean this?\n\tlabel") {
		t.Fatalf("typo: %+v", r)
	}
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	if a, b := e.ok("", "device", "list", "-o", "wide"), e.ok("", "get", "devices", "-o", "wide"); a != b || !strings.Contains(a, "pi-1") {
		t.Fatalf("device list:\n%s\nget devices:\n%s", a, b)
	}
	if out := e.ok("", "device", "ls", "-l", "site=lab", "-o", "name"); out != "device/pi-1\n" {
		t.Fatalf("device ls -l: %q", out)
	}
	if out := e.ok("", "__complete", "device", "rotate-token", "pi"); !strings.HasPrefix(out, "pi-1\n") {
		t.Fatalf("completion:\n%s", out)
	}
	if out := e.ok("", "__complete", "device", "label", "pi-1", ""); strings.Contains(out, "pi-1") {
		t.Fatalf("label arguments completed as devices:\n%s", out)
	}
}

// TestDeviceStatusShown checks what get and describe show of a device's
// status (schema.DeviceObservedInfo), field by field.
func TestDeviceStatusShown(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	seen := time.Now().Add(-90 * time.Second)
	started := time.Now().Add(-time.Hour)
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{
		Online: true, LastSeen: &seen, DesiredGeneration: 3, ObservedGeneration: 2, Converged: false, Stale: true,
		Agent: &schema.AgentInfo{Version: "v0.4.0", OS: "linux", Arch: "arm"},
		Node:  &schema.NodeInfo{Hostname: "kitchen-pi", MemoryTotalBytes: 1 << 30, MemoryAvailBytes: 256 << 20, DiskTotalBytes: 32 << 30, DiskFreeBytes: 8 << 30, UptimeSeconds: 7200},
		Pods: []schema.PodStatus{
			{Name: "web", Phase: schema.PhaseRunning, Ready: true, Restarts: 1, Containers: []schema.ContainerStatus{{Name: "web", Image: "nginx:1.25", State: schema.ContainerRunning, StartedAt: &started, Restarts: 1}}},
			{Name: "tele", Phase: schema.PhaseFailed, Message: "image pull failed", Containers: []schema.ContainerStatus{{Name: "t", Image: "busybox", State: schema.ContainerExited, ExitCode: 2, Reason: "Error"}}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "get", "devices")
	// LAST-SEEN was 90 s ago when the status was made; a slow run may
	// print the second after.
	out = strings.Replace(out, "91s ", "90s ", 1)
	if want := "NAME   ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE\npi-1   true     90s         2/3          1/2    false       "; !strings.HasPrefix(out, want) {
		t.Errorf("get devices:\n%s\nwant prefix\n%s", out, want)
	}
	if out := e.ok("", "get", "devices", "-o", "wide"); !strings.HasSuffix(strings.Join(strings.Fields(out), " "), "fleet/arch=arm,fleet/device=pi-1,site=lab arm v0.4.0") {
		t.Errorf("get devices -o wide:\n%s", out)
	}
	out = e.ok("", "describe", "device", "pi-1")
	for _, w := range []string{
		"Online:", "Generation:", "observed 2, desired 3", "Converged:", "false (stale: no status heard recently)",
		"Agent:", "v0.4.0 (linux/arm)", "Hostname:", "kitchen-pi", "256.0MiB available of 1.0GiB", "8.0GiB free of 32.0GiB", "Uptime:", "120m",
		"Deployments:", "web", "Phase:", "Running", "Restarts:", "nginx:1.25",
		"State:", "running", "exited (exit code 2): Error", "Message:", "image pull failed",
	} {
		if !strings.Contains(strings.ToLower(out), strings.ToLower(w)) {
			t.Errorf("describe device: no %q in\n%s", w, out)
		}
	}
	var d schema.Device
	mustJSON(t, e.ok("", "get", "device", "pi-1", "-o", "json"), &d)
	if d.Status == nil || d.Status.Node == nil || d.Status.Node.Hostname != "kitchen-pi" || len(d.Status.Pods) != 2 {
		t.Errorf("-o json status: %+v", d.Status)
	}
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "token") {
		t.Errorf("a device carries a token: %s", b)
	}
}
