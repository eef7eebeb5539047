package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
)

// configEnv is a fake hub and a user with no hub in the environment: the
// config file decides.
func configEnv(t *testing.T) (e *env, userConfig string) {
	e = newEnv(t)
	delete(e.vars, "FLEET_HUB")
	delete(e.vars, "FLEET_TOKEN")
	return e, filepath.Join(e.vars["HOME"], ".config", "fleet", "config")
}

// fails runs the CLI and checks that it exits 1 with want in its stderr.
func (e *env) fails(want string, args ...string) {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		e.t.Fatalf("fleet %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(args, " "), r.code, r.stderr, want)
	}
}

// TestConfigContextsWalkthrough goes through what an operator with two hubs
// does: add both, switch, pick one per command, inspect, delete.
func TestConfigContextsWalkthrough(t *testing.T) {
	e, cfg := configEnv(t)
	tokenFile := e.file("site-a.token", adminToken+"\n")
	const deadHub = "http://127.0.0.1:1"

	// Nothing yet.
	if r := e.run("", "config", "get-contexts"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "No contexts in "+cfg) {
		t.Fatalf("get-contexts of no file: %+v", r)
	}
	e.fails("current-context is not set in "+cfg, "config", "current-context")

	if out := e.ok("", "config", "set-context", "site-a", "--hub", e.url, "--token-file", tokenFile); out != "Context \"site-a\" created.\n" {
		t.Fatalf("set-context: %q", out)
	}
	if out := e.ok("dead-token\n", "config", "set-context", "lab", "--hub", deadHub, "--token-file", "-"); out != "Context \"lab\" created.\n" {
		t.Fatalf("set-context from stdin: %q", out)
	}
	if st, err := os.Stat(cfg); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, %v; want mode 0600", st, err)
	}

	// Contexts but none current, and no ./fleet-data: say how to pick one.
	e.fails(cfg+" has the contexts site-a, lab but no current-context", "get", "devices")

	if out := e.ok("", "config", "use-context", "site-a"); out != "Switched to context \"site-a\".\n" {
		t.Fatalf("use-context: %q", out)
	}
	if out := e.ok("", "config", "current-context"); out != "site-a\n" {
		t.Fatalf("current-context: %q", out)
	}
	e.ok("", "get", "devices")

	// --context and FLEET_CONTEXT pick another one for one command; the
	// hint names the context.
	wantHint := fmt.Sprintf("Nothing answers at %s (from context \"lab\" in %s)", deadHub, cfg)
	e.fails(wantHint, "--context", "lab", "get", "devices")
	e.vars["FLEET_CONTEXT"] = "lab"
	e.fails(wantHint, "get", "devices")
	e.ok("", "--context", "site-a", "get", "devices") // the flag beats the environment
	delete(e.vars, "FLEET_CONTEXT")
	e.fails(fmt.Sprintf(`context "site-b" (from --context) not found in %s; contexts: site-a, lab`, cfg), "--context", "site-b", "get", "devices")

	// Listing.
	lines := strings.Split(strings.TrimSpace(e.ok("", "config", "get-contexts")), "\n")
	want := [][]string{{"CURRENT", "NAME", "HUB"}, {"*", "site-a", e.url}, {"lab", deadHub}}
	if len(lines) != len(want) {
		t.Fatalf("get-contexts:\n%s", strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if got := strings.Fields(l); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("get-contexts line %d: %q, want the fields %q", i, l, want[i])
		}
	}
	if out := e.ok("", "config", "get-contexts", "-o", "name"); out != "site-a\nlab\n" {
		t.Errorf("-o name: %q", out)
	}
	for _, format := range []string{"json", "yaml"} {
		out := e.ok("", "config", "get-contexts", "lab", "-o", format)
		if strings.Contains(out, "dead-token") || !strings.Contains(out, client.RedactedText) || !strings.Contains(out, deadHub) || strings.Contains(out, e.url) {
			t.Errorf("get-contexts lab -o %s:\n%s", format, out)
		}
	}
	e.fails(`context "nope" not found in `+cfg, "config", "get-contexts", "nope")
	e.fails(`unknown output format "wide"`, "config", "get-contexts", "-o", "wide")

	// view redacts unless --raw.
	view := e.ok("", "config", "view")
	if strings.Contains(view, adminToken) || strings.Contains(view, "dead-token") || strings.Count(view, "token: "+client.RedactedText) != 2 || !strings.Contains(view, "current-context: site-a") {
		t.Errorf("view:\n%s", view)
	}
	if raw := e.ok("", "config", "view", "--raw", "-o", "json"); !strings.Contains(raw, adminToken) || !strings.Contains(raw, `"current-context": "site-a"`) {
		t.Errorf("view --raw -o json:\n%s", raw)
	}

	// set-context changes what it is given and keeps the rest.
	if out := e.ok("", "config", "set-context", "lab", "--hub", e.url); out != "Context \"lab\" modified.\n" {
		t.Fatalf("set-context --hub: %q", out)
	}
	e.fails("Unauthorized", "--context", "lab", "get", "devices") // its token is still dead-token
	e.ok("", "config", "set-context", "lab", "--token", adminToken)
	e.ok("", "--context", "lab", "get", "devices")
	e.fails(`context "new" is new: give its hub with --hub`, "config", "set-context", "new", "--token", "x")
	e.fails(`context "lab": nothing to change`, "config", "set-context", "lab")
	e.fails("scheme must be http or https", "config", "set-context", "lab", "--hub", "ftp://x")
	e.fails("if any flags in the group [token token-file] are set none of the others can be", "config", "set-context", "lab", "--token", "a", "--token-file", tokenFile)
	e.fails("is empty", "config", "set-context", "lab", "--token-file", e.file("empty.token", "\n"))
	e.fails("must not contain spaces", "config", "set-context", "a b", "--hub", e.url)

	// delete-context of the current one warns, and leaves none current.
	r := e.run("", "config", "delete-context", "site-a")
	if r.code != 0 || r.stdout != fmt.Sprintf("Deleted context \"site-a\" from %s.\n", cfg) || !strings.Contains(r.stderr, "warning: this removed the current context") {
		t.Fatalf("delete-context: %+v", r)
	}
	e.fails("current-context is not set", "config", "current-context")
	e.fails(`context "site-a" not found in `+cfg+"; contexts: lab", "config", "delete-context", "site-a")
	e.fails(`context "site-a" not found in `+cfg+"; contexts: lab", "config", "use-context", "site-a")

	// Completion offers the contexts.
	if out := e.ok("", "__complete", "config", "use-context", ""); !strings.HasPrefix(out, "lab\n") {
		t.Errorf("use-context completion:\n%s", out)
	}
	if out := e.ok("", "__complete", "get", "devices", "--context", ""); !strings.HasPrefix(out, "lab\n") {
		t.Errorf("--context completion:\n%s", out)
	}
}

