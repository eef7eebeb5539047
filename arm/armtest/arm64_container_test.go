package armtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
	fleettest "github.com/fleetmq/fleet/test"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// TestArm64AgentConvergesArm64Container is the issue's "the arm64 agent
// converges a real arm64 container": the linux/arm64 fleet-agent from
// arm/build.sh, run through qemu-aarch64 (binfmt_misc), against a real
// fleet-hub on loopback and a private containerd, runs an arm64 image
// (imported for linux/arm64, its /app executed through binfmt too) and
// reports itself arm64 and converged.
func TestArm64AgentConvergesArm64Container(t *testing.T) {
	if err := EnsureBinfmt("qemu-aarch64"); err != nil {
		t.Fatal(err)
	}
	d := containerdtest.Start(t)
	const (
		device = "pi-arm64"
		ns     = "fleet-armtest-arm64"
		pod    = "arm-app"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The arm64 image, in the agent's namespace, unpacked for linux/arm64.
	tarPath, ref := testimage.Build(t, testimage.Options{Arch: "arm64"})
	nsCtx := namespaces.WithNamespace(ctx, ns)
	if _, err := testimage.Import(nsCtx, d.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	img, err := d.Client().GetImage(nsCtx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := images.Platforms(nsCtx, d.Client().ContentStore(), img.Target()); err != nil || len(ps) != 1 || ps[0].Architecture != "arm64" {
		t.Fatalf("imported image platforms %v, %v: want linux/arm64 only", ps, err)
	}

	h := fleettest.StartHub(t, fleettest.HubOptions{})
	t.Cleanup(fleettest.RemoveBinaries)
	token := addArmDevice(t, h, device)

	// The release binary, executed directly: the kernel hands it to
	// qemu-aarch64-static.
	bin := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := newLogWatcher()
	agent := exec.Command(bin, "--device", device, "--token-file", tokenFile, "--broker", h.MQTTURL, "--hub-signing-key", h.SigningKey,
		"--state-dir", t.TempDir(), "--containerd-socket", d.Socket(), "--namespace", ns, "--resync-interval", "5s")
	agent.Stdout, agent.Stderr = logs, logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = agent.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			// Stopping the agent leaves the container running; the
			// private containerd's cleanup kills it.
			_ = agent.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if waitErr != nil {
					t.Errorf("arm64 agent exit on SIGTERM: %v", waitErr)
				}
			case <-time.After(30 * time.Second):
				_ = agent.Process.Kill()
				<-exited
				t.Error("arm64 agent still running 30s after SIGTERM")
			}
		}
		if t.Failed() {
			t.Logf("arm64 agent log:\n%s", logs)
		}
	}()

	applyArm(t, h, fmt.Sprintf(`apiVersion: fleet/v1
kind: Deployment
metadata:
  name: %s
spec:
  selector:
    matchLabels:
      fleet/device: %s
  template:
    spec:
      containers:
      - name: app
        image: %s
`, pod, device, ref))

	// The hub's view: arm64, labelled so (the hub adds the label after
	// the report), converged with the pod running.
	dev := awaitArmDevice(t, h, device, exited, &waitErr, func(d schema.Device) bool {
		s := d.Status
		if s == nil || !s.Converged || s.Agent == nil || s.Agent.Arch != "arm64" || len(s.Pods) != 1 ||
			d.Metadata.Labels[schema.LabelArch] != "arm64" {
			return false
		}
		return s.Pods[0].Name == pod && s.Pods[0].Phase == schema.PhaseRunning && s.Pods[0].Ready
	})
	if dev.Status.Agent.OS != "linux" || dev.Status.Agent.Version != testVersion {
		t.Errorf("agent %+v, want linux, version %s (the build.sh binary)", dev.Status.Agent, testVersion)
	}

	// containerd's view: the pod's container, from the arm64 image, with
	// its task running.
	containers, err := d.Client().Containers(nsCtx, fmt.Sprintf("labels.%q==%s", runtime.LabelPod, pod))
	if err != nil || len(containers) != 1 {
		t.Fatalf("containers of pod %s: %d, %v", pod, len(containers), err)
	}
	c := containers[0]
	info, err := c.Info(nsCtx)
	if err != nil || info.Image != ref {
		t.Errorf("container image %q, %v; want %s", info.Image, err, ref)
	}
	task, err := c.Task(nsCtx, nil)
	if err != nil {
		t.Fatalf("task of %s: %v", c.ID(), err)
	}
	st, err := task.Status(nsCtx)
	if err != nil || st.Status != containerd.Running {
		t.Fatalf("task of %s: %+v, %v; want running", c.ID(), st, err)
	}
	// The process is the arm64 /app, run by the kernel through qemu.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", task.Pid()))
	if err != nil || !strings.Contains(string(cmdline), "/app") {
		t.Errorf("task %d cmdline %q, %v: want /app", task.Pid(), cmdline, err)
	}
	t.Logf("arm64 agent %+v converged; container %s (%s) task %d running: %q",
		*dev.Status.Agent, c.ID(), info.Image, task.Pid(), strings.ReplaceAll(string(cmdline), "\x00", " "))
}

// addArmDevice registers a device through the API and returns its token.
func addArmDevice(t *testing.T, h *fleettest.Hub, name string) string {
	t.Helper()
	applyArm(t, h, "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: "+name+"\n")
	code, body := h.Do(t, http.MethodPost, "/v1/devices/"+name+"/token", nil)
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(body, &cred); err != nil || code != http.StatusOK || cred.Token == "" {
		t.Fatalf("issue token: %d %s", code, body)
	}
	return cred.Token
}

func applyArm(t *testing.T, h *fleettest.Hub, manifest string) {
	t.Helper()
	if code, body := h.Do(t, http.MethodPost, "/v1/apply", []byte(manifest)); code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, body)
	}
}

// awaitArmDevice polls the hub until the device satisfies cond (the agent
// runs under emulation: allow minutes), failing early if the agent exits.
func awaitArmDevice(t *testing.T, h *fleettest.Hub, name string, exited <-chan struct{}, waitErr *error, cond func(schema.Device) bool) schema.Device {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var last []byte
	for {
		code, body := h.Do(t, http.MethodGet, "/v1/devices/"+name, nil)
		if code == http.StatusOK {
			var d schema.Device
			if err := json.Unmarshal(body, &d); err != nil {
				t.Fatal(err)
			}
			if cond(d) {
				return d
			}
			last = body
		}
		select {
		case <-exited:
			t.Fatalf("arm64 agent exited: %v", *waitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s not arm64, converged and running within 5m; last: %s", name, last)
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
}
