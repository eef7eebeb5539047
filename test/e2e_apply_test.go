package test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// e2eApplyConverges: one apply of two deployments reaches every targeted
// device and only those; applying the same manifest again changes nothing
// anywhere.
func e2eApplyConverges(t *testing.T, f *Fleet) {
	devs := f.Devices() // dev-1, dev-3: sensors; dev-2: display
	f.deleteOnCleanup(t, "e2e-hello", "e2e-everywhere")
	hello := e2eDep{Name: "e2e-hello", Selector: map[string]string{"role": "sensor"}, Args: []string{"echo", "hello", "sleep", "forever"}}
	everywhere := e2eDep{Name: "e2e-everywhere", Env: map[string]string{"GREETING": "hi"}}
	f.applyDeps(t, hello, everywhere)

	// What an operator types after an apply: it returns once the hub
	// says both sensors run the pod, ready.
	out := f.CLI(t, "rollout", "status", "deployment/e2e-hello", "--timeout", "50s")
	if last := lastLine(out); last != `deployment "e2e-hello" successfully rolled out to 2 devices` {
		t.Errorf("fleet rollout status ended with %q:\n%s", last, out)
	}
	f.AwaitRollout(t, "e2e-hello", 2, e2eConverge)
	f.AwaitRollout(t, "e2e-everywhere", 3, e2eConverge)
	converged := f.AwaitConverged(t, e2eConverge, devs...)
	hHello, hEvery := f.PodHash(t, "e2e-hello"), f.PodHash(t, "e2e-everywhere")
	for _, d := range devs {
		c := f.AwaitContainerRunning(t, d, "e2e-everywhere", hEvery)
		if c.ID != containerID("e2e-everywhere", hEvery) {
			t.Errorf("%s: container %s, want ID %s", d, c.ID, containerID("e2e-everywhere", hEvery))
		}
		if d == devs[1] {
			f.AwaitNoContainer(t, d, "e2e-hello")
		} else {
			f.AwaitContainerRunning(t, d, "e2e-hello", hHello)
		}
		// The hub's view agrees with containerd.
		var pods []string
		for _, p := range converged[d].Status.Pods {
			pods = append(pods, p.Name+":"+string(p.Phase))
			if !p.Ready || p.Restarts != 0 {
				t.Errorf("%s: pod %+v", d, p)
			}
		}
		want := "e2e-everywhere:Running"
		if d != devs[1] {
			want = "e2e-everywhere:Running,e2e-hello:Running"
		}
		if got := strings.Join(pods, ","); got != want {
			t.Errorf("%s: hub reports pods %s, want %s", d, got, want)
		}
	}

	// The operator's view of the same: one Running line per pod per
	// device, nothing else.
	out = f.CLI(t, "get", "pods", "-l", "fleet/device="+devs[0]+",role=sensor", "--no-headers")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!slices.Equal(strings.Fields(lines[0])[:5], []string{devs[0], "e2e-everywhere", "1/1", "Running", "0"}) ||
		!slices.Equal(strings.Fields(lines[1])[:5], []string{devs[0], "e2e-hello", "1/1", "Running", "0"}) {
		t.Errorf("fleet get pods on %s:\n%s", devs[0], out)
	}
	if out := f.CLI(t, "get", "pods", "e2e-hello", "-o", "name"); out != "pod/"+devs[0]+"/e2e-hello\npod/"+devs[2]+"/e2e-hello\n" {
		t.Errorf("fleet get pods e2e-hello -o name:\n%s", out)
	}

	// The agent's events reach the CLI: describe ends with the pull and
	// the start of the pod it just ran.
	awaitDescribeEvents(t, f, devs[0], "Pulled", "e2e-hello/app", "Started", "e2e-hello/app")
	// The fleet-wide list has them too.
	out = f.CLI(t, "events", "--for", "device/"+devs[0], "--no-headers")
	for _, reason := range []string{"Pulled", "Started"} {
		// Columns are as wide as their widest cell, so match by fields.
		want := regexp.MustCompile(`(?m)\b` + reason + `\s+pod/` + regexp.QuoteMeta(devs[0]) + `/e2e-hello/app\s`)
		if !want.MatchString(out) {
			t.Errorf("fleet events --for device/%s: no %s of pod/%s/e2e-hello/app in\n%s", devs[0], reason, devs[0], out)
		}
	}

	// Idempotent apply: nothing is configured, no generation moves, no
	// container is touched.
	pids := f.TaskPIDs(t)
	marks := f.eventMarks()
	gens := map[string]int64{}
	for _, d := range devs {
		gens[d] = f.Device(t, d).Status.DesiredGeneration
	}
	out, errOut, err := f.RunCLI(t, hello.manifest(f.Image)+"---\n"+everywhere.manifest(f.Image), "apply", "-f", "-")
	if err != nil || out != "deployment/e2e-hello unchanged\ndeployment/e2e-everywhere unchanged\n" {
		t.Fatalf("second apply: %v\n%s%s", err, out, errOut)
	}
	for _, d := range devs {
		if g := f.Device(t, d).Status.DesiredGeneration; g != gens[d] {
			t.Errorf("%s: desired generation %d -> %d after an unchanged apply", d, gens[d], g)
		}
	}
	f.AwaitConverged(t, e2eConverge, devs...)
	samePIDs(t, "after an unchanged apply", pids, f.TaskPIDs(t))
	for _, d := range devs {
		if evs := f.eventsSince(d, marks[d]); len(evs) > 0 {
			t.Errorf("%s: containerd saw %s after an unchanged apply", d, fmtEvents(evs))
		}
	}
}

