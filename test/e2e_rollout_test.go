package test

import (
	"encoding/json"
	"regexp"
	"slices"
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
		// The test image was imported, never pushed: no registry has it,
		// so v1 running again proves it started without a pull. (The
		// agent's "Pulled ... is present" event may be dropped by its
		// event rate limit in a burst; a failed pull would be a Warning.)
		var evs schema.EventList
		f.Get(t, "/v1/devices/"+d+"/events", &evs)
		for _, e := range evs.Items {
			if e.Pod == name && !e.Time.Before(undone) && e.Type == schema.EventWarning && strings.Contains(e.Reason, "Pull") {
				t.Errorf("%s: a pull was attempted after the undo: %+v", d, e)
			}
		}
	}
	out = f.CLI(t, "rollout", "history", "deployment/"+name)
	if !regexp.MustCompile(`(?m)^2 +.*RolledBack`).MatchString(out) || !regexp.MustCompile(`(?m)^3 \(current\) +`).MatchString(out) {
		t.Errorf("fleet rollout history after the undo:\n%s", out)
	}
}

// stagedStrategy is a Staged strategy of two steps, one device then all,
// the first with a pause; the first failure rolls back.
func stagedStrategy(pause string) map[string]any {
	return map[string]any{"type": schema.StrategyStaged, "staged": map[string]any{
		"steps":                   []any{map[string]any{"devices": 1, "pause": pause}, map[string]any{"percent": 100}},
		"progressDeadlineSeconds": 120,
		"autoRollback":            true,
	}}
}

// awaitStaged waits until the deployment's staged rollout satisfies cond.
func awaitStaged(t *testing.T, f *Fleet, name, what string, cond func(r *schema.RolloutStatus) bool) *schema.RolloutStatus {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		var d schema.Deployment
		code, body, err := f.Request(t.Context(), "GET", "/v1/deployments/"+name, nil)
		if err == nil && code == 200 && json.Unmarshal(body, &d) == nil && d.Status != nil {
			if r := d.Status.Rollout; r != nil && r.Revision == d.Status.Revision && cond(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: staged rollout of %s: not within %v; status %+v", what, name, e2eConverge, d.Status)
		}
		time.Sleep(pollEvery) // poll interval
	}
}

