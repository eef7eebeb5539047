package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
)

// TestDemoManifests: the demo's manifests are valid, use only the locally
// built image, and target the demo's devices.
func TestDemoManifests(t *testing.T) {
	files, err := filepath.Glob("../fleet-examples/demo/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("demo manifests: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := schema.DecodeManifests(b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			d, ok := o.(*schema.Deployment)
			if !ok {
				t.Errorf("%s: %s, want only Deployments", f, o.GetTypeMeta().Kind)
				continue
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Image != "fleet.demo/app:v1" {
					t.Errorf("%s: container %s uses %s, not the demo's local image", f, c.Name, c.Image)
				}
			}
		}
	}
}

// TestDemoScript runs `demo.sh up` (on its own directory and free ports,
// with the binaries the tests built) and then `demo.sh down`, and checks
// that down leaves no process, container or mount behind.
func TestDemoScript(t *testing.T) {
	containerdtest.Require(t)
	bin := ""
	for _, name := range []string{"fleet", "fleet-hub", "fleet-agent"} {
		p, err := BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Dir(p)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "test", "demo", "demo.sh")
	dir := filepath.Join(t.TempDir(), ".demo")
	env := append(os.Environ(),
		"FLEET_DEMO_DIR="+dir, "FLEET_DEMO_BIN="+bin,
		fmt.Sprintf("FLEET_DEMO_HTTP_ADDR=127.0.0.1:%d", freeTCPPort(t)),
		fmt.Sprintf("FLEET_DEMO_MQTT_ADDR=127.0.0.1:%d", freeTCPPort(t)),
		fmt.Sprintf("FLEET_DEMO_HTTPS_ADDR=127.0.0.1:%d", freeTCPPort(t)),
		fmt.Sprintf("FLEET_DEMO_MQTTS_ADDR=127.0.0.1:%d", freeTCPPort(t)),
		fmt.Sprintf("FLEET_DEMO_DISPLAY_ADDR=127.0.0.1:%d", freeTCPPort(t)))
	run := func(t *testing.T, timeout time.Duration, cred *syscall.Credential, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
		cmd.Env = env
		cmd.Dir = root
		if cred != nil {
			// Another user may not read the working tree: run a copy of
			// the script from a world-readable directory.
			pub, err := os.MkdirTemp("", "fleet-demo-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(pub)
			b, err := os.ReadFile(script)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(pub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pub, "demo.sh"), b, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd.Args[1], cmd.Dir = filepath.Join(pub, "demo.sh"), pub
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("demo.sh %s: %v in %v", strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond))
		return out.String(), err
	}

	t.Run("needs root", func(t *testing.T) {
		out, err := run(t, time.Minute, &syscall.Credential{Uid: 65534, Gid: 65534}, "up")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "needs root") || !strings.Contains(out, "sudo make demo") {
			t.Fatalf("demo.sh up as nobody: %v\n%s", err, out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("demo.sh up as nobody created %s (%v)", dir, err)
		}
	})

	t.Run("up then down", func(t *testing.T) {
		downDone := false
		t.Cleanup(func() {
			if !downDone {
				if out, err := run(t, 2*time.Minute, nil, "down"); err != nil {
					t.Errorf("demo.sh down (cleanup): %v\n%s", err, out)
				}
			}
		})
		out, err := run(t, 4*time.Minute, nil, "up")
		if err != nil {
			logs, _ := exec.Command("bash", "-c", "tail -n 30 "+dir+"/logs/*.log").CombinedOutput()
			t.Fatalf("demo.sh up: %v\n%s\nlogs:\n%s", err, out, logs)
		}
		for _, want := range []string{
			"imported fleet.demo/app:v1 into namespace fleet-demo-pi-3",
			"deployment/sensor-collector created",
			"with: ok",
			"demo-pi-1   true     Running   true    1",
			"demo-pi-3   false",
			"heartbeat          3          3         3       0         2",
			"The demo keeps running",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("demo.sh up output lacks %q:\n%s", want, out)
			}
		}
		// Everything it started still runs.
		pids, err := os.ReadFile(filepath.Join(dir, "pids"))
		if err != nil {
			t.Fatal(err)
		}
		var started []string
		sc := bufio.NewScanner(bytes.NewReader(pids))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				t.Fatalf("pids line %q", sc.Text())
			}
			started = append(started, f[0])
			if _, err := os.Stat("/proc/" + f[1]); err != nil {
				t.Errorf("%s (pid %s) does not run after up", f[0], f[1])
			}
		}
		if want := "agent-demo-pi-1 agent-demo-pi-2 agent-demo-pi-3 containerd hub"; strings.Join(slices.Sorted(slices.Values(started)), " ") != want {
			t.Errorf("pids records %v, want %s", started, want)
		}
		sock, err := os.ReadFile(filepath.Join(dir, "socket"))
		if err != nil {
			t.Fatal(err)
		}

		out, err = run(t, 2*time.Minute, nil, "down")
		downDone = true
		if err != nil || !strings.Contains(out, "no demo process, container or mount is left") {
			t.Fatalf("demo.sh down: %v\n%s", err, out)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists after down (%v)", dir, err)
		}
		// Checked here too, not only by the script.
		for _, p := range procsMentioning(t, dir+"/", strings.TrimSpace(string(sock))) {
			t.Errorf("still running after down: %s", p)
		}
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(mi, []byte(" "+dir+"/")) {
			t.Errorf("still mounted under %s after down", dir)
		}
		if out, err := run(t, time.Minute, nil, "down"); err != nil {
			t.Errorf("a second down: %v\n%s", err, out)
		}
	})
}

// procsMentioning lists the processes whose command line contains any of
// subs.
func procsMentioning(t *testing.T, subs ...string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cl := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		for _, s := range subs {
			if s != "" && strings.Contains(cl, s) {
				out = append(out, e.Name()+": "+cl)
				break
			}
		}
	}
	return out
}
