package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// outputEnv is a fake hub with the web deployment and four devices: pi-1
// (site=lab), pi-2 (site=a), pi-10 (site=b) and pi-3 (no site). pi-1 and
// pi-10 have reported: pi-1 runs web, pi-10 restarted it twice.
func outputEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	dev := func(name, site string) string {
		y := strings.ReplaceAll(deviceYAML, "pi-1", name)
		if site == "" {
			return strings.ReplaceAll(y, "  labels:\n    site: lab\n", "")
		}
		return strings.ReplaceAll(y, "site: lab", "site: "+site)
	}
	e.ok("", "apply", "-f", e.file("app.yaml", strings.Join([]string{webYAML, dev("pi-1", "lab"), dev("pi-2", "a"), dev("pi-10", "b"), dev("pi-3", "")}, "---\n")))
	now := time.Now()
	e.now = func() time.Time { return now }
	seen := now.Add(-3 * time.Second)
	for name, st := range map[string]*schema.DeviceObservedInfo{
		"pi-1": {Online: true, LastSeen: &seen, Agent: &schema.AgentInfo{Version: "v1.2.0", Arch: "arm64"},
			Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true}}},
		"pi-10": {Online: true, LastSeen: &seen, Agent: &schema.AgentInfo{Version: "v1.1.0", Arch: "amd64"},
			Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Restarts: 2}}},
	} {
		if err := e.hub.SetDeviceStatus(name, st); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestGetOutputFormats runs fleet get end to end against the fake hub
// with -o jsonpath, -o custom-columns, --sort-by and set-based -l.
func TestGetOutputFormats(t *testing.T) {
	e := outputEnv(t)
	tmpl := e.file("names.tmpl", `{range .items[*]}{.metadata.name}={.metadata.labels.site}{"\n"}{end}`)
	for _, tt := range []struct {
		args []string
		want string
	}{
		// The hub lists by name as text; --sort-by orders naturally.
		{[]string{"get", "devices", "-o", "jsonpath={.items[*].metadata.name}"}, "pi-1 pi-10 pi-2 pi-3"},
		{[]string{"get", "devices", "-o", "jsonpath={.items[*].metadata.name}", "--sort-by=.metadata.name"}, "pi-1 pi-2 pi-3 pi-10"},
		{[]string{"get", "devices", "-o", "name", "--sort-by", "{.metadata.name}"}, "device/pi-1\ndevice/pi-2\ndevice/pi-3\ndevice/pi-10\n"},
		{[]string{"get", "devices", "-o", "jsonpath-file=" + tmpl, "--sort-by=.metadata.name"}, "pi-1=lab\npi-2=a\npi-3=\npi-10=b\n"},
		{[]string{"get", "device", "pi-10", "-o", "jsonpath={.status.agent.version}"}, "v1.1.0"},
		{[]string{"get", "devices", "-o", "jsonpath={.items[?(@.status.online==true)].metadata.name}"}, "pi-1 pi-10"},
		{[]string{"get", "devices", "-o", "custom-columns=NAME:.metadata.name,SITE:.metadata.labels.site,ARCH:.status.agent.arch", "--sort-by=.metadata.name"}, "" +
			"NAME    SITE     ARCH\n" +
			"pi-1    lab      arm64\n" +
			"pi-2    a        <none>\n" +
			"pi-3    <none>   <none>\n" +
			"pi-10   b        amd64\n"},
		{[]string{"get", "devices", "-o", "custom-columns=NAME:metadata.name,AGENT:{.status.agent.version}", "--sort-by=.status.agent.version", "--no-headers"}, "" +
			"pi-2    <none>\n" +
			"pi-3    <none>\n" +
			"pi-10   v1.1.0\n" +
			"pi-1    v1.2.0\n"},
		{[]string{"get", "deployments", "-o", "custom-columns=NAME:.metadata.name,SELECTOR:.spec.selector.matchLabels.site,IMAGES:.spec.template.spec.containers[*].image"}, "" +
			"NAME   SELECTOR   IMAGES\n" +
			"web    lab        nginx:1.25\n"},
		{[]string{"get", "deployment/web", "device/pi-1", "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.name} {end}"}, "Deployment/web Device/pi-1 "},

		// Set-based selectors, checked locally and applied by the hub.
		{[]string{"get", "devices", "-l", "site!=lab", "-o", "name"}, "device/pi-10\ndevice/pi-2\ndevice/pi-3\n"},
		{[]string{"get", "devices", "-l", "site in (a,b)", "-o", "name", "--sort-by=.metadata.name"}, "device/pi-2\ndevice/pi-10\n"},
		{[]string{"get", "devices", "-l", "site notin (a,lab)", "-o", "name"}, "device/pi-10\ndevice/pi-3\n"},
		{[]string{"get", "devices", "-l", "!site", "-o", "name"}, "device/pi-3\n"},
		{[]string{"get", "devices", "-l", "site,site!=b", "-o", "name"}, "device/pi-1\ndevice/pi-2\n"},
		{[]string{"get", "devices", "-l", "site==lab", "-o", "name"}, "device/pi-1\n"},
		{[]string{"device", "list", "-l", "site in (a,b,lab)", "-o", "jsonpath={.items[*].metadata.name}", "--sort-by=.metadata.name"}, "pi-1 pi-2 pi-10"},

		// Pods: over the PodList, and sorted.
		{[]string{"get", "pods", "-o", "jsonpath={range .items[*]}{.device}/{.name} {.restarts}{\"\\n\"}{end}"}, "pi-1/web 0\npi-10/web 2\n"},
		{[]string{"get", "pods", "-o", "custom-columns=DEVICE:.device,RESTARTS:.restarts", "--sort-by=.restarts", "-l", "site in (lab,b)"}, "" +
			"DEVICE   RESTARTS\n" +
			"pi-1     0\n" +
			"pi-10    2\n"},
	} {
		if out := e.ok("", tt.args...); out != tt.want {
			t.Errorf("fleet %s:\n%s\nwant\n%s", strings.Join(tt.args, " "), out, tt.want)
		}
	}

	// An empty selection: jsonpath prints over the empty list, the
	// tables say so on stderr.
	if r := e.run("", "get", "devices", "-l", "site in (x)", "-o", "jsonpath={.kind}"); r.code != 0 || r.stdout != "DeviceList" || r.stderr != "" {
		t.Errorf("empty jsonpath: %+v", r)
	}
	if r := e.run("", "get", "devices", "-l", "site in (x)", "-o", "custom-columns=NAME:.metadata.name"); r.code != 0 || r.stdout != "" || r.stderr != "No resources found.\n" {
		t.Errorf("empty custom-columns: %+v", r)
	}
}

// TestGetOutputErrors: bad templates, sort paths and selectors are
// reported before any request reaches the hub.
func TestGetOutputErrors(t *testing.T) {
	e := outputEnv(t)
	before := len(e.hub.Requests())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "devices", "-o", "jsonpath={.items[*"}, "error parsing jsonpath {.items[*"},
		{[]string{"get", "devices", "-o", "jsonpath-file=" + e.dir + "/missing.tmpl"}, "-o jsonpath-file: open "},
		{[]string{"get", "devices", "-o", "custom-columns=NAME"}, "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"},
		{[]string{"get", "devices", "-o", "custom-columns=NAME:.metadata[", "-w"}, "custom-columns: column NAME: error parsing jsonpath .metadata["},
		{[]string{"get", "pods", "--sort-by", ".restarts["}, `--sort-by ".restarts[": error parsing jsonpath {.restarts[}`},
		{[]string{"get", "devices", "-l", "site!"}, `invalid label selector "site!": unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt`},
		{[]string{"get", "devices", "-l", "site>1"}, `invalid label selector "site>1": "site>1": operator "gt" is not supported for labels`},
		{[]string{"get", "pods", "-l", "a=b,"}, `invalid label selector "a=b,": found '', expected: identifier after ','`},
		{[]string{"delete", "devices", "-l", "site in a"}, `invalid label selector "site in a"`},
		{[]string{"describe", "devices", "-l", "=x"}, `invalid label selector "=x"`},
		{[]string{"events", "-l", "site notin"}, `invalid label selector "site notin"`},
		{[]string{"events", "-o", "jsonpath={.items}"}, "-o jsonpath is supported by fleet get only"},
	} {
		r := e.run("", tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
	if got := e.hub.Requests()[before:]; len(got) != 0 {
		t.Errorf("requests sent for bad arguments: %v", got)
	}
	// A sort path that no item has is found out once the list is read.
	r := e.run("", "get", "devices", "--sort-by=.spec.nothing")
	if r.code != 1 || !strings.Contains(r.stderr, `couldn't find any field with path ".spec.nothing" in the list of objects`) {
		t.Errorf("sort by a missing field: %+v", r)
	}
}

// TestSelectorVerbs: the other verbs that take -l send set-based
// selectors to the hub too.
func TestSelectorVerbs(t *testing.T) {
	e := outputEnv(t)
	out := e.ok("", "describe", "devices", "-l", "!site")
	if !strings.Contains(out, "pi-3") || strings.Contains(out, "pi-1") {
		t.Errorf("describe -l '!site':\n%s", out)
	}
	e.ok("", "delete", "devices", "-l", "site in (a,b)")
	got := e.ok("", "get", "devices", "-o", "jsonpath={.items[*].metadata.name}")
	if got != "pi-1 pi-3" {
		t.Errorf("after delete -l 'site in (a,b)': %q", got)
	}
}

// TestGetWatchCustomColumns: -w with custom columns prints the sorted
// list, then a row per change. (The fake hub gives a device that never
// reported no status at all, hence <none>.)
func TestGetWatchCustomColumns(t *testing.T) {
	e := outputEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, done := e.background(ctx, "get", "devices", "-w", "-l", "site!=lab", "--sort-by=.metadata.name",
		"-o", "custom-columns=NAME:.metadata.name,ONLINE:.status.online")
	waitFor(t, out, "pi-10")
	if err := e.hub.SetDeviceStatus("pi-3", &schema.DeviceObservedInfo{Online: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "pi-3    true")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch ended with exit %d after interrupt, want 0\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"NAME    ONLINE", "pi-2    <none>", "pi-3    <none>", "pi-10   true", "pi-3    true"}
	if !slices.Equal(lines, want) {
		t.Errorf("watch output:\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
}
