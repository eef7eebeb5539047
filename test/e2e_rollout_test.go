package test

import (
	"regexp"
	"strings"
	"testing"
	"time"

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

// e2eRolloutUndo: apply v1, then v2; the history lists both revisions;
// "fleet rollout undo" returns every device to v1's pod hash, with v1's
// image already present (no pull), and the history says v2 was rolled
// back from.
func e2eRolloutUndo(t *testing.T, f *Fleet) {
	devs := f.Devices()
	const name = "e2e-undo"
	f.deleteOnCleanup(t, name)
	v1 := e2eDep{Name: name}
	f.applyDeps(t, v1)
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	h1 := f.PodHash(t, name)
	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	f.applyDeps(t, v2)
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	h2 := f.PodHash(t, name)
	if h1 == h2 {
		t.Fatalf("v1 and v2 have the same pod hash %s", h1)
	}
	out := f.CLI(t, "rollout", "history", "deployment/"+name)
	if !regexp.MustCompile(`(?m)^1 +`).MatchString(out) || !regexp.MustCompile(`(?m)^2 \(current\) +`).MatchString(out) {
		t.Fatalf("fleet rollout history lists no revisions 1 and 2:\n%s", out)
	}

	marks := f.eventMarks()
	undone := time.Now().Add(-time.Second)
	if out := f.CLI(t, "rollout", "undo", "deployment/"+name); out != "deployment/"+name+" rolled back\n" {
		t.Errorf("fleet rollout undo: %q", out)
	}
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	if h := f.PodHash(t, name); h != h1 {
		t.Fatalf("after the undo the pod hash is %s, want v1's %s", h, h1)
	}
	for _, d := range devs {
		f.AwaitContainerRunning(t, d, name, h1)
		started := false
		for _, e := range f.eventsSince(d, marks[d]) {
			started = started || e.Topic == topicTaskStart && e.ID == containerID(name, h1)
		}
		if !started {
			t.Errorf("%s: v1's task did not start again after the undo: %s", d, fmtEvents(f.eventsSince(d, marks[d])))
		}
		var evs schema.EventList
		f.Get(t, "/v1/devices/"+d+"/events", &evs)
		present := false
		for _, e := range evs.Items {
			present = present || e.Reason == "Pulled" && e.Pod == name && !e.Time.Before(undone) && strings.Contains(e.Message, "is present")
		}
		if !present {
			t.Errorf("%s: no Pulled event saying v1's image is present after the undo: %+v", d, evs.Items)
		}
	}
	out = f.CLI(t, "rollout", "history", "deployment/"+name)
	if !regexp.MustCompile(`(?m)^2 +.*RolledBack`).MatchString(out) || !regexp.MustCompile(`(?m)^3 \(current\) +`).MatchString(out) {
		t.Errorf("fleet rollout history after the undo:\n%s", out)
	}
}