// runsPod returns the devices whose report shows pod name at hash.
func runsPod(f *Fleet, t *testing.T, name, hash string) []string {
	var out []string
	for _, d := range f.Devices() {
		if st := f.Device(t, d).Status; st != nil {
			for _, p := range st.Pods {
				if p.Name == name && p.Hash == hash {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// e2eStagedRollout: a Staged rollout on real containerd. v1 rolls out;
// v2 stops after its first device for a pause; the hub is killed (SIGKILL)
// and started again: the rollout resumes where it was (the same device on
// v2, the others on v1, no desired state reissued, no container
// restarted), and ends once the pause is lifted. v3 has an image that
// cannot be pulled: its first device fails, the hub rolls the deployment
// back to v2 by itself, and no device ever stopped v2 (download, then
// replace); the deployment's current revision is then v2's template
// again (revision 4, as an undo would leave it), history marks v3 Failed,
// and rollout status exits 1 saying why.
func e2eStagedRollout(t *testing.T, f *Fleet) {
	devs := f.Devices()
	const name = "e2e-staged"
	f.deleteOnCleanup(t, name)
	t.Cleanup(func() {
		if !f.Hub.running() {
			f.StartHub(t)
		}
	})
	v1 := e2eDep{Name: name, Strategy: stagedStrategy("0s")}
	f.applyDeps(t, v1)
	awaitStaged(t, f, name, "v1 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == len(devs)
	})
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	h1 := f.PodHash(t, name)

	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	v2.Strategy = stagedStrategy("1h")
	f.applyDeps(t, v2)
	h2 := f.PodHash(t, name)
	r := awaitStaged(t, f, name, "v2 pausing after its first device", func(r *schema.RolloutStatus) bool {
		return r.Step == 1 && r.Ready == 1 && r.Updated == 1 && strings.Contains(r.Waiting, "pausing")
	})
	first := runsPod(f, t, name, h2)
	if len(first) != 1 || r.LastGoodRevision != 1 {
		t.Fatalf("v2's first wave: devices %v report it, last good revision %d; want one device and revision 1", first, r.LastGoodRevision)
	}
	f.AwaitDevices(t, e2eConverge, "the others still run v1", func(d schema.Device) bool {
		return d.Status != nil && Converged(d) && slices.ContainsFunc(d.Status.Pods, func(p schema.PodStatus) bool { return p.Name == name && p.Hash == h1 && p.Ready })
	}, slices.DeleteFunc(slices.Clone(devs), func(d string) bool { return d == first[0] })...)
	gens := map[string]int64{}
	for _, d := range devs {
		gens[d] = f.Device(t, d).Status.DesiredGeneration
	}
	before := f.TaskPIDs(t)

	f.KillHub(t)
	f.StartHub(t)
	after := awaitStaged(t, f, name, "the rollout after the restart", func(r *schema.RolloutStatus) bool {
		return r.Step == 1 && r.Ready == 1 && strings.Contains(r.Waiting, "pausing")
	})
	if !after.WaitUntil.Equal(r.WaitUntil) {
		t.Errorf("the pause ends at %v after the restart, %v before: it did not resume where it was", after.WaitUntil, r.WaitUntil)
	}
	f.AwaitConverged(t, e2eConverge, devs...)
	for _, d := range devs {
		if g := f.Device(t, d).Status.DesiredGeneration; g != gens[d] {
			t.Errorf("%s: desired generation %d after the restart, %d before: the restart moved it", d, g, gens[d])
		}
	}
	if got := runsPod(f, t, name, h2); !slices.Equal(got, first) {
		t.Errorf("after the restart %v run v2, before %v", got, first)
	}
	samePIDs(t, "across a hub kill in the middle of a staged rollout", before, f.TaskPIDs(t))

	// Lift the pause: the same revision (only the strategy changed) goes
	// on to every device.
	v2.Strategy = stagedStrategy("0s")
	f.applyDeps(t, v2)
	awaitStaged(t, f, name, "v2 complete", func(r *schema.RolloutStatus) bool {
		return r.Phase == schema.RolloutComplete && r.Ready == len(devs)
	})
	f.AwaitRollout(t, name, len(devs), e2eConverge)
	for _, d := range devs {
		f.AwaitContainerRunning(t, d, name, h2)
	}
	before = f.TaskPIDs(t)

	// v3 cannot be pulled: the hub rolls back by itself, as an undo would:
	// v2's template becomes the current revision, 4, and the history
	// keeps 3, marked Failed (e2e_rollback_truth_test.go has the rest).
	v3 := v2
	v3.Image = "127.0.0.1:1/fleet/app:typo"
	f.applyDeps(t, v3)
	rb := awaitStaged(t, f, name, "v3 rolled back", func(r *schema.RolloutStatus) bool {
		return r.Revision == 4 && r.Hash == h2 && r.Phase == schema.RolloutComplete && r.RolledBackFrom != nil
	}).RolledBackFrom
	if !strings.Contains(rb.Reason, "rolled back to revision 2") || !strings.Contains(rb.Reason, "ImagePullBackOff") || rb.Revision != 3 {
		t.Errorf("rollback reason: %q (revision %d)", rb.Reason, rb.Revision)
	}
	f.AwaitDevices(t, e2eConverge, "back on v2", func(d schema.Device) bool {
		return d.Status != nil && Converged(d) && slices.ContainsFunc(d.Status.Pods, func(p schema.PodStatus) bool { return p.Name == name && p.Hash == h2 && p.Ready })
	}, devs...)
	samePIDs(t, "a rollout of an image that cannot be pulled, rolled back", before, f.TaskPIDs(t))
	out, errOut, err := f.RunCLI(t, "", "rollout", "status", "deployment/"+name)
	if err == nil || !strings.Contains(out, "rolled back at step 1 of 2") || !strings.Contains(errOut, "was rolled back: rolled back to revision 2") {
		t.Errorf("fleet rollout status after the rollback: err %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	if hist := f.CLI(t, "rollout", "history", "deployment/"+name); !regexp.MustCompile(`(?m)^3 +.*Failed`).MatchString(hist) || !regexp.MustCompile(`(?m)^4 \(current\) `).MatchString(hist) {
		t.Errorf("history does not mark revision 3 Failed and 4 current:\n%s", hist)
	}
	if desc := f.CLI(t, "describe", "deployment", name); !strings.Contains(desc, "RolloutRolledBack") {
		t.Errorf("describe does not say the rollout was rolled back:\n%s", desc)
	}
}
