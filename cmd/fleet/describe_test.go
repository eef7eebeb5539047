package main

import (
	"strings"
	"testing"
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
	if out := e.ok("", "describe", "devices"); !strings.Contains(out, "Name:") {
		t.Errorf("describe all devices:\n%s", out)
	}
	if r := e.run("", "describe", "device", "nope"); r.code != 1 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("describe missing: %+v", r)
	}
}
