package armtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/selfupdate"
	"github.com/fleetmq/fleet/schema"
	fleettest "github.com/fleetmq/fleet/test"
	"github.com/fleetmq/fleet/test/containerdtest"
)

// upgradeVersion is the release the arm agents are upgraded to: after
// testVersion, within the test hub's version-skew policy.
const upgradeVersion = testVersion + ".b"

// TestArmAgentUpgradeUnderQemu is the issue's "arm64 and armv7 agents
// upgraded under qemu": the arm/build.sh agent of each, installed in an
// upgrade layout and run through binfmt_misc against a real fleet-hub and
// a private containerd, is moved by an AgentRollout to another build of
// its architecture, pulled as a linux/arm64 or linux/arm/v7 image: the
// trial child and the exec of the new current run under qemu too. The
// device reports the new version, Updated from the old one, in the same
// process.
func TestArmAgentUpgradeUnderQemu(t *testing.T) {
	t.Cleanup(fleettest.RemoveBinaries)
	for _, arch := range []string{"arm64", "armv7"} {
		t.Run(arch, func(t *testing.T) { armUpgrade(t, targetByArch(t, arch)) })
	}
}

func armUpgrade(t *testing.T, tg target) {
	handler, variant := "qemu-aarch64", ""
	if tg.goarch == "arm" {
		handler, variant = "qemu-arm", "v"+tg.goarm
	}
	if err := EnsureBinfmt(handler); err != nil {
		t.Fatal(err)
	}
	d := containerdtest.Start(t)
	h := fleettest.StartHub(t, fleettest.HubOptions{})
	device := "pi-up-" + tg.arch
	token := addArmDevice(t, h, device)

	// A: the release binary, installed as install.sh does.
	aBin := readFile(t, binPath(t, "fleet-agent", tg))
	l := selfupdate.Layout{Dir: filepath.Join(t.TempDir(), "lib")}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Stage(testVersion, fleettest.Sha256Digest(aBin), bytes.NewReader(aBin)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCurrent(testVersion); err != nil {
		t.Fatal(err)
	}
	bBin := buildArmAgent(t, tg, upgradeVersion)
	reg := fleettest.StartCountingRegistry(t)
	ref, digest, layer := reg.PushAgentImageFor(t, "fleet/agent:"+upgradeVersion, bBin, tg.goarch, variant)

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := newLogWatcher()
	agent := exec.Command(l.Current(), "--device", device, "--token-file", tokenFile, "--broker", h.MQTTURL, "--hub-signing-key", h.SigningKey,
		"--state-dir", t.TempDir(), "--containerd-socket", d.Socket(), "--namespace", "fleet-armtest-up", "--resync-interval", "5s",
		"--upgrade-dir", l.Dir, "--upgrade-trial-deadline", "5m", "--log-level", "debug")
	agent.Stdout, agent.Stderr = logs, logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = agent.Wait(); close(exited) }()
	defer stopArmAgent(t, agent, exited, &waitErr, logs)

	awaitArmDevice(t, h, device, exited, &waitErr, func(d schema.Device) bool {
		return d.Status != nil && d.Status.Online && d.Status.Agent != nil && d.Status.Agent.Version == testVersion
	})
	start := time.Now()
	applyArm(t, h, fmt.Sprintf(`apiVersion: fleet/v1
kind: AgentRollout
metadata: {name: fleet-%s}
spec:
  version: %s
  image: %s
  artifacts: [{arch: %s, digest: "%s"}]
  selector: {matchLabels: {fleet/device: %s}}
`, tg.arch, upgradeVersion, ref, tg.goarch, digest, device))
	dev := awaitArmDevice(t, h, device, exited, &waitErr, func(d schema.Device) bool {
		s := d.Status
		return s != nil && s.Online && s.Agent != nil && s.Agent.Version == upgradeVersion && s.Agent.Upgrade != nil &&
			s.Agent.Upgrade.Phase == schema.AgentUpgradeUpdated && s.Agent.Upgrade.Previous == testVersion
	})
	took := time.Since(start)
	if a := dev.Status.Agent; a.Arch != tg.goarch {
		t.Errorf("the upgraded agent reports arch %s, want %s", a.Arch, tg.goarch)
	}
	if v, _ := l.CurrentVersion(); v != upgradeVersion {
		t.Errorf("current is %q, want %s", v, upgradeVersion)
	}
	if v, _ := l.NextVersion(); v != "" {
		t.Errorf("next still names %s", v)
	}
	t.Logf("BENCH agentupgrade %s under qemu: %v from the AgentRollout's apply to the device reporting %s Updated; %d bytes pulled (layer %d, binary %d)",
		tg.arch, took.Round(time.Millisecond), upgradeVersion, reg.Served("fleet/agent"), layer, len(bBin))
}

// buildArmAgent cross-builds fleet-agent for tg stamped version, as
// arm/build.sh builds a release.
func buildArmAgent(t *testing.T, tg target, version string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fleet-agent-"+version)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "grpcnotrace",
		"-ldflags=-s -w -X github.com/fleetmq/fleet/schema.Version="+version, "-o", out, "./cmd/fleet-agent")
	cmd.Dir, cmd.Env = repoRoot, crossEnv(tg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build fleet-agent for %s: %v\n%s", tg.arch, err, b)
	}
	return readFile(t, out)
}

// stopArmAgent stops the agent (SIGTERM; its containers stay) and logs
// its output if the test failed.
func stopArmAgent(t *testing.T, agent *exec.Cmd, exited <-chan struct{}, waitErr *error, logs *logWatcher) {
	select {
	case <-exited:
	default:
		_ = agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = agent.Process.Kill()
			<-exited
			t.Error("agent still running 30s after SIGTERM")
		}
	}
	if t.Failed() {
		t.Logf("agent (%v) log:\n%s", *waitErr, logs)
	}
}
