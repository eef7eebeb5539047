package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/testimage"
)

// TestE2EUpdateWindowPullsAheadAndSwitches: a Deployment whose update
// window opens in about two minutes, in the device's own time zone (the
// agent runs with TZ=Asia/Kolkata, UTC+05:30, and the schedule is
// written in Kolkata time). The first install is not held back. The
// update's image is pulled from a registry at once; the old pod keeps
// running (same task PID) until the window opens, with `fleet get pods`
// and `fleet rollout status` saying "waiting for window until …"; then
// the device switches, and rollout status counts it switched.
func TestE2EUpdateWindowPullsAheadAndSwitches(t *testing.T) {
	t.Parallel() // mostly waits for its window to open; devices win-*
	const zone = "Asia/Kolkata"
	kolkata, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatalf("tzdata: %v", err)
	}
	reg := StartRegistry(t)
	tar, tag := testimage.Build(t, testimage.Options{Ref: "fleet.test/app:v2", Env: []string{"FLEET_TEST_VERSION=2"}})
	v2Image := reg.Push(t, tar, tag, "fleet/app:v2")

	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "win", AgentEnv: []string{"TZ=" + zone}, Labels: func(int) map[string]string { return e2eAgents }})
	dev := f.Devices()[0]
	const name = "e2e-window"
	f.deleteOnCleanup(t, name)
	f.AwaitDevices(t, e2eConverge, "the agent reports its zone", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Agent.TimeZone == zone && d.Status.Agent.UTCOffset == "+05:30"
	}, dev)

	// The window opens at the start of the minute two minutes from now, in
	// Kolkata: a schedule a device reading UTC would not open for hours.
	open := time.Now().In(kolkata).Truncate(time.Minute).Add(2 * time.Minute)
	window := map[string]any{"updateWindow": map[string]any{
		"schedule": fmt.Sprintf("%d %d * * *", open.Minute(), open.Hour()), "duration": "1h", "timeZone": "device",
	}}
	v1 := e2eDep{Name: name, Spec: window}
	f.applyDeps(t, v1)
	f.AwaitRollout(t, name, 1, e2eConverge) // a first install is not held back
	h1 := f.PodHash(t, name)
	c1 := f.AwaitContainerRunning(t, dev, name, h1)

	v2 := e2eDep{Name: name, Spec: window, Image: v2Image}
	applied := time.Now()
	f.applyDeps(t, v2)
	h2 := f.PodHash(t, name)
	until := open.Format(time.RFC3339)
	d := f.AwaitDevices(t, e2eConverge, "v2 downloaded, waiting for its window", podReported(name, func(p schema.PodStatus) bool {
		u := p.Update
		return u != nil && u.Hash == h2 && u.State == schema.UpdateWaiting && u.Reason == schema.UpdateReasonWindow && p.Hash == h1 && p.Ready
	}), dev)[dev]
	pulledIn := time.Since(applied)
	if time.Now().After(open) {
		t.Fatalf("the device reported waiting only after the window opened (%v after the update)", pulledIn)
	}
	t.Logf("update pulled ahead and waiting %v after apply; window opens in %v", pulledIn, time.Until(open).Round(time.Second))
	if n := reg.Pulls("fleet/app"); n == 0 {
		t.Errorf("the registry saw no pull of %s before the window opened", v2Image)
	}
	for _, p := range d.Status.Pods {
		if p.Name == name && (p.Update.Until == nil || !p.Update.Until.Equal(open) || !strings.Contains(p.Message, "waiting for window until "+until)) {
			t.Errorf("pod status %+v / %+v: want waiting until %s (Kolkata time)", p, p.Update, until)
		}
	}
	if c := f.AwaitContainerRunning(t, dev, name, h1); c.PID != c1.PID {
		t.Errorf("v1's task changed before the window opened: pid %d, was %d", c.PID, c1.PID)
	}
	for _, args := range [][]string{{"get", "pods", name}, {"get", "pods", name, "-o", "wide"}} {
		if out := f.CLI(t, args...); !strings.Contains(out, "waiting for window until "+until) || !strings.Contains(out, "Running") || !strings.Contains(out, "1/1") {
			t.Errorf("fleet %s: want v1 1/1 Running, waiting for window until %s:\n%s", strings.Join(args, " "), until, out)
		}
	}
	st := awaitRolloutLine(t, f, name, regexp.MustCompile(`\(0 downloading, 1 downloaded, 1 waiting, 0 switched: waiting for window until `+regexp.QuoteMeta(open.UTC().Format(time.RFC3339))+`\)`))
	t.Logf("rollout status while waiting: %s", st)

	// The window opens: the device switches.
	var c2 Container
	f.AwaitContainers(t, dev, time.Until(open)+e2eConverge, "running v2 once the window opens", func(cs []Container) bool {
		for _, c := range cs {
			if c.Pod == name && c.Hash == h2 && c.Status == containerd.Running && c.PID != 0 {
				c2 = c
				return true
			}
		}
		return false
	})
	switched := time.Now()
	if switched.Before(open) {
		t.Errorf("switched at %v, before the window opened at %v", switched, open)
	}
	t.Logf("switched %v after the window opened", switched.Sub(open).Round(time.Millisecond))
	if c2.PID == c1.PID {
		t.Errorf("v2 runs with v1's task pid %d", c1.PID)
	}
	f.AwaitRollout(t, name, 1, e2eConverge)
	st = awaitRolloutLine(t, f, name, regexp.MustCompile(`successfully rolled out`))
	d = f.AwaitDevices(t, e2eConverge, "v2 switched", podReported(name, func(p schema.PodStatus) bool {
		return p.Hash == h2 && p.Update != nil && p.Update.State == schema.UpdateSwitched
	}), dev)[dev]
	if dep := f.Deployment(t, name); dep.Status.Updates == nil || dep.Status.Updates.Switched != 1 || dep.Status.Updates.Waiting != 0 {
		t.Errorf("deployment status updates %+v, want 1 switched, none waiting", dep.Status.Updates)
	}
	t.Logf("rollout status after: %s", st)
}

// awaitRolloutLine polls `fleet rollout status -w=false` until its
// output matches re, and returns it.
func awaitRolloutLine(t *testing.T, f *Fleet, name string, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(e2eConverge)
	for {
		out, _, _ := f.RunCLI(t, "", "rollout", "status", "deployment/"+name, "-w=false")
		if re.MatchString(out) {
			return strings.TrimSpace(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet rollout status deployment/%s: %q does not match %s within %v", name, out, re, e2eConverge)
		}
		time.Sleep(pollEvery) // poll interval
	}
}
