package main

import (
	"strings"
	"testing"
)

func TestDiffExitCodes(t *testing.T) {
	e := newEnv(t)
	f := e.file("app.yaml", webYAML)
	// Not there yet: all added, exit 1.
	r := e.run("", "diff", "-f", f)
	if r.code != 1 || !strings.HasPrefix(r.stdout, "--- /dev/null\n+++ deployment/web ("+f+")\n") || r.stderr != "" {
		t.Fatalf("diff of a new object: %+v", r)
	}
	e.ok("", "apply", "-f", f)
	if r := e.run("", "diff", "-f", f); r.code != 0 || r.stdout != "" {
		t.Fatalf("diff after apply: %+v", r)
	}
	f2 := e.file("app2.yaml", strings.Replace(webYAML, "nginx:1.25", "nginx:1.26", 1))
	r = e.run("", "diff", "-f", f2)
	if r.code != 1 || !strings.Contains(r.stdout, "-        image: nginx:1.25\n+        image: nginx:1.26\n") {
		t.Fatalf("diff of a change: %+v", r)
	}
	e.ok("", "apply", "-f", f2)
	if r := e.run("", "diff", "-f", f2); r.code != 0 {
		t.Fatalf("diff after second apply: %+v", r)
	}
	// Errors exit 2 or more.
	bad := e.file("bad.yaml", strings.Replace(webYAML, "memory: 64Mi", "memory: -1Mi", 1))
	if r := e.run("", "diff", "-f", bad); r.code != 2 || !strings.Contains(r.stderr, "memory") {
		t.Fatalf("diff of an invalid manifest: %+v", r)
	}
	e.vars["FLEET_TOKEN"] = "wrong"
	if r := e.run("", "diff", "-f", f); r.code != 2 || !strings.Contains(r.stderr, "Unauthorized") {
		t.Fatalf("diff with a wrong token: %+v", r)
	}
}
