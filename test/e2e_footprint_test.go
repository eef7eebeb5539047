package test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestAgentFootprint measures what an operator sizes a device by: the time
// from an acknowledged apply to the hub reporting the device converged
// (image already present), and the agent's resident memory idle with five
// pods. The figures are logged for BENCHMARKS.md; the assertions are only
// bounds far above the targets (2 s, 20 MB), so a slow machine cannot make
// them flake but a leak or a stuck rollout still fails.
func TestAgentFootprint(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1})
	dev := f.Devices()[0]

	var deps []e2eDep
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("footprint-%d", i)
		deps = append(deps, e2eDep{Name: name, Selector: map[string]string{"fleet/device": dev}})
		names = append(names, name)
	}
	f.deleteOnCleanup(t, names...)

	start := time.Now()
	f.applyDeps(t, deps...)
	converged := f.AwaitConverged(t, 60*time.Second, dev)[dev]
	elapsed := time.Since(start)
	if got := len(converged.Status.Pods); got != 5 {
		t.Fatalf("%s reports %d pods, want 5", dev, got)
	}
	t.Logf("apply -> converged with 5 new pods (image present): %v", elapsed.Round(time.Millisecond))

	// Single change on an idle device: replace one pod.
	deps[0].Args = []string{"echo", "v2", "sleep", "forever"}
	gen := converged.Status.DesiredGeneration
	start = time.Now()
	f.applyDeps(t, deps...)
	f.AwaitDevices(t, 60*time.Second, "converged on the changed pod", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Converged && d.Status.ObservedGeneration > gen
	}, dev)
	t.Logf("apply -> converged, one pod replaced: %v", time.Since(start).Round(time.Millisecond))

	pid := f.Agent(t, dev).PID()
	rss := procStatusBytes(t, pid, "VmRSS")
	t.Logf("fleet-agent RSS idle with 5 pods: %.1f MiB (anonymous %.1f MiB, file-backed %.1f MiB)", float64(rss)/(1<<20),
		float64(procStatusBytes(t, pid, "RssAnon"))/(1<<20), float64(procStatusBytes(t, pid, "RssFile"))/(1<<20))
	if rss > 64<<20 {
		t.Errorf("fleet-agent RSS %d bytes with 5 pods: far above the 20 MB target", rss)
	}
}

// procStatusBytes reads a kB field (VmRSS, RssAnon, …) of
// /proc/PID/status in bytes.
func procStatusBytes(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read agent status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
