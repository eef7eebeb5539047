package test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/test/sysdeps"
)

// TestE2ESecrets: a real hub and two real agents on containerd. A
// Secret's value reaches, as an environment variable, the container of
// the one device whose pod uses it (sealed to that device's key on the
// way), with a ConfigMap's keys beside it; a new value replaces that
// container and gives no other device a new generation; the value never
// appears in an API answer, the CLI's output, the hub's logs, the hub's
// store files, or any MQTT payload a mosquitto_sub with the hub's own
// credentials sees on the external broker.
func TestE2ESecrets(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Broker: BrokerMosquitto, Labels: func(i int) map[string]string {
		if i == 0 {
			return map[string]string{"role": "gw"}
		}
		return map[string]string{"role": "other"}
	}})
	value := "e2e-" + randomHex(t, 12)
	const dep = "e2e-secrets"
	sniffed := sniffMQTT(t, f)
	manifest := func(v string) string {
		return `apiVersion: fleet/v1
kind: Secret
metadata: {name: e2e-creds}
stringData: {token: ` + v + `}
---
apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: e2e-gw}
data: {MODE: fast}
---
apiVersion: fleet/v1
kind: Deployment
metadata: {name: ` + dep + `}
spec:
  selector: {matchLabels: {role: gw}}
  template:
    spec:
      containers:
      - name: app
        image: ` + f.Image + `
        args: [sleep, forever]
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: e2e-creds, key: token}}
        envFrom:
        - configMapRef: {name: e2e-gw}
`
	}
	// The apply answer: the value neither in clear nor as base64 (the
	// JSON of a Secret's data).
	inClear := func(b []byte, v string) bool {
		return bytes.Contains(b, []byte(v)) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString([]byte(v))))
	}
	for _, r := range f.Apply(t, manifest(value)) {
		if inClear(r.Object, value) {
			t.Errorf("the apply answer carries the value: %s", r.Object)
		}
	}
	// On the wire, whether or not the device can use it: the desired
	// state carrying the Secret crossed the external broker with the
	// value sealed (neither in clear nor as base64).
	awaitf(t, e2eConverge, func() bool { return strings.Contains(sniffed(), `"secrets":[{"name":"e2e-creds"`) },
		"mosquitto_sub saw no desired state carrying the Secret")
	if inClear([]byte(sniffed()), value) {
		t.Fatal("a desired state on the external broker carries the secret value in clear or base64")
	}
	f.AwaitRollout(t, dep, 1, e2eConverge)
	c := f.AwaitContainerRunning(t, "dev-1", dep)
	env := environ(t, c.PID)
	if env["TOKEN"] != value || env["MODE"] != "fast" {
		t.Fatalf("container environment: TOKEN %q MODE %q", env["TOKEN"], env["MODE"])
	}
	f.AwaitNoContainer(t, "dev-2", dep)

	// A new value: dev-1's container is replaced with it; dev-2, whose
	// pods do not use the Secret, gets no new generation.
	devs := f.AwaitConverged(t, e2eConverge)
	gen1, gen2 := devs["dev-1"].Status.DesiredGeneration, devs["dev-2"].Status.DesiredGeneration
	value2 := value + "-2"
	for _, r := range f.Apply(t, manifest(value2)) {
		if inClear(r.Object, value2) {
			t.Errorf("the apply answer carries the new value: %s", r.Object)
		}
	}
	f.AwaitContainers(t, "dev-1", e2eConverge, "running with the new value", func(cs []Container) bool {
		for _, c := range cs {
			if c.Pod == dep && c.PID != 0 && environ(t, c.PID)["TOKEN"] == value2 {
				return true
			}
		}
		return false
	})
	devs = f.AwaitConverged(t, e2eConverge)
	if g := devs["dev-1"].Status.DesiredGeneration; g != gen1+1 {
		t.Errorf("dev-1: generation %d after the change, want %d", g, gen1+1)
	}
	if g := devs["dev-2"].Status.DesiredGeneration; g != gen2 {
		t.Errorf("dev-2 does not use the secret but went from generation %d to %d", gen2, g)
	}
	// Applying it again changes nothing.
	out, errOut, err := f.RunCLI(t, manifest(value2), "apply", "-f", "-")
	if err != nil || out != "secret/e2e-creds unchanged\nconfigmap/e2e-gw unchanged\ndeployment/e2e-secrets unchanged\n" {
		t.Errorf("re-apply: %v\n%s%s", err, out, errOut)
	}

	// What people see: keys and sizes.
	out = f.CLI(t, "get", "secrets")
	if !strings.Contains(out, "e2e-creds   Opaque   1      ") {
		t.Errorf("fleet get secrets:\n%s", out)
	}
	out += f.CLI(t, "get", "secret", "e2e-creds", "-o", "yaml") + f.CLI(t, "describe", "secret", "e2e-creds")
	if !strings.Contains(out, fmt.Sprintf("token:  %d bytes", len(value2))) {
		t.Errorf("fleet describe secret:\n%s", out)
	}
	for _, v := range []string{value, value2, base64.StdEncoding.EncodeToString([]byte(value2))} {
		if strings.Contains(out, v) {
			t.Errorf("the CLI shows a secret value:\n%s", out)
		}
		if strings.Contains(f.Hub.Logs(), v) {
			t.Error("the hub logged a secret value")
		}
	}
	// On the wire: the sniffer saw the desired states with the sealed
	// Secret, and never a value.
	wire := sniffed()
	if !strings.Contains(wire, `"secrets":[{"name":"e2e-creds"`) {
		t.Errorf("mosquitto_sub saw no desired state carrying the sealed Secret:\n%.2000s", wire)
	}
	for _, v := range []string{value, value2, base64.StdEncoding.EncodeToString([]byte(value)), base64.StdEncoding.EncodeToString([]byte(value2))} {
		if strings.Contains(wire, v) {
			t.Errorf("an MQTT payload carries a secret value in clear or base64")
		}
	}
	f.CLI(t, "delete", "deployment", dep)
	f.AwaitNoContainer(t, "dev-1", dep)
	f.CLI(t, "delete", "secret", "e2e-creds")
	f.CLI(t, "delete", "configmap", "e2e-gw")

	// The store's files, with the hub stopped.
	f.StopHub(t)
	defer f.StartHub(t)
	err = filepath.WalkDir(filepath.Join(f.Hub.DataDir, "store"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, v := range []string{value, value2} {
			if bytes.Contains(b, []byte(v)) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString([]byte(v)))) {
				t.Errorf("%s holds a secret value", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(f.Hub.DataDir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the store key file: %v %v", fi, err)
	}
}

// sniffMQTT runs mosquitto_sub with the hub's credentials on every Fleet
// topic of the fleet's Mosquitto and returns what it printed so far
// (topic and payload per line).
func sniffMQTT(t *testing.T, f *Fleet) func() string {
	t.Helper()
	bin, err := sysdeps.Path("mosquitto_sub")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(f.Mosquitto.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd := exec.Command(bin, "-h", u.Hostname(), "-p", u.Port(), "-u", "fleet-hub", "-P", f.hubPassword,
		"-i", "e2e-sniffer", "-v", "-t", "fleet/v1/#")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return out.String
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
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

// environ returns the environment of a process.
func environ(t testing.TB, pid uint32) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil // it just exited: the caller polls again
	}
	out := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			out[k] = v
		}
	}
	return out
}
