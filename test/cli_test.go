package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// TestCLI runs the fleet binary against a real fleet-hub (its own data
// directory, real TCP, real Badger): apply, get, describe, diff, delete,
// watch and the refusal of invalid manifests. The subtests share one hub
// and run in order.
func TestCLI(t *testing.T) {
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	hub := StartHub(t, HubOptions{})
	f := &fleetCLI{t: t, bin: bin, env: []string{"FLEET_CONFIG=" + hub.AdminConfig()}}
	app := cliTestdata(t, "cli/app.yaml")

	t.Run("apply creates", func(t *testing.T) {
		f := f.on(t)
		out := f.ok("apply", "-f", app)
		if want := "deployment/web created\ndevice/pi-kitchen created\ndevice/pi-garage created\n"; out != want {
			t.Fatalf("got\n%s\nwant\n%s", out, want)
		}
		// A directory: its .yaml/.yml/.json files in name order.
		out = f.ok("apply", "-f", cliTestdata(t, "cli/dir"))
		if want := "deployment/telemetry created\ndevice/sensor-1 created\n"; out != want {
			t.Fatalf("apply DIR: got\n%s\nwant\n%s", out, want)
		}
	})

	t.Run("apply again is unchanged", func(t *testing.T) {
		f := f.on(t)
		var before schema.Deployment
		f.json(&before, "get", "deployment", "web", "-o", "json")
		if out := f.ok("apply", "-f", app); out != "deployment/web unchanged\ndevice/pi-kitchen unchanged\ndevice/pi-garage unchanged\n" {
			t.Fatalf("second apply:\n%s", out)
		}
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		f.json(&list, "apply", "-f", app, "-o", "json")
		if list.Kind != "List" || len(list.Items) != 3 {
			t.Fatalf("apply -o json: %+v", list)
		}
		var after schema.Deployment
		if err := json.Unmarshal(list.Items[0], &after); err != nil {
			t.Fatal(err)
		}
		if after.Metadata.Name != "web" || after.Metadata.Generation != before.Metadata.Generation || after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
			t.Fatalf("unchanged apply moved generation %d->%d or resourceVersion %s->%s",
				before.Metadata.Generation, after.Metadata.Generation, before.Metadata.ResourceVersion, after.Metadata.ResourceVersion)
		}
	})

	t.Run("diff then apply a change", func(t *testing.T) {
		f := f.on(t)
		changed := f.write("web-1.26.yaml", strings.Replace(cliReadTestdata(t, "cli/app.yaml"), "nginx:1.25-alpine", "nginx:1.26-alpine", 1))
		r := f.run("", "diff", "-f", changed)
		if r.code != 1 || !strings.Contains(r.stdout, "-        image: docker.io/library/nginx:1.25-alpine\n+        image: docker.io/library/nginx:1.26-alpine\n") {
			t.Fatalf("diff: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "device/") {
			t.Fatalf("unchanged devices show in the diff:\n%s", r.stdout)
		}
		var before schema.Deployment
		f.json(&before, "get", "deploy", "web", "-o", "json")
		if out := f.ok("apply", "-f", changed, "--dry-run=server"); !strings.HasPrefix(out, "deployment/web configured (server dry run)\n") {
			t.Fatalf("dry run:\n%s", out)
		}
		if out := f.ok("apply", "-f", changed); !strings.HasPrefix(out, "deployment/web configured\ndevice/pi-kitchen unchanged\n") {
			t.Fatalf("apply change:\n%s", out)
		}
		var after schema.Deployment
		f.json(&after, "get", "deploy", "web", "-o", "json")
		if after.Metadata.Generation != before.Metadata.Generation+1 {
			t.Fatalf("generation %d -> %d, want +1", before.Metadata.Generation, after.Metadata.Generation)
		}
		if r := f.run("", "diff", "-f", changed); r.code != 0 || r.stdout != "" {
			t.Fatalf("diff after apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		// A new object is all added.
		r = f.run("", "diff", "-f", f.write("new.yaml", strings.Replace(cliMinimalDeployment, "name: broken", "name: newcomer", 1)))
		if r.code != 1 || !strings.HasPrefix(r.stdout, "--- /dev/null\n") || strings.Contains(r.stdout, "\n-") {
			t.Fatalf("diff of a new object: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("get", func(t *testing.T) {
		f := f.on(t)
		out := f.ok("get", "deployments")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME        TARGETED   UPDATED   READY   PENDING   GENERATION   AGE") ||
			!strings.HasPrefix(lines[1], "telemetry   ") || !strings.HasPrefix(lines[2], "web         ") {
			t.Fatalf("get deployments:\n%s", out)
		}
		out = f.ok("get", "deploy", "web", "-o", "wide")
		for _, w := range []string{"SELECTOR", "IMAGES", "STRATEGY", "site=lab", "docker.io/library/nginx:1.26-alpine", "RollingUpdate"} {
			if !strings.Contains(out, w) {
				t.Errorf("get -o wide: no %q in\n%s", w, out)
			}
		}
		// Devices no agent has reported from yet.
		out = f.ok("get", "devices", "-l", "site=lab")
		want := "NAME         ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE\n"
		if !strings.HasPrefix(out, want) || !strings.Contains(out, "\npi-garage    false    <never>     0/") || !strings.Contains(out, "\npi-kitchen   false    <never>     0/") || strings.Contains(out, "sensor-1") {
			t.Fatalf("get devices -l site=lab:\n%s", out)
		}
		if out := f.ok("get", "dev", "-o", "wide"); !strings.Contains(out, "fleet/device=pi-kitchen,room=kitchen,site=lab") {
			t.Fatalf("get devices -o wide:\n%s", out)
		}
		var l schema.DeviceList
		f.json(&l, "get", "devices", "-o", "json")
		if l.Kind != "DeviceList" || len(l.Items) != 3 || l.Metadata.ResourceVersion == "" {
			t.Fatalf("get devices -o json: %+v", l)
		}
		for _, d := range l.Items {
			if d.Metadata.Labels[schema.LabelDevice] != d.Metadata.Name {
				t.Errorf("device %s lacks its %s label: %v", d.Metadata.Name, schema.LabelDevice, d.Metadata.Labels)
			}
		}
		out = f.ok("get", "device", "pi-kitchen", "-o", "yaml")
		if !strings.Contains(out, "kind: Device\n") || !strings.Contains(out, "description: Raspberry Pi 4 in the kitchen") {
			t.Fatalf("get device -o yaml:\n%s", out)
		}
		if out := f.ok("get", "deployments", "-o", "name"); out != "deployment/telemetry\ndeployment/web\n" {
			t.Fatalf("get -o name:\n%s", out)
		}
		r := f.run("", "get", "deployment", "nope")
		if r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("get missing: exit %d, stderr %s", r.code, r.stderr)
		}
	})

	t.Run("describe", func(t *testing.T) {
		f := f.on(t)
		out := f.ok("describe", "deployment", "web")
		for _, w := range []string{"Name:", "web", "Selector:", "site=lab", "Strategy:", "RollingUpdate", "docker.io/library/nginx:1.26-alpine",
			"MODE:", "production", "/usr/share/nginx/html from /var/lib/web (ro)", "memory:", "64Mi", "cpu:", "250m", "pi-garage", "pi-kitchen"} {
			if !strings.Contains(out, w) {
				t.Errorf("describe deployment: no %q in\n%s", w, out)
			}
		}
		out = f.ok("describe", "device", "pi-garage")
		for _, w := range []string{"Name:", "pi-garage", "room=garage", "<never>", "Deployments:", "telemetry, web"} {
			if !strings.Contains(out, w) {
				t.Errorf("describe device: no %q in\n%s", w, out)
			}
		}
	})

	t.Run("watch", func(t *testing.T) {
		f := f.on(t)
		w := f.start("get", "deployments", "-w", "-o", "json", "--output-watch-events")
		type event struct {
			Type   string            `json:"type"`
			Object schema.Deployment `json:"object"`
		}
		next := func() event {
			t.Helper()
			var ev event
			if err := w.dec.Decode(&ev); err != nil {
				t.Fatalf("watch output: %v (stderr: %s)", err, w.stderr.String())
			}
			return ev
		}
		for range 2 {
			if ev := next(); ev.Type != schema.WatchAdded {
				t.Fatalf("initial event %s %s", ev.Type, ev.Object.Metadata.Name)
			}
		}
		f.ok("apply", "-f", f.write("tele.yaml", strings.Replace(cliReadTestdata(t, "cli/dir/10-telemetry.yaml"), "busybox:1.36", "busybox:1.37", 1)))
		ev := next()
		if ev.Type != schema.WatchModified || ev.Object.Metadata.Name != "telemetry" || ev.Object.Spec.Template.Spec.Containers[0].Image != "busybox:1.37" {
			t.Fatalf("change event: %s %s", ev.Type, ev.Object.Metadata.Name)
		}
		w.stop()
	})

	t.Run("invalid manifests are refused", func(t *testing.T) {
		f := f.on(t)
		before := f.ok("get", "deployments", "-o", "name")
		for _, tt := range []struct {
			name, content string
			field         string
		}{
			{"bad name", strings.Replace(cliMinimalDeployment, "name: broken", "name: Broken_Name", 1), "metadata.name"},
			{"missing image", strings.Replace(cliMinimalDeployment, "        image: busybox:1.36\n", "", 1), "spec.template.spec.containers[0].image: required"},
			{"unknown field", strings.Replace(cliMinimalDeployment, "        image: busybox:1.36\n", "        image: busybox:1.36\n        imagePolicy: Always\n", 1), "spec.template.spec.containers[0].imagePolicy: unknown field"},
			{"negative memory", strings.Replace(cliMinimalDeployment, "memory: 16Mi", "memory: -1Mi", 1), "spec.template.spec.containers[0].resources.limits.memory"},
			{"wrong apiVersion", strings.Replace(cliMinimalDeployment, "apiVersion: fleet/v1", "apiVersion: apps/v1", 1), "apiVersion"},
			{"binary garbage", "\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\xfd", "not text"},
		} {
			file := f.write("broken.yaml", tt.content)
			r := f.run("", "apply", "-f", file)
			if r.code == 0 {
				t.Errorf("%s: apply exited 0:\n%s", tt.name, r.stdout)
			}
			if !strings.Contains(r.stderr, file+": ") || !strings.Contains(r.stderr, tt.field) {
				t.Errorf("%s: stderr does not name the file and %q:\n%s", tt.name, tt.field, r.stderr)
			}
		}
		if after := f.ok("get", "deployments", "-o", "name"); after != before {
			t.Fatalf("an invalid apply stored something: before\n%s\nafter\n%s", before, after)
		}
		if r := f.run("", "get", "deployment", "broken"); r.code == 0 {
			t.Fatalf("deployment/broken exists:\n%s", r.stdout)
		}
	})

	t.Run("the hub refuses what the CLI would", func(t *testing.T) {
		// Past the CLI's own checks: the hub validates too, all or nothing.
		cl, err := client.New(hub.URL, hub.Token)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		good := strings.Replace(cliMinimalDeployment, "name: broken", "name: good-one", 1)
		bad := strings.Replace(cliMinimalDeployment, "memory: 16Mi", "memory: -1Mi", 1)
		_, err = cl.Apply(ctx, []byte(good+"---\n"+bad), false)
		if !client.IsInvalid(err) || !strings.Contains(err.Error(), "resources.limits.memory") {
			t.Fatalf("hub accepted an invalid manifest: %v", err)
		}
		if _, err := cl.GetDeployment(ctx, "good-one"); !client.IsNotFound(err) {
			t.Fatalf("the valid half of a refused apply was stored: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		f := f.on(t)
		if out := f.ok("delete", "-f", cliTestdata(t, "cli/dir")); out != "deployment/telemetry deleted\ndevice/sensor-1 deleted\n" {
			t.Fatalf("delete -f DIR:\n%s", out)
		}
		if out := f.ok("delete", "deployment", "web"); out != "deployment/web deleted\n" {
			t.Fatalf("delete NAME:\n%s", out)
		}
		r := f.run("", "delete", "deployment", "web")
		if r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Fatalf("delete again: exit %d, stderr %s", r.code, r.stderr)
		}
		if r := f.run("", "delete", "deployment", "web", "--ignore-not-found"); r.code != 0 {
			t.Fatalf("--ignore-not-found: exit %d, stderr %s", r.code, r.stderr)
		}
		r = f.run("", "get", "deployments")
		if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "No resources found") {
			t.Fatalf("get after delete: %+v", r)
		}
		if out := f.ok("delete", "devices", "-l", "site=lab"); out != "device/pi-garage deleted\ndevice/pi-kitchen deleted\n" {
			t.Fatalf("delete -l:\n%s", out)
		}
	})

	t.Run("config from ./fleet-data and stdin", func(t *testing.T) {
		// A hub started in a directory leaves fleet-data/admin.conf
		// there; fleet run in that directory needs no flags.
		g := &fleetCLI{t: t, bin: f.bin, dir: filepath.Dir(hub.DataDir)}
		if filepath.Base(hub.DataDir) != "fleet-data" {
			t.Fatalf("hub data dir %s is not named fleet-data", hub.DataDir)
		}
		if r := g.run(cliMinimalDeployment, "apply", "-f", "-"); r.code != 0 || r.stdout != "deployment/broken created\n" {
			t.Fatalf("apply from stdin with ./fleet-data/admin.conf: %+v", r)
		}
		g.ok("delete", "deployment", "broken")
		// Nowhere to find a hub.
		h := &fleetCLI{t: t, bin: f.bin, dir: t.TempDir()}
		r := h.run("", "get", "devices")
		if r.code == 0 || !strings.Contains(r.stderr, "no hub configured") {
			t.Fatalf("no config: %+v", r)
		}
		// A wrong token is refused and not printed.
		r = h.run("", "get", "devices", "--hub", hub.URL, "--token", "not-the-token-QQ")
		if r.code == 0 || !strings.Contains(r.stderr, "Unauthorized") || strings.Contains(r.stderr, "QQ") || strings.Contains(r.stderr, hub.Token) {
			t.Fatalf("wrong token: %+v", r)
		}
	})
}

const cliMinimalDeployment = `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: broken
spec:
  selector:
    matchLabels:
      site: nowhere
  template:
    spec:
      containers:
      - name: main
        image: busybox:1.36
        resources:
          limits:
            memory: 16Mi
`

func cliTestdata(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cliReadTestdata(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(cliTestdata(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fleetCLI runs the fleet binary.
type fleetCLI struct {
	t   *testing.T
	bin string
	env []string
	dir string
}

// on returns the same CLI reporting to a subtest.
func (f *fleetCLI) on(t *testing.T) *fleetCLI {
	c := *f
	c.t = t
	return &c
}

type cliResult struct {
	stdout, stderr string
	code           int
}

func (f *fleetCLI) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env = append(cleanEnv(f.t.TempDir()), f.env...)
	cmd.Dir = f.dir
	return cmd
}

func (f *fleetCLI) run(stdin string, args ...string) cliResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 60*time.Second)
	defer cancel()
	cmd := f.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		f.t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

func (f *fleetCLI) ok(args ...string) string {
	f.t.Helper()
	r := f.run("", args...)
	if r.code != 0 {
		f.t.Fatalf("fleet %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (f *fleetCLI) json(v any, args ...string) {
	f.t.Helper()
	out := f.ok(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		f.t.Fatalf("fleet %s: %v in\n%s", strings.Join(args, " "), err, out)
	}
}

func (f *fleetCLI) write(name, content string) string {
	f.t.Helper()
	p := filepath.Join(f.t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// cliProcess is a fleet process left running (get -w).
type cliProcess struct {
	cmd    *exec.Cmd
	dec    *json.Decoder
	stderr *bytes.Buffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs fleet in the background; its stdout is decoded as a stream of
// JSON values. A read that blocks is ended by the test's deadline (the
// process is killed when the test ends).
func (f *fleetCLI) start(args ...string) *cliProcess {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 60*time.Second)
	cmd := f.command(ctx, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	r := &cliProcess{cmd: cmd, dec: json.NewDecoder(bufio.NewReader(stdout)), stderr: &errb, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	f.t.Cleanup(r.stop)
	return r
}

// stop interrupts the process (as Ctrl-C would) and waits for it; a
// process that does not stop is killed.
func (r *cliProcess) stop() {
	r.once.Do(func() {
		r.cmd.Process.Signal(os.Interrupt)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			r.cancel()
			<-r.done
		}
		r.cancel()
	})
}
