package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestDescribe(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	out := e.ok("", "describe", "deployment", "web")
	for _, w := range []string{"Name:", "web", "Selector:", "site=lab", "Image:", "nginx:1.25", "MODE:", "prod", "memory:", "64Mi", "pi-1"} {
		if !strings.Contains(out, w) {
			t.Errorf("describe deployment: missing %q in\n%s", w, out)
		}
	}
	out = e.ok("", "describe", "dev", "pi-1")
	for _, w := range []string{"Name:", "pi-1", "site=lab", "<never>", "Deployments:", "web", "Pods:"} {
		if !strings.Contains(out, w) {
			t.Errorf("describe device: missing %q in\n%s", w, out)
		}
	}
	if !strings.HasSuffix(out, "\nEvents:  <none>\n") {
		t.Errorf("describe device: a device without events should end with Events: <none>:\n%s", out)
	}
	// The device's recent events end its description, oldest first.
	at := time.Now().Add(-2 * time.Minute)
	if err := e.hub.SetDeviceEvents("pi-1", []schema.Event{
		{Device: "pi-1", Time: at, Type: schema.EventNormal, Reason: "Pulled", Pod: "web", Container: "web", Message: "image nginx:1.25 is present"},
		{Device: "pi-1", Time: at.Add(time.Second), Type: schema.EventNormal, Reason: "Started", Pod: "web", Container: "web", Message: "started container web-1"},
	}); err != nil {
		t.Fatal(err)
	}
	out = e.ok("", "describe", "dev", "pi-1")
	events := out[strings.Index(out, "\nEvents:\n")+1:]
	lines := strings.Split(strings.TrimSpace(events), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "TYPE") || !strings.Contains(lines[2], "Pulled") || !strings.Contains(lines[3], "started container web-1") {
		t.Errorf("describe device: events section\n%s", events)
	}
	if out := e.ok("", "describe", "devices"); !strings.Contains(out, "Name:") {
		t.Errorf("describe all devices:\n%s", out)
	}
	if r := e.run("", "describe", "device", "nope"); r.code != 1 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("describe missing: %+v", r)
	}
}
