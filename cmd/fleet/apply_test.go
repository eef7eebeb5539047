package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestApplyCreatedUnchangedConfigured(t *testing.T) {
	e := newEnv(t)
	f := e.file("app.yaml", webYAML+"---\n"+deviceYAML)
	if got := e.ok("", "apply", "-f", f); got != "deployment/web created\ndevice/pi-1 created\n" {
		t.Fatalf("first apply:\n%s", got)
	}
	if got := e.ok("", "apply", "-f", f); got != "deployment/web unchanged\ndevice/pi-1 unchanged\n" {
		t.Fatalf("second apply:\n%s", got)
	}
	var before schema.Deployment
	mustJSON(t, e.ok("", "get", "deployment", "web", "-o", "json"), &before)

	f2 := e.file("app2.yaml", strings.Replace(webYAML, "nginx:1.25", "nginx:1.26", 1))
	if got := e.ok("", "apply", "-f", f2, "--dry-run=server"); got != "deployment/web configured (server dry run)\n" {
		t.Fatalf("dry run:\n%s", got)
	}
	if e.hub.Deployment("web").Spec.Template.Spec.Containers[0].Image != "nginx:1.25" {
		t.Fatal("dry run stored the change")
	}
	var after schema.Deployment
	mustJSON(t, e.ok("", "apply", "-f", f2, "-o", "json"), &after)
	if after.Metadata.Generation != before.Metadata.Generation+1 || after.Spec.Template.Spec.Containers[0].Image != "nginx:1.26" {
		t.Fatalf("after change: generation %d (was %d)", after.Metadata.Generation, before.Metadata.Generation)
	}
	// -o yaml of several objects is a List.
	out := e.ok("", "apply", "-f", f, "-o", "yaml")
	if !strings.HasPrefix(out, "apiVersion: fleet/v1\nitems:\n") || !strings.Contains(out, "kind: List") {
		t.Fatalf("apply -o yaml:\n%s", out)
	}
	if got := e.ok("", "apply", "-f", f, "-o", "name"); got != "deployment/web\ndevice/pi-1\n" {
		t.Fatalf("apply -o name:\n%s", got)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v in\n%s", err, s)
	}
}

func TestApplyDirectoryAndStdinInOneRequest(t *testing.T) {
	e := newEnv(t)
	e.file("m/b-web.yaml", webYAML)
	e.file("m/a-dev.json", `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-2"}}`)
	e.file("m/notes.txt", "ignored")
	got := e.ok(deviceYAML, "apply", "-f", filepath.Join(e.dir, "m"), "-f", "-")
	if got != "device/pi-2 created\ndeployment/web created\ndevice/pi-1 created\n" {
		t.Fatalf("apply dir + stdin:\n%s", got)
	}
	applies := 0
	for _, r := range e.hub.Requests() {
		if strings.HasPrefix(r, "POST /v1/apply") {
			applies++
		}
	}
	if applies != 1 {
		t.Fatalf("%d apply requests, want one all-or-nothing request", applies)
	}
}

// TestApplyInvalidManifests checks that a bad manifest fails before any
// request, names the file and the field, and stores nothing.
func TestApplyInvalidManifests(t *testing.T) {
	tests := []struct {
		name, content string
		want          []string
	}{
		{"bad name", strings.Replace(webYAML, "name: web\n  labels", "name: Web_App\n  labels", 1), []string{"metadata.name", "DNS-1123"}},
		{"missing image", strings.Replace(webYAML, "        image: nginx:1.25\n", "", 1), []string{"spec.template.spec.containers[0].image: required"}},
		{"unknown field", strings.Replace(webYAML, "      - name: web\n", "      - name: web\n        imagee: x\n", 1), []string{"spec.template.spec.containers[0].imagee: unknown field"}},
		{"negative memory", strings.Replace(webYAML, "memory: 64Mi", "memory: -1Mi", 1), []string{"spec.template.spec.containers[0].resources.limits.memory", "negative"}},
		{"wrong apiVersion", strings.Replace(webYAML, "apiVersion: fleet/v1", "apiVersion: apps/v1", 1), []string{"apiVersion", `"apps/v1"`}},
		{"binary garbage", "\x7fELF\x00\x01\x02\x03\xff\xfe", []string{"not text"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			good := e.file("good.yaml", deviceYAML)
			bad := e.file("bad.yaml", tt.content)
			r := e.run("", "apply", "-f", good, "-f", bad)
			if r.code == 0 {
				t.Fatalf("exit 0; stdout:\n%s", r.stdout)
			}
			for _, w := range append(tt.want, bad+":") {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
				}
			}
			if len(e.hub.Requests()) != 0 {
				t.Errorf("requests were sent: %v", e.hub.Requests())
			}
			if got := e.run("", "get", "devices"); got.stdout != "" || !strings.Contains(got.stderr, "No resources found") {
				t.Errorf("something was stored: %+v", got)
			}
		})
	}
}

// TestApplyWarnsOfSecretsInEnv: a Deployment that takes a Secret into a
// container's environment is applied, with a warning on stderr that the
// value lands on the device's disk; one that mounts it gets none.
func TestApplyWarnsOfSecretsInEnv(t *testing.T) {
	e := newEnv(t)
	env := strings.Replace(webYAML, "          value: prod\n", `          value: prod
        - name: DB_PASSWORD
          valueFrom: {secretKeyRef: {name: db, key: password}}
        envFrom:
        - secretRef: {name: api}
`, 1)
	r := e.run("", "apply", "-f", e.file("env.yaml", env))
	if r.code != 0 || r.stdout != "deployment/web created\n" {
		t.Fatalf("apply: %+v", r)
	}
	for _, want := range []string{
		`Warning: deployment/web: container "web" takes Secret "db" into its environment (spec.template.spec.containers[0].env[1].valueFrom.secretKeyRef)`,
		`Warning: deployment/web: container "web" takes Secret "api" into its environment (spec.template.spec.containers[0].envFrom[0].secretRef)`,
		"mount the Secret as a volume",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r := e.run("", "apply", "-f", e.file("plain.yaml", webYAML)); r.code != 0 || r.stderr != "" {
		t.Errorf("apply without Secrets in env: %+v", r)
	}
}
