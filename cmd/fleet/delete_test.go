package main

import (
	"strings"
	"testing"
)

func TestDelete(t *testing.T) {
	e := newEnv(t)
	f := e.file("app.yaml", webYAML+"---\n"+deviceYAML)
	e.ok("", "apply", "-f", f)
	if got := e.ok("", "delete", "-f", f); got != "deployment/web deleted\ndevice/pi-1 deleted\n" {
		t.Fatalf("delete -f:\n%s", got)
	}
	r := e.run("", "delete", "-f", f)
	if r.code != 1 || strings.Count(r.stderr, "Error from server (NotFound)") != 2 {
		t.Fatalf("delete again: %+v", r)
	}
	if r := e.run("", "delete", "-f", f, "--ignore-not-found"); r.code != 0 || r.stdout != "" {
		t.Fatalf("--ignore-not-found: %+v", r)
	}
	e.ok("", "apply", "-f", f)
	if got := e.ok("", "delete", "deployment", "web"); got != "deployment/web deleted\n" {
		t.Fatalf("delete by name:\n%s", got)
	}
	if got := e.ok("", "delete", "devices", "-l", "site=lab"); got != "device/pi-1 deleted\n" {
		t.Fatalf("delete by selector:\n%s", got)
	}
	for _, args := range [][]string{{"delete"}, {"delete", "deployment"}, {"delete", "-f", f, "deployment", "web"}} {
		if r := e.run("", args...); r.code != 1 {
			t.Errorf("fleet %s: %+v", strings.Join(args, " "), r)
		}
	}
}
