package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// TestE2EProbes: probes and init containers through the whole fleet, a
// real fleet-hub and two real fleet-agent processes on a private
// containerd, each agent behind its own proxy:
//
//   - a liveness probe that starts failing restarts its container: the
//     hub shows RESTARTS growing and the Unhealthy and Killing events;
//   - a readiness probe that fails keeps the pod Running but not ready in
//     `fleet get pods` (and out of the deployment's ready count);
//   - readiness keeps being probed while a device is cut off from the
//     hub: what changed offline is what the hub shows once it is back,
//     with the event stamped while offline;
//   - init containers run in order, each to completion, before the app.
func TestE2EProbes(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Proxy: true, Labels: func(i int) map[string]string {
		return map[string]string{"agent": "yes"}
	}})
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, f *Fleet)
	}{
		{"liveness_restarts", e2eLivenessRestarts},
		{"readiness_not_ready_and_offline", e2eReadinessOffline},
		{"init_containers_in_order", e2eInitContainers},
		{"failing_init_container_holds_the_app", e2eInitContainerFails},
	} {
		if !t.Run(sc.name, func(t *testing.T) { sc.run(t, f) }) && !e2eHealthy(t, f) {
			t.Fatalf("the fleet did not recover after %s", sc.name)
		}
	}
}

// podsJSON returns `fleet get pods NAME -o json`, by device.
func podsJSON(t *testing.T, f *Fleet, pod string) map[string]printers.DevicePod {
	t.Helper()
	var list printers.DevicePodList
	if err := json.Unmarshal([]byte(f.CLI(t, "get", "pods", pod, "-o", "json")), &list); err != nil {
		t.Fatalf("fleet get pods %s -o json: %v", pod, err)
	}
	out := map[string]printers.DevicePod{}
	for _, p := range list.Items {
		out[p.Device] = p
	}
	return out
}

// eventsJSON returns `fleet events --for device/DEVICE -o json`.
func eventsJSON(t *testing.T, f *Fleet, device string) []schema.Event {
	t.Helper()
	var list schema.EventList
	if err := json.Unmarshal([]byte(f.CLI(t, "events", "--for", "device/"+device, "--limit", "0", "-o", "json")), &list); err != nil {
		t.Fatalf("fleet events -o json: %v", err)
	}
	return list.Items
}

func podReported(pod string, cond func(schema.PodStatus) bool) func(schema.Device) bool {
	return func(d schema.Device) bool {
		if d.Status == nil || !d.Status.Online {
			return false
		}
		for _, p := range d.Status.Pods {
			if p.Name == pod {
				return cond(p)
			}
		}
		return false
	}
}

func e2eLivenessRestarts(t *testing.T, f *Fleet) {
	devs := f.Devices()
	f.deleteOnCleanup(t, "e2e-live")
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-live}
spec:
  selector: {matchLabels: {agent: "yes"}}
  template:
    spec:
      containers:
      - name: app
        image: `+f.Image+`
        args: [write, /healthy, ok, sleep, 3s, rm, /healthy, sleep, forever]
        livenessProbe:
          exec: {command: [/app, read, /healthy]}
          periodSeconds: 1
          failureThreshold: 2