// TestConfigImport adds the admin.conf of a hub started here as a context;
// with the user's config naming no context, ./fleet-data/admin.conf is used
// as before.
func TestConfigImport(t *testing.T) {
	e, cfg := configEnv(t)
	admin := e.file("fleet-data/admin.conf", fmt.Sprintf("# written by fleet-hub\nhub: %s\ntoken: %s\n", e.url, adminToken))
	if out := e.ok("", "config", "import", "here"); out != fmt.Sprintf("Context \"here\" created from %s.\n", admin) {
		t.Fatalf("import: %q", out)
	}
	c, err := client.ReadConfigFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cx, ok := c.Context("here"); !ok || cx.Hub != e.url || cx.Token != adminToken || c.CurrentContext != "" {
		t.Fatalf("imported %+v (current %q)", cx, c.CurrentContext)
	}
	// No context is current: ./fleet-data/admin.conf still works.
	e.ok("", "get", "devices")
	// --hub replaces the file's address; importing again modifies.
	if out := e.ok("", "config", "import", "here", "--from", admin, "--hub", "http://127.0.0.1:1"); out != fmt.Sprintf("Context \"here\" modified from %s.\n", admin) {
		t.Fatalf("import again: %q", out)
	}
	// A current context beats ./fleet-data.
	e.ok("", "config", "use-context", "here")
	e.fails("Nothing answers at http://127.0.0.1:1", "get", "devices")
	// So do the environment and flags.
	e.ok("", "get", "devices", "--hub", e.url, "--token", adminToken)
	e.vars["FLEET_HUB"], e.vars["FLEET_TOKEN"] = e.url, adminToken
	e.ok("", "get", "devices")
	delete(e.vars, "FLEET_HUB")
	delete(e.vars, "FLEET_TOKEN")

	e.fails("no such file", "config", "import", "x", "--from", filepath.Join(e.dir, "nope.conf"))
	e.fails("has no token", "config", "import", "x", "--from", e.file("notoken.conf", "hub: http://h:1\n"))
	e.fails("is the config file itself", "config", "import", "x", "--from", cfg)
}

// TestConfigFileFlagAndUnknownKeys: --config names the file the config
// commands edit, and what they do not know survives their edits.
func TestConfigFileFlagAndUnknownKeys(t *testing.T) {
	e, _ := configEnv(t)
	p := e.file("my.conf", fmt.Sprintf("future-setting: 7\ncontexts:\n- name: a\n  hub: %s\n  token: %s\n  certificate-authority-data: Q0EK\n", e.url, adminToken))
	e.ok("", "--config", p, "config", "use-context", "a")
	e.ok("", "--config", p, "get", "devices")
	e.vars["FLEET_CONFIG"] = p
	e.ok("", "config", "set-context", "b", "--hub", "http://b:1")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"future-setting: 7", "certificate-authority-data: Q0EK", "current-context: a", "name: b", "token: " + adminToken} {
		if !strings.Contains(string(b), kept) {
			t.Errorf("the file lost %q:\n%s", kept, b)
		}
	}
	if _, err := os.Stat(filepath.Join(e.vars["HOME"], ".config", "fleet", "config")); !os.IsNotExist(err) {
		t.Errorf("the default config file was written: %v", err)
	}
}
