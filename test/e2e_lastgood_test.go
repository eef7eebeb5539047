package test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// TestE2ELastGoodAfterUnpullableUpdate is the hole issue 44 found, on a
// real fleet-hub, fleet-agent and containerd: v1 starts; within its
// first 30 s an update to a tag that cannot be pulled arrives (v1 keeps
// running); v1 runs on; then a crashing v3 is applied. v1 ran steadily,
// so it is the version the device goes back to: v1 runs, v3 is reported
// as the failed revision, and `fleet get pods` shows v1's image.
func TestE2ELastGoodAfterUnpullableUpdate(t *testing.T) {
	t.Parallel() // mostly waits for v1 to count as steady; devices lastgood-*
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "lastgood", Shell: true, Labels: func(int) map[string]string { return e2eAgents }})
	dev := f.Devices()[0]
	const name = "e2e-lastgood"
	f.deleteOnCleanup(t, name)

	v1 := e2eDep{Name: name}
	f.applyDeps(t, v1)
	h1 := f.PodHash(t, name)
	c1 := f.AwaitContainerRunning(t, dev, name, h1)
	started := time.Now()

	// Nothing listens on port 1 of the loopback: every pull fails at once.
	const badImage = "127.0.0.1:1/fleet/app:missing"
	f.Apply(t, v1.manifest(badImage))
	f.AwaitDevices(t, e2eConverge, "the missing tag waiting in ImagePullBackOff, v1 running", podReported(name, func(p schema.PodStatus) bool {
		return len(p.Containers) == 1 && p.Containers[0].Image == badImage && p.Containers[0].Reason == "ImagePullBackOff"
	}), dev)
	if took := time.Since(started); took >= 25*time.Second {
		t.Fatalf("the missing tag reached the device %v after v1 started: the scenario needs it within v1's first 30 s", took)
	}
	if _, ag, err := state.Inspect(f.Agent(t, dev).StateDir); err != nil || ag.Rollouts[name].Steady != nil {
		t.Fatalf("v1 steady already when the missing tag arrived (err %v): %+v", err, ag.Rollouts[name])
	}

	// v1, no longer desired, keeps running and becomes the steady revision.
	awaitAgentSteady(t, f, dev, name, h1)
	if c := f.AwaitContainerRunning(t, dev, name, h1); c.PID != c1.PID {
		t.Fatalf("v1's task changed while the missing tag was desired: pid %d, was %d", c.PID, c1.PID)
	}

	v3 := e2eDep{Name: name, Image: f.ShellImage, Args: []string{"echo", "v3", "exit", "1"}}
	f.applyDeps(t, v3)
	h3 := f.PodHash(t, name)
	f.AwaitDevices(t, e2eConverge+time.Minute, "v3 failed to start, v1 running again", podReported(name, func(p schema.PodStatus) bool {
		return p.Hash == h1 && p.Ready && p.RevisionFailed(h3)
	}), dev)
	f.AwaitContainerRunning(t, dev, name, h1)

	out := f.CLI(t, "get", "pods", name, "-o", "wide")
	if !strings.Contains(out, f.Image) || strings.Contains(out, f.ShellImage) || !strings.Contains(out, h3[:8]) || !strings.Contains(out, "Running") {
		t.Errorf("fleet get pods -o wide: want v1's image %s running and v3 (%s) failed, not its image %s:\n%s", f.Image, h3[:8], f.ShellImage, out)
	}
	d := f.AwaitDevices(t, e2eConverge, "v3 reported as failedRevision", podReported(name, func(p schema.PodStatus) bool {
		return p.FailedRevision != nil && p.FailedRevision.Hash == h3
	}), dev)[dev]
	for _, p := range d.Status.Pods {
		if p.Name == name && (len(p.Containers) != 1 || p.Containers[0].Image != f.Image) {
			t.Errorf("pod status containers %+v, want v1's image %s", p.Containers, f.Image)
		}
	}
}
