package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestGetTables(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	now := time.Now()
	e.now = func() time.Time { return now }
	seen := now.Add(-3 * time.Second)
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{
		Online: true, LastSeen: &seen, ObservedGeneration: 2, DesiredGeneration: 2, Converged: true,
		Agent: &schema.AgentInfo{Version: "v1.0.0", OS: "linux", Arch: "arm64"},
		Pods:  []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.hub.SetDeploymentStatus("web", &schema.DeploymentStatus{Targeted: 1, Updated: 1, Ready: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "deployments"}, []string{"NAME   TARGETED   UPDATED   READY   PENDING   GENERATION   AGE\nweb    1          1         1       0         1            "}},
		{[]string{"get", "deploy", "-o", "wide"}, []string{"SELECTOR   IMAGES       STRATEGY", "site=lab   nginx:1.25   AllAtOnce"}},
		{[]string{"get", "dev"}, []string{"NAME   ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE\npi-1   true     3s          2/2          1/1    true        "}},
		{[]string{"get", "device", "pi-1", "-o", "wide"}, []string{"fleet/arch=arm64,fleet/device=pi-1,site=lab   arm64   v1.0.0"}},
		{[]string{"get", "devices", "-l", "site=lab", "-o", "name"}, []string{"device/pi-1\n"}},
		{[]string{"get", "deployment/web", "device/pi-1", "-o", "name"}, []string{"deployment/web\ndevice/pi-1\n"}},
		{[]string{"get", "devices", "--no-headers"}, []string{"pi-1   true"}},
	} {
		out := e.ok("", tt.args...)
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("fleet %s: missing %q in\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
	}
	if r := e.run("", "get", "devices", "-l", "site=hall"); r.code != 0 || r.stdout != "" || r.stderr != "No resources found.\n" {
		t.Errorf("empty selection: %+v", r)
	}
}

func TestGetJSONAndYAML(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	var d schema.Deployment
	mustJSON(t, e.ok("", "get", "deployment", "web", "-o", "json"), &d)
	if d.Kind != "Deployment" || d.Metadata.Name != "web" || d.Metadata.ResourceVersion == "" {
		t.Fatalf("single object: %+v", d)
	}
	var l schema.DeviceList
	mustJSON(t, e.ok("", "get", "devices", "-o", "json"), &l)
	if l.Kind != "DeviceList" || len(l.Items) != 1 || l.Metadata.ResourceVersion == "" {
		t.Fatalf("list: %+v", l)
	}
	out := e.ok("", "get", "deployments", "-o", "yaml")
	if !strings.Contains(out, "kind: DeploymentList") || !strings.Contains(out, "image: nginx:1.25") {
		t.Fatalf("yaml list:\n%s", out)
	}
	// An empty list is printed, not "No resources found".
	mustJSON(t, e.ok("", "get", "devices", "-l", "site=none", "-o", "json"), &l)
	if len(l.Items) != 0 || l.Kind != "DeviceList" {
		t.Fatalf("empty list: %+v", l)
	}
}

func TestGetErrors(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "requires at least 1 arg"},
		{[]string{"get", "services"}, `unknown resource type "services": valid types are deployments (deployment, deploy), devices (device, dev), configmaps (configmap, cm), secrets (secret), agentrollouts (agentrollout, ar) and pods (pod, po)`},
		{[]string{"get", "service/web"}, `unknown resource type "service"`},
		{[]string{"get", "deployment", "missing"}, `Error from server (NotFound): Deployment "missing" not found`},
		{[]string{"get", "deployment", "Bad_Name"}, "DNS-1123"},
		{[]string{"get", "devices", "-l", "site!"}, `invalid label selector "site!": unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt`},
		{[]string{"get", "devices", "-l", "site in (a"}, `invalid label selector "site in (a": unable to parse requirement: found '', expected: ',' or ')'`},
		{[]string{"get", "devices", "-o", "jsonpath"}, "-o jsonpath needs an argument: jsonpath=TEMPLATE"},
		{[]string{"get", "devices", "-o", "jsonpaht={.x}"}, `unknown output format "jsonpaht={.x}": want one of table, wide, json, yaml, name, jsonpath=TEMPLATE`},
		{[]string{"get", "devices", "--bogus"}, "unknown flag: --bogus\nSee 'fleet get --help' for usage."},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		r := e.run("", tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
	// Found objects are printed, the missing ones reported after them.
	r := e.run("", "get", "deployments", "web", "missing", "-o", "name")
	if r.code != 1 || r.stdout != "deployment/web\n" || !strings.Contains(r.stderr, `"missing" not found`) {
		t.Errorf("partial get: %+v", r)
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, done := e.background(ctx, "get", "devices", "-w", "-o", "json", "--output-watch-events")
	// The list comes first, then each change.
	waitFor(t, out, `"type": "ADDED"`)
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, `"type": "MODIFIED"`)
	e.ok("", "delete", "device", "pi-1")
	waitFor(t, out, `"type": "DELETED"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch ended with exit %d after interrupt, want 0\n%s", code, out)
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var types []string
	for dec.More() {
		var ev struct {
			Type   string        `json:"type"`
			Object schema.Device `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("%v in\n%s", err, out.String())
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "ADDED,MODIFIED,DELETED" {
		t.Fatalf("events %v", types)
	}
}

func waitFor(t *testing.T, b *syncBuffer, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 10s in\n%s", substr, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGetPods: the pods come from the devices' statuses, one line per pod
// per device, kubectl's columns; NAME keeps one pod, -l picks devices.
func TestGetPods(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML+"---\n"+strings.ReplaceAll(deviceYAML, "pi-1", "pi-2")+"---\n"+
		strings.ReplaceAll(strings.ReplaceAll(deviceYAML, "pi-1", "pi-3"), "site: lab", "site: hall")))
	if r := e.run("", "get", "pods"); r.code != 0 || r.stdout != "" || r.stderr != "No resources found.\n" {
		t.Errorf("no reports yet: %+v", r)
	}
	now := time.Now()
	e.now = func() time.Time { return now }
	seen := now.Add(-3 * time.Second)
	started := now.Add(-5 * time.Minute)
	for name, st := range map[string]*schema.DeviceObservedInfo{
		"pi-1": {Online: true, LastSeen: &seen, Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true,
			Containers: []schema.ContainerStatus{{Name: "nginx", Image: "nginx:1.25", State: schema.ContainerRunning, StartedAt: &started}}}}},
		"pi-2": {Online: true, LastSeen: &seen, Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhasePending, Restarts: 2, Message: "pull failed",
			Containers: []schema.ContainerStatus{{Name: "nginx", Image: "nginx:1.25", State: schema.ContainerWaiting, Reason: "ErrImagePull"}}}}},
		"pi-3": {Online: false, LastSeen: &seen, Pods: []schema.PodStatus{{Name: "cam", Phase: schema.PhaseRunning, Ready: true,
			Containers: []schema.ContainerStatus{{Name: "cam", Image: "cam:2", State: schema.ContainerRunning, StartedAt: &started}}}}},
	} {
		if err := e.hub.SetDeviceStatus(name, st); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "pods"}, "" +
			"DEVICE   POD   READY   STATUS         RESTARTS   AGE\n" +
			"pi-1     web   1/1     Running        0          5m\n" +
			"pi-2     web   0/1     ErrImagePull   2          <unknown>\n" +
			"pi-3     cam   0/1     Unknown        0          5m\n"},
		{[]string{"get", "po", "web", "-l", "site=lab", "--no-headers"}, "" +
			"pi-1   web   1/1   Running        0     5m\n" +
			"pi-2   web   0/1   ErrImagePull   2     <unknown>\n"},
		{[]string{"get", "pod/cam", "-o", "name"}, "pod/pi-3/cam\n"},
		{[]string{"get", "pods", "-l", "fleet/device=pi-2", "-o", "wide"}, "" +
			"DEVICE   POD   READY   STATUS         RESTARTS   AGE         IMAGES       FAILED REVISION   MESSAGE\n" +
			"pi-2     web   0/1     ErrImagePull   2          <unknown>   nginx:1.25   <none>            pull failed\n"},
	} {
		if out := e.ok("", tt.args...); out != tt.want {
			t.Errorf("fleet %s:\n%s\nwant\n%s", strings.Join(tt.args, " "), out, tt.want)
		}
	}
	var l struct {
		Kind  string `json:"kind"`
		Items []struct {
			Device    string `json:"device"`
			Name      string `json:"name"`
			Reachable bool   `json:"reachable"`
		} `json:"items"`
	}
	mustJSON(t, e.ok("", "get", "pods", "web", "-o", "json"), &l)
	if l.Kind != "PodList" || len(l.Items) != 2 || l.Items[1].Device != "pi-2" || !l.Items[1].Reachable {
		t.Fatalf("json: %+v", l)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "pods", "pi-1/web"}, "no need to name the resource type"},
		{[]string{"get", "pod/web", "device/pi-1"}, "pods cannot be listed together"},
		{[]string{"get", "device/pi-1", "pod/web"}, "pods cannot be listed together"},
		{[]string{"get", "pods", "Bad_Name"}, "pod name"},
		{[]string{"get", "pods", "-l", "site!"}, "invalid label selector"},
	} {
		r := e.run("", tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want an error with %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
}

// TestGetPodsWatch: -w prints the pods, then each pod whose line changed.
func TestGetPodsWatch(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, done := e.background(ctx, "get", "pods", "-w")
	waitFor(t, out, "DEVICE")
	pending := &schema.DeviceObservedInfo{Online: true, Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhasePending,
		Containers: []schema.ContainerStatus{{Name: "nginx", State: schema.ContainerWaiting, Reason: "ContainerCreating"}}}}}
	if err := e.hub.SetDeviceStatus("pi-1", pending); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "ContainerCreating")
	if err := e.hub.SetDeviceStatus("pi-1", pending); err != nil { // the same report again
		t.Fatal(err)
	}
	running := &schema.DeviceObservedInfo{Online: true, Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true,
		Containers: []schema.ContainerStatus{{Name: "nginx", State: schema.ContainerRunning}}}}}
	if err := e.hub.SetDeviceStatus("pi-1", running); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "Running")
	e.ok("", "delete", "device", "pi-1")
	waitFor(t, out, "Deleted")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch ended with exit %d after interrupt, want 0\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "0/1") || !strings.Contains(lines[2], "1/1") {
		t.Fatalf("want the header and one line per change:\n%s", out)
	}
}
