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
// (image already present), and the agent's resident memory idle with
// three pods (issue 31's figure), then with five. The figures are logged
// for BENCHMARKS.md; the assertions are only bounds far above the targets
// (2 s, 15 MiB, 20 MB), so a slow machine cannot make them flake but a
// leak or a stuck rollout still fails.
func TestAgentFootprint(t *testing.T) {
	// The agent releases its binary's start-up pages 5 s after it reached
	// containerd (the default): after the first measurement, on a normal
	// run; and again once a burst of changes is over. One agent only.
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
	f.applyDeps(t, deps[:3]...)
	converged := f.AwaitConverged(t, 60*time.Second, dev)[dev]
	elapsed := time.Since(start)
	if got := len(converged.Status.Pods); got != 3 {
		t.Fatalf("%s reports %d pods, want 3", dev, got)
	}
	t.Logf("apply -> converged with 3 new pods (image present): %v", elapsed.Round(time.Millisecond))

	agent := f.Agent(t, dev)
	pid := agent.PID()
	const released = "start-up pages released"
	early := !strings.Contains(agent.Logs(), released)
	rss, fileBefore := logRSS(t, pid, "idle with 3 pods")
	if rss > 64<<20 {
		t.Errorf("fleet-agent RSS %d bytes with 3 pods: far above the 15 MiB target", rss)
	}
	// Once start-up is over the agent hands back its binary's pages;
	// what it goes on using comes back.
	agent.AwaitLog(t, 0, released, 60*time.Second)
	_, fileAfter := logRSS(t, pid, "idle with 3 pods, start-up pages released")
	if early && fileAfter >= fileBefore {
		t.Errorf("file-backed RSS %d bytes after the release, %d before: nothing was released", fileAfter, fileBefore)
	}
	awaitResyncs(t, agent, 2, 30*time.Second)
	if rss, _ := logRSS(t, pid, "idle with 3 pods, start-up pages released, two resyncs later"); rss > 64<<20 {
		t.Errorf("fleet-agent RSS %d bytes with 3 pods: far above the 15 MiB target", rss)
	}

	// The agent takes what idling holds, once settled after a release,
	// as the floor its later releases come back to; changes before then
	// are released only 5 minutes later (pageKeeper).
	agent.AwaitLog(t, 0, "idle resident set learnt", time.Minute)

	// Two more pods, then a single change on an idle device: replace one.
	gen := converged.Status.DesiredGeneration
	start = time.Now()
	f.applyDeps(t, deps...)
	converged = f.AwaitDevices(t, 60*time.Second, "converged on five pods", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Converged && d.Status.ObservedGeneration > gen && len(d.Status.Pods) == 5
	}, dev)[dev]
	t.Logf("apply -> converged with 2 new pods (5 in all): %v", time.Since(start).Round(time.Millisecond))

	deps[0].Args = []string{"echo", "v2", "sleep", "forever"}
	gen = converged.Status.DesiredGeneration
	mark := agent.LogMark()
	start = time.Now()
	f.applyDeps(t, deps...)
	f.AwaitDevices(t, 60*time.Second, "converged on the changed pod", func(d schema.Device) bool {
		return d.Status != nil && d.Status.Converged && d.Status.ObservedGeneration > gen
	}, dev)
	t.Logf("apply -> converged, one pod replaced: %v", time.Since(start).Round(time.Millisecond))

	// Once the changes are over the agent hands back what they touched
	// (the binary's pages, the heap): its resident set falls again.
	const again = "pages released again"
	early = !strings.Contains(agent.Logs()[mark:], again)
	rssBefore, _ := logRSS(t, pid, "with 5 pods, right after the changes")
	agent.AwaitLog(t, mark, again, 2*time.Minute)
	rssAfter, _ := logRSS(t, pid, "with 5 pods, pages released again")
	if early && rssAfter >= rssBefore {
		t.Errorf("RSS %d bytes after the release that followed the changes, %d before: nothing was released", rssAfter, rssBefore)
	}

	awaitResyncs(t, agent, 2, 30*time.Second)
	if rss, _ := logRSS(t, pid, "idle with 5 pods, two resyncs later"); rss > 64<<20 {
		t.Errorf("fleet-agent RSS %d bytes with 5 pods: far above the 20 MB target", rss)
	}
}

// awaitResyncs waits for n more periodic resyncs of the agent, each
// within the given time.
func awaitResyncs(t testing.TB, agent *Agent, n int, within time.Duration) {
	t.Helper()
	for range n {
		mark := agent.LogMark()
		agent.AwaitLog(t, mark, "periodic resync", within)
	}
}

// logRSS logs the process's VmRSS with its anonymous and file-backed
// parts, and returns VmRSS and RssFile in bytes.
func logRSS(t *testing.T, pid int, when string) (rss, file int64) {
	t.Helper()
	rss, file = procStatusBytes(t, pid, "VmRSS"), procStatusBytes(t, pid, "RssFile")
	t.Logf("fleet-agent RSS %s: %.1f MiB (anonymous %.1f MiB, file-backed %.1f MiB)", when, float64(rss)/(1<<20),
		float64(procStatusBytes(t, pid, "RssAnon"))/(1<<20), float64(file)/(1<<20))
	return rss, file
}

// procStatusBytes reads a kB field (VmRSS, RssAnon, …) of
// /proc/PID/status in bytes.
func procStatusBytes(t testing.TB, pid int, field string) int64 {
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
