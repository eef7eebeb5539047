package test

import (
	"fmt"
	"os"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EAgentSkewPreviousAgent: the version-skew policy's first half, on
// real processes. The previous release's fleet-agent (built from
// PrevRelease, which knows nothing of desiredState.agent) against this
// hub, beside this release's agent: it runs a Deployment, its version is
// shown, and a desired state that names an agent release (an
// AgentRollout to this release) is accepted and acted on for its pods,
// the unknown field ignored, the agent neither crashing nor restarting a
// container; the rollout leaves it Updating, never Updated.
func TestE2EAgentSkewPreviousAgent(t *testing.T) {
	prev := BuildPrevRelease(t, "fleet-agent")
	f := StartFleet(t, FleetOptions{Agents: 2, DevicePrefix: "skewa", Labels: func(int) map[string]string { return e2eAgents }})
	devs := f.Devices()
	old := f.Agent(t, devs[0])
	UseAgentBinary(t, old, prev)
	f.AwaitDevices(t, time.Minute, "running "+PrevVersion, runsAgent(PrevVersion), devs[0])
	f.AwaitDevices(t, time.Minute, "running "+BinaryVersion, runsAgent(BinaryVersion), devs[1])
	f.applyDeps(t, e2eDep{Name: "app"})
	f.deleteOnCleanup(t, "app")
	f.AwaitRollout(t, "app", 2, 2*time.Minute)
	out := f.CLI(t, "get", "devices", "-o", "wide")
	if !lineHas(out, devs[0], PrevVersion) || !lineHas(out, devs[1], BinaryVersion) {
		t.Errorf("fleet get devices -o wide does not show %s on %s and %s on %s:\n%s", PrevVersion, devs[0], BinaryVersion, devs[1], out)
	}
	before, pid := f.TaskPIDs(t), old.PID()
	gen := f.Device(t, devs[0]).Status.DesiredGeneration

	// An AgentRollout to this release: the old agent's desired state
	// gains the agent field.
	reg := StartCountingRegistry(t)
	bin, err := os.ReadFile(BuildAgentVersion(t, BinaryVersion))
	if err != nil {
		t.Fatal(err)
	}
	ref, digest, _ := reg.PushAgentImage(t, "fleet/agent:"+BinaryVersion, bin)
	f.Apply(t, fmt.Sprintf(`apiVersion: fleet/v1
kind: AgentRollout
metadata: {name: fleet}
spec:
  version: %s
  image: %s
  artifacts: [{arch: %s, digest: "%s"}]
  selector: {matchLabels: {agent: "yes"}}
`, BinaryVersion, ref, goruntime.GOARCH, digest))
	d := f.AwaitDevices(t, time.Minute, "accepting a desired state that names an agent", func(d schema.Device) bool {
		s := d.Status
		return s != nil && s.Online && s.DesiredGeneration > gen && s.ObservedGeneration == s.DesiredGeneration && Converged(d)
	}, devs[0])[devs[0]]
	samePIDs(t, "across the desired state naming an agent", before, f.TaskPIDs(t))
	// A template change still reaches it.
	f.applyDeps(t, e2eDep{Name: "app", Args: []string{"echo", "v2", "sleep", "forever"}})
	f.AwaitRollout(t, "app", 2, 2*time.Minute)
	if got := old.PID(); got != pid {
		t.Errorf("the previous release's agent is process %d, was %d: it exited on the new field", got, pid)
	}
	if v := d.Status.Agent.Version; v != PrevVersion {
		t.Errorf("%s reports agent %s, want %s", devs[0], v, PrevVersion)
	}
	var ar schema.AgentRollout
	f.Get(t, "/v1/agentrollouts/fleet", &ar)
	for _, s := range ar.Status.Devices {
		want := schema.AgentUpdated
		if s.Name == devs[0] {
			want = schema.AgentUpdating
		}
		if s.Phase != want {
			t.Errorf("agentrollout: %s is %s (%s), want %s", s.Name, s.Phase, s.Reason, want)
		}
	}
}

// TestE2EAgentSkewPreviousHub: the policy's second half. This release's
// agent, installed in its upgrade layout, against the previous release's
// fleet-hub (built from PrevRelease, which sends no agent field and knows
// no status.agent.upgrade): it enrolls, runs a Deployment and reports its
// version, and its self-update stays idle.
func TestE2EAgentSkewPreviousHub(t *testing.T) {
	hub := BuildPrevRelease(t, "fleet-hub")
	f := StartFleet(t, FleetOptions{Agents: 2, DevicePrefix: "skewh", HubBinary: hub, Labels: func(int) map[string]string { return e2eAgents }})
	devs := f.Devices()
	var info schema.HubInfo
	f.Get(t, "/v1/info", &info)
	if info.Version != PrevVersion {
		t.Fatalf("the hub reports version %q, want the previous release's %s", info.Version, PrevVersion)
	}
	l := UseUpgradeLayout(t, f.Agent(t, devs[0]), BinaryVersion, BuildAgentVersion(t, BinaryVersion), upgradeTrialDeadline)
	f.AwaitDevices(t, time.Minute, "running "+BinaryVersion, runsAgent(BinaryVersion), devs...)
	f.applyDeps(t, e2eDep{Name: "app"})
	f.deleteOnCleanup(t, "app")
	f.AwaitRollout(t, "app", 2, 2*time.Minute)
	pid := f.Agent(t, devs[0]).PID()
	f.applyDeps(t, e2eDep{Name: "app", Args: []string{"echo", "v2", "sleep", "forever"}})
	f.AwaitRollout(t, "app", 2, 2*time.Minute)
	out := f.CLI(t, "get", "devices", "-o", "wide")
	for _, d := range devs {
		if !lineHas(out, d, BinaryVersion) {
			t.Errorf("the previous hub's fleet get devices -o wide does not show %s on %s:\n%s", BinaryVersion, d, out)
		}
	}
	if got := f.Agent(t, devs[0]).PID(); got != pid {
		t.Errorf("the agent is process %d, was %d", got, pid)
	}
	if v, _ := l.CurrentVersion(); v != BinaryVersion {
		t.Errorf("current is %q, want %s", v, BinaryVersion)
	}
	if v, _ := l.NextVersion(); v != "" {
		t.Errorf("next names %s under a hub that names no agent", v)
	}
	for _, d := range devs {
		if up := f.Device(t, d).Status.Agent.Upgrade; up != nil {
			t.Errorf("%s reports an upgrade %+v under a hub that names no agent", d, up)
		}
	}
}