// e2eMovePods: a device-label change and then a selector change move a
// pod between devices; the device it leaves removes its container.
func e2eMovePods(t *testing.T, f *Fleet) {
	devs := f.Devices()
	d1, d2, d3 := devs[0], devs[1], devs[2]
	f.deleteOnCleanup(t, "e2e-mover")
	t.Cleanup(func() {
		for _, d := range devs {
			if _, errOut, err := f.RunCLI(t, "", "device", "label", d, "tier-"); err != nil && !strings.Contains(errOut, "not found") {
				t.Errorf("remove label tier from %s: %v %s", d, err, errOut)
			}
		}
	})
	f.CLI(t, "device", "label", d1, "tier=edge")
	f.applyDeps(t, e2eDep{Name: "e2e-mover", Selector: map[string]string{"tier": "edge"}})
	f.AwaitRollout(t, "e2e-mover", 1, e2eConverge)
	first := f.AwaitContainerRunning(t, d1, "e2e-mover")
	f.AwaitConverged(t, e2eConverge, devs...)
	for _, d := range []string{d2, d3} {
		f.AwaitNoContainer(t, d, "e2e-mover")
	}

	// The label moves from dev-1 to dev-2: so does the pod.
	f.CLI(t, "device", "label", d1, "tier-")
	f.CLI(t, "device", "label", d2, "tier=edge")
	f.AwaitRollout(t, "e2e-mover", 1, e2eConverge)
	moved := f.AwaitContainerRunning(t, d2, "e2e-mover", first.Hash)
	f.AwaitNoContainer(t, d1, "e2e-mover")
	f.AwaitConverged(t, e2eConverge, devs...)
	if moved.ID != first.ID {
		t.Errorf("the same pod version has ID %s on %s and %s on %s", first.ID, d1, moved.ID, d2)
	}

	// The selector changes to the sensors: dev-1 and dev-3 run it, dev-2
	// no longer does.
	f.applyDeps(t, e2eDep{Name: "e2e-mover", Selector: map[string]string{"role": "sensor"}})
	f.AwaitRollout(t, "e2e-mover", 2, e2eConverge)
	f.AwaitContainerRunning(t, d1, "e2e-mover")
	f.AwaitContainerRunning(t, d3, "e2e-mover")
	f.AwaitNoContainer(t, d2, "e2e-mover")
	f.AwaitConverged(t, e2eConverge, devs...)
	if dep := f.Deployment(t, "e2e-mover"); dep.Metadata.Generation != 2 {
		t.Errorf("selector change: generation %d, want 2", dep.Metadata.Generation)
	}
}

// lastLine is the last non-empty line of a command's output.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// awaitDescribeEvents polls `fleet describe device` until its Events
// section holds every one of want.
func awaitDescribeEvents(t *testing.T, f *Fleet, device string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := f.CLI(t, "describe", "device", device)
		events := ""
		if i := strings.Index(out, "\nEvents:"); i >= 0 {
			events = out[i:]
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return strings.Contains(events, w) })
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet describe device %s: no %q among the events after 30s:\n%s", device, missing, out)
		}
		time.Sleep(pollEvery)
	}
}
