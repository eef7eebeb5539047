package test

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// e2eBadTagKeepsRunning: a deployment updated to an image that cannot be
// pulled leaves every device running the previous version (download, then
// replace), with a status that says so; fixing the tag then replaces it.
// Before, the agent stopped the old container first and then failed to
// pull, so a typo took every matching device down.
func e2eBadTagKeepsRunning(t *testing.T, f *Fleet) {
	devs := f.Devices()
	f.deleteOnCleanup(t, "e2e-safe")
	dep := e2eDep{Name: "e2e-safe"}
	f.applyDeps(t, dep)
	f.AwaitRollout(t, "e2e-safe", len(devs), e2eConverge)
	good := f.PodHash(t, "e2e-safe")
	before := f.TaskPIDs(t)

	// Nothing listens on port 1 of the loopback: every pull fails at once.
	const badImage = "127.0.0.1:1/fleet/app:typo"
	f.Apply(t, dep.manifest(badImage))
	f.AwaitDevices(t, e2eConverge, "report the new version waiting in ImagePullBackOff", func(d schema.Device) bool {
		for _, p := range d.Status.Pods {
			if p.Name == "e2e-safe" && len(p.Containers) == 1 && p.Containers[0].Image == badImage &&
				p.Containers[0].Reason == "ImagePullBackOff" && strings.Contains(p.Message, "the running version keeps running") {
				return true
			}
		}
		return false
	}, devs...)
	for _, d := range devs {
		if c := f.AwaitContainerRunning(t, d, "e2e-safe", good); c.ID != containerID("e2e-safe", good) {
			t.Errorf("%s: running %s, want the previous version %s", d, c.ID, containerID("e2e-safe", good))
		}
	}
	samePIDs(t, "after an update to an image that cannot be pulled", before, f.TaskPIDs(t))

	// The operator fixes the tag: the fixed version replaces the old.
	fixed := dep
	fixed.Env = map[string]string{"FIXED": "1"}
	f.applyDeps(t, fixed)
	f.AwaitRollout(t, "e2e-safe", len(devs), e2eConverge)
	h := f.PodHash(t, "e2e-safe")
	for _, d := range devs {
		f.AwaitContainerRunning(t, d, "e2e-safe", h)
	}
}