`)
	// Healthy three seconds, killed, restarted after the 10 s back-off.
	f.AwaitDevices(t, e2eConverge, "restarting e2e-live", podReported("e2e-live", func(p schema.PodStatus) bool {
		return p.Restarts >= 1
	}), devs...)
	want := "liveness probe failed: exec [/app read /healthy]: exit code 12"
	for _, d := range devs {
		var unhealthy, killing bool
		for _, e := range eventsJSON(t, f, d) {
			if e.Pod != "e2e-live" || e.Container != "app" {
				continue
			}
			unhealthy = unhealthy || e.Reason == "Unhealthy" && e.Type == schema.EventWarning && e.Message == want
			killing = killing || e.Reason == "Killing" && strings.Contains(e.Message, want)
		}
		if !unhealthy || !killing {
			t.Errorf("%s: events Unhealthy %v, Killing %v; want both, naming %q", d, unhealthy, killing, want)
		}
	}
	out := f.CLI(t, "get", "pods", "e2e-live", "--no-headers")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if fields := strings.Fields(line); len(fields) < 5 || fields[4] == "0" {
			t.Errorf("fleet get pods e2e-live: RESTARTS not grown:\n%s", out)
		}
	}
}

func e2eReadinessOffline(t *testing.T, f *Fleet) {
	devs := f.Devices()
	victim, other := devs[0], devs[1]
	a := f.Agent(t, victim)
	t.Cleanup(a.Proxy.Heal) // before the deletion (cleanups run last first)
	f.deleteOnCleanup(t, "e2e-ready")
	// The readiness probe reads a flag file the test sets on the device
	// (both devices share this machine, and the file).
	flags := t.TempDir()
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-ready}
spec:
  selector: {matchLabels: {agent: "yes"}}
  template:
    spec:
      containers:
      - name: app
        image: `+f.Image+`
        args: [sleep, forever]
        mounts: [{hostPath: `+flags+`, mountPath: /flags}]
        readinessProbe:
          exec: {command: [/app, read, /flags/ready]}
          periodSeconds: 1
          failureThreshold: 1
`)
	notReady := "app: readiness probe failed: exec [/app read /flags/ready]: exit code 12"
	f.AwaitDevices(t, e2eConverge, "running, not ready", podReported("e2e-ready", func(p schema.PodStatus) bool {
		return p.Phase == schema.PhaseRunning && !p.Ready && p.Message == notReady
	}), devs...)
	// What the operator sees.
	for d, p := range podsJSON(t, f, "e2e-ready") {
		if p.Phase != schema.PhaseRunning || p.Ready || p.Restarts != 0 {
			t.Errorf("fleet get pods e2e-ready -o json, %s: phase %s ready %v restarts %d", d, p.Phase, p.Ready, p.Restarts)
		}
	}
	if out := f.CLI(t, "get", "pods", "e2e-ready", "-o", "wide", "--no-headers"); strings.Count(out, "readiness probe failed") != 2 {
		t.Errorf("fleet get pods -o wide does not say why the pods are not ready:\n%s", out)
	}
	if dep := f.Deployment(t, "e2e-ready"); dep.Status == nil || dep.Status.Ready != 0 {
		t.Errorf("deployment status counts not-ready pods: %+v", dep.Status)
	}

	// Ready once the flag is set.
	if err := os.WriteFile(filepath.Join(flags, "ready"), []byte("yes"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.AwaitRollout(t, "e2e-ready", 2, e2eConverge)

	// Cut victim off, then make its probe fail: the agent notices while
	// offline (the probes do not need the hub) and says so once back.
	mark := a.LogMark()
	a.Proxy.Partition()
	f.AwaitDevices(t, 30*time.Second, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, victim)
	cut := time.Now()
	if err := os.Remove(filepath.Join(flags, "ready")); err != nil {
		t.Fatal(err)
	}
	a.AwaitLog(t, mark, "readiness probe failed; container not ready", 30*time.Second)
	// The other device is not partitioned: the hub sees it at once.
	f.AwaitDevices(t, 30*time.Second, "not ready", podReported("e2e-ready", func(p schema.PodStatus) bool { return !p.Ready }), other)
	if err := os.WriteFile(filepath.Join(flags, "ready"), []byte("yes"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.AwaitLog(t, mark, "readiness probe succeeded; container ready", 30*time.Second)
	if err := os.Remove(filepath.Join(flags, "ready")); err != nil {
		t.Fatal(err)
	}
	mark2 := a.LogMark()
	a.AwaitLog(t, mark2, "readiness probe failed; container not ready", 30*time.Second)
	healed := time.Now()
	a.Proxy.Heal()
	f.AwaitDevices(t, e2eConverge, "back online, not ready", podReported("e2e-ready", func(p schema.PodStatus) bool {
		return p.Phase == schema.PhaseRunning && !p.Ready && p.Message == notReady && p.Restarts == 0
	}), victim)
	// The events queued offline reach the hub, stamped while offline. They
	// may come after the status that says the device is back (the agent
	// lingers to batch events), so the list is polled.
	var offline []string
	stamped := func() bool {
		offline = nil
		for _, e := range eventsJSON(t, f, victim) {
			if e.Pod == "e2e-ready" && (e.Reason == "Unhealthy" || e.Reason == "Ready") && e.Time.After(cut) && e.Time.Before(healed) {
				offline = append(offline, e.Reason)
			}
		}
		return len(offline) >= 3
	}
	awaitf(t, e2eConverge, stamped, "three Ready/Unhealthy events stamped during the partition at the hub (have %v)", &offline)
	if strings.Join(offline, ",") != "Unhealthy,Ready,Unhealthy" {
		t.Errorf("events stamped during the partition: %v, want Unhealthy, Ready, Unhealthy", offline)
	}
}

func e2eInitContainers(t *testing.T, f *Fleet) {
	devs := f.Devices()
	f.deleteOnCleanup(t, "e2e-init")
	shared := t.TempDir()
	// Each init container reads what the one before wrote; the app reads
	// what the last one wrote.
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-init}
spec:
  selector: {matchLabels: {fleet/device: `+devs[0]+`}}
  template:
    spec:
      initContainers:
      - name: first
        image: `+f.Image+`
        args: [write, /shared/first, "1"]
        mounts: [{hostPath: `+shared+`, mountPath: /shared}]
      - name: second
        image: `+f.Image+`
        args: [read, /shared/first, write, /shared/second, "2"]
        mounts: [{hostPath: `+shared+`, mountPath: /shared}]
      containers:
      - name: app
        image: `+f.Image+`
        args: [read, /shared/second, sleep, forever]
        mounts: [{hostPath: `+shared+`, mountPath: /shared}]
`)
	f.AwaitRollout(t, "e2e-init", 1, e2eConverge)
	hash := f.PodHash(t, "e2e-init")
	cs := f.AwaitContainers(t, devs[0], 30*time.Second, "init containers exited, app running", func(cs []Container) bool {
		n := 0
		for _, c := range cs {
			if c.Pod == "e2e-init" && c.Hash == hash {
				n++
			}
		}
		return n == 3
	})
	for _, c := range cs {
		if c.Pod != "e2e-init" {
			continue
		}
		wantRunning := strings.Contains(c.ID, "-app-")
		if (c.PID != 0) != wantRunning {
			t.Errorf("container %s: status %s pid %d", c.ID, c.Status, c.PID)
		}
	}
	if b, err := os.ReadFile(filepath.Join(shared, "second")); err != nil || string(b) != "2" {
		t.Errorf("the second init container's file: %q, %v", b, err)
	}
	// Their order, as the agent's events tell it (the app's Started event
	// may come a linger after the status that shows it running).
	var started []string
	awaitf(t, e2eConverge, func() bool {
		started = nil
		for _, e := range eventsJSON(t, f, devs[0]) {
			if e.Pod == "e2e-init" && e.Reason == "Started" {
				started = append(started, e.Container)
			}
		}
		return slices.Contains(started, "app")
	}, "the app's Started event at the hub (have %v)", &started)
	if strings.Join(started, ",") != "first,second,app" {
		t.Errorf("started %v, want first, second, app", started)
	}
}

// e2eInitContainerFails: an init container that exits 1 holds the app
// back: no app container is created, and the pod says why, as kubectl
// shows it (Init:Error or Init:CrashLoopBackOff, and the exit code).
func e2eInitContainerFails(t *testing.T, f *Fleet) {
	devs := f.Devices()
	f.deleteOnCleanup(t, "e2e-init-fails")
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: e2e-init-fails}
spec:
  selector: {matchLabels: {fleet/device: `+devs[0]+`}}
  template:
    spec:
      initContainers:
      - {name: prepare, image: `+f.Image+`, args: [exit, "1"]}
      containers:
      - {name: app, image: `+f.Image+`, args: [sleep, forever]}
`)
	f.AwaitDevices(t, e2eConverge, "the pod waits for its failing init container", func(d schema.Device) bool {
		if d.Status == nil {
			return false
		}
		for _, p := range d.Status.Pods {
			if p.Name != "e2e-init-fails" || p.Phase != schema.PhasePending || p.Ready || !strings.Contains(p.Message, "init container prepare failed (exit code 1)") {
				continue
			}
			for _, c := range p.Containers {
				if c.Name == "app" && strings.HasPrefix(c.Reason, "Init:") {
					return true
				}
			}
		}
		return false
	}, devs[0])
	for _, c := range f.Containers(t, devs[0]) {
		if c.Pod == "e2e-init-fails" && strings.Contains(c.ID, "-app-") {
			t.Errorf("the app container %s exists although its init container failed", c.ID)
		}
	}
}
