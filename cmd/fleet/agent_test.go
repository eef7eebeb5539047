package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const digestArm64 = "sha256:3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3f"

// agentEnv is a fake hub with three devices of site north, reporting
// agent v1.3.0 (pi-3 offline).
func agentEnv(t *testing.T) *env {
	e := newEnv(t)
	for _, n := range []string{"pi-1", "pi-2", "pi-3"} {
		e.ok("", "device", "add", n, "--label", "site=north")
		if err := e.hub.SetDeviceStatus(n, &schema.DeviceObservedInfo{Online: n != "pi-3", Agent: &schema.AgentInfo{Version: "v1.3.0", OS: "linux", Arch: "arm64"}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestAgentUpgrade: fleet agent upgrade creates the AgentRollout with the
// flags' version, image, digests, selector and Staged strategy, then
// updates it (retagging the image), and refuses bad flags by name.
func TestAgentUpgrade(t *testing.T) {
	e := agentEnv(t)
	out := e.ok("", "agent", "upgrade", "--to", "v1.4.0", "-l", "site=north",
		"--image", "registry.example.com/fleet/agent:v1.4.0", "--digest", "arm64="+digestArm64,
		"--strategy", "Staged", "--steps", "1,50%,100%", "--failure-threshold", "1", "--auto-rollback")
	if out != "agentrollout/fleet created: version v1.4.0\n" {
		t.Errorf("upgrade: %q", out)
	}
	ar := e.hub.AgentRollout("fleet")
	if ar == nil {
		t.Fatal("no agentrollout/fleet stored")
	}
	s := ar.Spec
	if s.Version != "v1.4.0" || s.Image != "registry.example.com/fleet/agent:v1.4.0" || len(s.Artifacts) != 1 || s.Artifacts[0].Digest != digestArm64 ||
		s.Selector.MatchLabels["site"] != "north" || s.Strategy.Type != schema.StrategyStaged || len(s.Strategy.Staged.Steps) != 3 ||
		*s.Strategy.Staged.Steps[0].Devices != 1 || *s.Strategy.Staged.Steps[1].Percent != 50 || !s.Strategy.Staged.AutoRollback || s.Strategy.Staged.FailureThreshold != "1" {
		t.Errorf("stored spec: %+v", s)
	}
	// An update keeps the strategy and selector, retags the image, and
	// needs new digests.
	e.fails("--digest is required", "agent", "upgrade", "--to", "v1.4.1")
	if out := e.ok("", "agent", "upgrade", "--to", "v1.4.1", "--digest", "arm64="+digestArm64); out != "agentrollout/fleet configured: version v1.4.1\n" {
		t.Errorf("update: %q", out)
	}
	if s := e.hub.AgentRollout("fleet").Spec; s.Image != "registry.example.com/fleet/agent:v1.4.1" || s.Strategy.Type != schema.StrategyStaged || s.Selector.MatchLabels["site"] != "north" {
		t.Errorf("updated spec: %+v", s)
	}
	for _, tt := range []struct {
		want string
		args []string
	}{
		{"--to is required", nil},
		{`--to: "latest": want a release such as v1.4.0`, []string{"--to", "latest"}},
		{"--digest \"arm64\": want ARCH=sha256:HEX", []string{"--to", "v1.4.0", "--digest", "arm64"}},
		{"spec.artifacts[0].digest", []string{"--to", "v1.4.0", "--name", "other", "--image", "r.example/a:v1", "--digest", "arm64=md5:1"}},
		{"--steps \"1,x\"", []string{"--to", "v1.4.0", "--name", "other", "--image", "r.example/a:v1", "--strategy", "Staged", "--steps", "1,x"}},
		{"need --strategy Staged", []string{"--to", "v1.4.0", "--name", "other", "--image", "r.example/a:v1", "--auto-rollback"}},
		{"--selector", []string{"--to", "v1.4.0", "--name", "other", "--image", "r.example/a:v1", "-l", "a in ("}},
	} {
		e.fails(tt.want, append([]string{"agent", "upgrade"}, tt.args...)...)
	}
	if e.hub.AgentRollout("other") != nil {
		t.Error("a refused upgrade stored agentrollout/other")
	}
}

// TestAgentStatus: versions × devices, the waves, and -o wide/json/yaml.
func TestAgentStatus(t *testing.T) {
	e := agentEnv(t)
	e.ok("", "agent", "upgrade", "--to", "v1.4.0", "--image", "registry.example.com/fleet/agent:v1.4.0", "--strategy", "Staged", "--steps", "1,100%")
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true, Agent: &schema.AgentInfo{Version: "v1.4.0", Arch: "arm64"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.hub.SetAgentRolloutStatus("fleet", &schema.AgentRolloutStatus{
		Rollout: &schema.RolloutStatus{Hash: "v1.4.0", Phase: schema.RolloutProgressing, Step: 2, Steps: 2, Targeted: 3, Updated: 3, Ready: 1, Failed: 1, Pending: 1, Waiting: "devices to report v1.4.0"},
		Devices: []schema.AgentDeviceStatus{
			{Name: "pi-1", Version: "v1.4.0", Desired: "v1.4.0", Phase: schema.AgentUpdated, Online: true},
			{Name: "pi-2", Version: "v1.3.0", Desired: "v1.4.0", Phase: schema.AgentFailed, Online: true, Reason: "new agent exited at start"},
			{Name: "pi-3", Version: "v1.3.0", Desired: "v1.4.0", Phase: schema.AgentPending},
		},
	}); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "agent", "status")
	want := regexp.MustCompile(`^VERSION +DEVICES
v1\.3\.0 +2
v1\.4\.0 +1

ROLLOUT +VERSION +PHASE +STEP +UPDATED +FAILED +PENDING +WAITING
agentrollout/fleet +v1\.4\.0 +Progressing +2/2 +3/3 +1 +1 +devices to report v1\.4\.0

DEVICE +ONLINE +AGENT +DESIRED +PHASE
pi-1 +true +v1\.4\.0 +v1\.4\.0 +Updated
pi-2 +true +v1\.3\.0 +v1\.4\.0 +Failed
pi-3 +false +v1\.3\.0 +v1\.4\.0 +Pending
$`)
	if !want.MatchString(out) {
		t.Errorf("agent status:\n%s", out)
	}
	if out := e.ok("", "agent", "status", "-o", "wide", "-l", "fleet/device=pi-2"); !regexp.MustCompile(`(?m)^pi-2 +true +v1\.3\.0 +v1\.4\.0 +Failed +arm64 +fleet +new agent exited at start$`).MatchString(out) {
		t.Errorf("agent status -o wide -l:\n%s", out)
	}
	var rep agentStatusReport
	if err := json.Unmarshal([]byte(e.ok("", "agent", "status", "-o", "json")), &rep); err != nil || rep.Versions["v1.3.0"] != 2 || len(rep.Devices) != 3 || rep.Rollouts[0].Rollout.Failed != 1 {
		t.Errorf("agent status -o json: %+v, %v", rep, err)
	}
	if out := e.ok("", "agent", "status", "-o", "yaml"); !strings.Contains(out, "versions:") || !strings.Contains(out, "phase: Failed") {
		t.Errorf("agent status -o yaml:\n%s", out)
	}
	e.fails("-o name is not supported", "agent", "status", "-o", "name")

	// fleet get lists them too.
	out = e.ok("", "get", "agentrollouts", "-o", "wide")
	if !regexp.MustCompile(`(?m)^NAME +VERSION +PHASE +STEP +UPDATED +FAILED +PENDING +AGE +SELECTOR +STRATEGY +LAST-GOOD +IMAGE\n` +
		`fleet +v1\.4\.0 +Progressing +2/2 +3/3 +1 +1 +\S+ +<none> +Staged\S* +<none> +registry\.example\.com/fleet/agent:v1\.4\.0$`).MatchString(out) {
		t.Errorf("get agentrollouts -o wide:\n%s", out)
	}
}

// TestRolloutUndoAgentRollout: undo gives the rollout its last good
// release back, with that release's artifacts; without one it says why.
func TestRolloutUndoAgentRollout(t *testing.T) {
	e := agentEnv(t)
	e.ok("", "agent", "upgrade", "--to", "v1.4.0", "--image", "registry.example.com/fleet/agent:v1.4.0")
	e.fails("no last good release", "rollout", "undo", "agentrollout/fleet")
	good := schema.AgentRolloutSpec{Version: "v1.3.0", Image: "registry.example.com/fleet/agent:v1.3.0", Artifacts: []schema.AgentArtifact{{Arch: "arm64", Digest: digestArm64}}}
	if err := e.hub.SetAgentRolloutStatus("fleet", &schema.AgentRolloutStatus{LastGoodVersion: "v1.3.0", LastGood: &good}); err != nil {
		t.Fatal(err)
	}
	e.fails("--to-revision is for deployments", "rollout", "undo", "agentrollout/fleet", "--to-revision", "2")
	if out := e.ok("", "rollout", "undo", "agentrollout/fleet"); out != "agentrollout/fleet rolled back to v1.3.0\n" {
		t.Errorf("undo: %q", out)
	}
	if s := e.hub.AgentRollout("fleet").Spec; s.Version != "v1.3.0" || s.Image != good.Image || len(s.Artifacts) != 1 {
		t.Errorf("after undo: %+v", s)
	}
}
