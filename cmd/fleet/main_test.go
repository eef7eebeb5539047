package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/fakehubtest"
	"github.com/fleetmq/fleet/schema"
)

const adminToken = "admin-token-Q7"

const webYAML = `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  selector:
    matchLabels:
      site: lab
  template:
    spec:
      containers:
      - name: web
        image: nginx:1.25
        env:
        - name: MODE
          value: prod
        resources:
          limits:
            memory: 64Mi
`

const deviceYAML = `apiVersion: fleet/v1
kind: Device
metadata:
  name: pi-1
  labels:
    site: lab
`

// env is one fake hub and a place for files.
type env struct {
	t   *testing.T
	hub *fakehubtest.Hub
	url string
	dir string
	// vars is the environment the CLI sees.
	vars map[string]string
	// now, if set, is the CLI's clock (ages), so that a test's expected
	// ages do not depend on how long it ran.
	now func() time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	h := fakehubtest.New(adminToken)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	return &env{t: t, hub: h, url: srv.URL, dir: dir, vars: map[string]string{
		"FLEET_HUB": srv.URL, "FLEET_TOKEN": adminToken, "HOME": filepath.Join(dir, "home"),
	}}
}

func (e *env) file(name, content string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the CLI in-process as main would and returns its output and
// exit status.
func (e *env) run(stdin string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	return e.runCtx(ctx, stdin, args...)
}

func (e *env) runCtx(ctx context.Context, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	err := run(ctx, args, stdio{
		in: strings.NewReader(stdin), out: &out, err: &errb,
		getenv:  func(k string) string { return e.vars[k] },
		workDir: e.dir,
		now:     e.now,
	})
	printError(&errb, err)
	return result{stdout: out.String(), stderr: errb.String(), code: exitCode(err)}
}

func (e *env) ok(stdin string, args ...string) string {
	e.t.Helper()
	r := e.run(stdin, args...)
	if r.code != 0 {
		e.t.Fatalf("fleet %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	e.vars = map[string]string{"HOME": filepath.Join(e.dir, "home")}
	r := e.run("", "get", "devices")
	if r.code != 1 || r.stderr != "error: "+client.ErrNoHub.Error()+"\n" {
		t.Fatalf("no config: %+v", r)
	}
	// ./fleet-data/admin.conf, as fleet-hub writes it, is found.
	e.file("fleet-data/admin.conf", fmt.Sprintf("hub: %s\ntoken: %s\n", e.url, adminToken))
	if r := e.run("", "get", "devices"); r.code != 0 {
		t.Fatalf("with ./fleet-data/admin.conf: %+v", r)
	}
	// A wrong token is refused; the hint names where it came from, and
	// the token is never printed.
	r = e.run("", "get", "devices", "--token", "wrong-token-ZZ")
	if r.code != 1 || !strings.Contains(r.stderr, "Unauthorized") || !strings.Contains(r.stderr, "(from --token)") || strings.Contains(r.stderr, "ZZ") || strings.Contains(r.stderr, adminToken) {
		t.Fatalf("wrong token: %+v", r)
	}
	r = e.run("", "get", "devices", "--hub", "http://127.0.0.1:1", "--token", "x")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "Is fleet-hub running?") {
		t.Fatalf("unreachable hub: %+v", r)
	}
}

func TestTimeout(t *testing.T) {
	e := newEnv(t)
	// A hub that never answers (until the client gives up).
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	r := e.run("", "get", "devices", "--hub", srv.URL, "--timeout", "100ms")
	if r.code != 1 || !strings.Contains(r.stderr, "did not answer within --timeout=100ms") {
		t.Fatalf("timeout: %+v", r)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCompletion(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := e.ok("", "completion", sh); !strings.Contains(out, "fleet") {
			t.Errorf("completion %s: %q", sh, out[:min(len(out), 100)])
		}
	}
	if out := e.ok("", "__complete", "get", "dep"); !strings.HasPrefix(out, "deployments\n") {
		t.Errorf("kind completion:\n%s", out)
	}
	if out := e.ok("", "__complete", "get", "deployments", ""); !strings.HasPrefix(out, "web\n") {
		t.Errorf("name completion:\n%s", out)
	}
	if out := e.ok("", "__complete", "describe", "device", "pi"); !strings.HasPrefix(out, "pi-1\n") {
		t.Errorf("device name completion:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	e := newEnv(t)
	if out := e.ok("", "version"); !strings.HasPrefix(out, "fleet ") {
		t.Fatalf("version: %q", out)
	}
}

// TestEveryCommandTeaches walks the command tree: every command has a
// short and long description and examples.
func TestEveryCommandTeaches(t *testing.T) {
	root := newRootCmd(newCLIContext(stdio{getenv: func(string) string { return "" }}))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.HasParent() && c.Parent().Name() == "completion" {
			return
		}
		if c.Name() != "completion" {
			if c.Short == "" || c.Long == "" || c.Example == "" {
				t.Errorf("%s: Short, Long and Example must all be set", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func TestExitCodeAndPrintError(t *testing.T) {
	var b bytes.Buffer
	printError(&b, &exitError{code: 1})
	if b.Len() != 0 || exitCode(&exitError{code: 1}) != 1 || exitCode(nil) != 0 || exitCode(fmt.Errorf("x")) != 1 {
		t.Fatalf("silent exit error printed %q", b.String())
	}
	printError(&b, &exitError{code: 2, err: &client.APIError{Status: schema.Status{Code: 404, Reason: "NotFound", Message: "gone"}}})
	if b.String() != "Error from server (NotFound): gone\n" || exitCode(&exitError{code: 2}) != 2 {
		t.Fatalf("got %q", b.String())
	}
}
