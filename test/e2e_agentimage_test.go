package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EAgentImageUpgrade: the image arm/agentimage makes from a dist/
// (as `make arm` lays it out: the build, SHA256SUMS, VERSION) is what a
// real agent on containerd upgrades itself from, with the `fleet agent
// upgrade` line the tool prints run as it is; the device's container is
// not restarted.
func TestE2EAgentImageUpgrade(t *testing.T) {
	u := startUpgradeFleet(t, "agimg", 1)
	dev := u.Devices()[0]
	before := u.TaskPIDs(t)

	dist := t.TempDir()
	file := "fleet-agent-linux-" + goruntime.GOARCH
	if err := os.WriteFile(filepath.Join(dist, file), u.bBin, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(u.bBin)
	sums := fmt.Sprintf("%s  %s\n", hex.EncodeToString(sum[:]), file)
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "VERSION"), []byte(agentB+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(t.TempDir(), "agentimage")
	build := exec.Command("go", "build", "-o", tool, "./arm/agentimage")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./arm/agentimage: %v\n%s", err, out)
	}
	ref := u.reg.Host + "/fleet/agent:" + agentB
	start := time.Now()
	out, err := exec.Command(tool, "--dist", dist, "--push", ref, "--insecure").CombinedOutput()
	if err != nil {
		t.Fatalf("agentimage --push %s: %v\n%s", ref, err, out)
	}
	t.Logf("BENCH agentimage: pushed a one-platform agent image (%d-byte binary) in %v", len(u.bBin), time.Since(start).Round(time.Millisecond))

	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "fleet agent upgrade ") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("agentimage printed no fleet agent upgrade line:\n%s", out)
	}
	if want := "--digest " + goruntime.GOARCH + "=" + Sha256Digest(u.bBin); !strings.Contains(line, want) {
		t.Fatalf("the printed line %q lacks %q", line, want)
	}
	args := strings.Fields(line)[1:]
	start = time.Now()
	if stdout, stderr, err := u.RunCLI(t, "", args...); err != nil {
		t.Fatalf("%s: %v\n%s%s", line, err, stdout, stderr)
	}
	u.AwaitDevices(t, 2*time.Minute, "upgraded to "+agentB+" from the tool's image", func(d schema.Device) bool {
		return runsAgent(agentB)(d) && upgradedFrom(agentA)(d)
	}, dev)
	t.Logf("BENCH agentimage: %s ran %s from the tool's image %v after the printed line was run", dev, agentB, time.Since(start).Round(time.Millisecond))
	if v, _ := u.layouts[dev].CurrentVersion(); v != agentB {
		t.Errorf("%s: current is %q, want %s", dev, v, agentB)
	}
	samePIDs(t, "across the upgrade from the tool's image", before, u.TaskPIDs(t))
}
