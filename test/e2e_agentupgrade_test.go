package test

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/selfupdate"
	"github.com/fleetmq/fleet/schema"
)

// The two agent releases the tests build: A, which the devices run, and
// B, which they are moved to. Both stay within the hub's version-skew
// policy (the hub is BinaryVersion, v0.0.0-e2e: prereleases of v0.0.0
// that sort before it).
const (
	agentA = "v0.0.0-alpha"
	agentB = "v0.0.0-beta"
)

// upgradeTrialDeadline is the agents' --upgrade-trial-deadline.
const upgradeTrialDeadline = 15 * time.Second

// upgradeFleet is a Fleet whose agents run A from an upgrade layout, with
// one pod each, and a registry for the agent images.
type upgradeFleet struct {
	*Fleet
	reg     *CountingRegistry
	layouts map[string]selfupdate.Layout
	bBin    []byte
}

func startUpgradeFleet(t *testing.T, prefix string, n int) *upgradeFleet {
	t.Helper()
	aBin := BuildAgentVersion(t, agentA)
	bPath := BuildAgentVersion(t, agentB)
	f := StartFleet(t, FleetOptions{Agents: n, DevicePrefix: prefix, Labels: func(int) map[string]string { return e2eAgents }})
	u := &upgradeFleet{Fleet: f, reg: StartCountingRegistry(t), layouts: map[string]selfupdate.Layout{}}
	var err error
	if u.bBin, err = os.ReadFile(bPath); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.Agents {
		u.layouts[a.Device] = UseUpgradeLayout(t, a, agentA, aBin, upgradeTrialDeadline)
	}
	f.AwaitDevices(t, time.Minute, "running "+agentA, runsAgent(agentA), f.Devices()...)
	f.applyDeps(t, e2eDep{Name: "app"})
	f.deleteOnCleanup(t, "app")
	f.AwaitRollout(t, "app", n, 2*time.Minute)
	return u
}

// runsAgent says the hub sees the device online, reporting version v.
func runsAgent(v string) func(schema.Device) bool {
	return func(d schema.Device) bool {
		return d.Status != nil && d.Status.Online && d.Status.Agent != nil && d.Status.Agent.Version == v
	}
}

// rollout applies the AgentRollout "fleet" to version from image with
// digest: Staged, one device then the rest, rolled back at the first
// failure, unless allAtOnce.
func (u *upgradeFleet) rollout(t *testing.T, version, image, digest string, allAtOnce bool) {
	t.Helper()
	strategy := `{type: Staged, staged: {steps: [{devices: 1}, {percent: 100}], failureThreshold: 1, autoRollback: true}}`
	if allAtOnce {
		strategy = `{type: AllAtOnce}`
	}
	u.Apply(t, fmt.Sprintf(`apiVersion: fleet/v1
kind: AgentRollout
metadata: {name: fleet}
spec:
  version: %s
  image: %s
  artifacts: [{arch: %s, digest: "%s"}]
  selector: {matchLabels: {agent: "yes"}}
  strategy: %s
`, version, image, goruntime.GOARCH, digest, strategy))
}

// agentRollout is the AgentRollout "fleet" as the hub has it.
func (u *upgradeFleet) agentRollout(t *testing.T) schema.AgentRollout {
	t.Helper()
	var ar schema.AgentRollout
	u.Get(t, "/v1/agentrollouts/fleet", &ar)
	return ar
}

// awaitRolloutPhase waits until the rollout of version is in phase.
func (u *upgradeFleet) awaitRolloutPhase(t *testing.T, version string, phase schema.RolloutPhase, within time.Duration) schema.AgentRollout {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ar := u.agentRollout(t)
		if st := ar.Status; st != nil && st.Rollout != nil && st.Rollout.Hash == version && st.Rollout.Phase == phase {
			return ar
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent rollout to %s not %s within %v: %+v", version, phase, within, ar.Status)
		}
		time.Sleep(pollEvery) // poll interval, not synchronisation
	}
}

// pushBroken pushes an image whose /fleet-agent is script, a release
// that is broken, and returns its reference and digest.
func (u *upgradeFleet) pushBroken(t *testing.T, repo, script string) (string, string) {
	ref, digest, _ := u.reg.PushAgentImage(t, repo, []byte("#!/bin/sh\n"+script+"\n"))
	return ref, digest
}

// failedBack checks that a failed upgrade left device on A by itself (the
// same agent process, no restart by the harness), and that the rollout
// was rolled back with the device's reason.
func (u *upgradeFleet) failedBack(t *testing.T, version, device string, pid int, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ar := u.awaitRolloutPhase(t, version, schema.RolloutRolledBack, within)
	took := time.Since(start)
	if r := ar.Status.Rollout.Reason; !strings.Contains(r, want) {
		t.Errorf("rollout to %s rolled back with reason %q; want it to say %q", version, r, want)
	}
	u.AwaitDevices(t, 30*time.Second, "back on "+agentA, runsAgent(agentA), device)
	a := u.Agent(t, device)
	if got := a.PID(); got != pid {
		t.Errorf("%s: the agent's process is %d, was %d: it went back by executing itself, not by a restart", device, got, pid)
	}
	if v, _ := u.layouts[device].CurrentVersion(); v != agentA {
		t.Errorf("%s: current is %s after a failed upgrade, want %s", device, v, agentA)
	}
	if v, _ := u.layouts[device].NextVersion(); v != "" {
		t.Errorf("%s: next still names %s", device, v)
	}
	return took
}

// TestE2EAgentUpgrade: three real agents on containerd, installed from an
// upgrade layout at A, through every outcome of an agent rollout: a
// binary whose digest is not the signed one is refused; a B that exits at
// start and a B that never connects each go back to A by themselves and
// the rollout stops at its failure threshold and rolls back; then B in
// waves, one device offline through it (pending, never failed) that
// upgrades when it returns. No container restarts throughout.
func TestE2EAgentUpgrade(t *testing.T) {
	u := startUpgradeFleet(t, "agup", 3)
	devs := u.Devices()
	first := devs[0]
	before := u.TaskPIDs(t)
	marks := u.eventMarks()

	// A baseline: the devices run A already, so the rollout completes
	// at once and A is the last good release a rollback returns to.
	aBytes, err := os.ReadFile(u.layouts[first].Binary(agentA))
	if err != nil {
		t.Fatal(err)
	}
	aRef, aDigest, _ := u.reg.PushAgentImage(t, "fleet/agent:"+agentA, aBytes)
	u.rollout(t, agentA, aRef, aDigest, false)
	u.awaitRolloutPhase(t, agentA, schema.RolloutComplete, time.Minute)
	pid := u.Agent(t, first).PID()

	t.Run("bad input", func(t *testing.T) { u.badUpgrades(t, aRef) })
	t.Run("digest mismatch is refused", func(t *testing.T) {
		const v = "v0.0.0-b.1"
		ref, _, _ := u.reg.PushAgentImage(t, "fleet/agent:"+v, u.bBin)
		u.rollout(t, v, ref, Sha256Digest([]byte("not the binary in the image")), false)
		u.failedBack(t, v, first, pid, "digest mismatch", time.Minute)
		if _, err := os.Stat(u.layouts[first].Binary(v)); !os.IsNotExist(err) {
			t.Errorf("the refused binary is in the layout: %v", err)
		}
	})
	t.Run("B exits at start", func(t *testing.T) {
		const v = "v0.0.0-b.2"
		ref, digest := u.pushBroken(t, "fleet/agent:"+v, `echo "fleet-agent: this release is broken" >&2; exit 3`)
		u.rollout(t, v, ref, digest, false)
		took := u.failedBack(t, v, first, pid, "exited at start (exit status 3)", time.Minute)
		t.Logf("BENCH agentupgrade: a B that exits at start: rolled back %v after the rollout was applied", took.Round(time.Millisecond))
	})
	t.Run("B never connects", func(t *testing.T) {
		const v = "v0.0.0-b.3"
		ref, digest := u.pushBroken(t, "fleet/agent:"+v, `exec sleep 3600`)
		u.rollout(t, v, ref, digest, false)
		took := u.failedBack(t, v, first, pid, "did not connect to the broker within "+upgradeTrialDeadline.String(), upgradeTrialDeadline+time.Minute)
		t.Logf("BENCH agentupgrade: a B that never connects: rolled back %v after the rollout was applied (trial deadline %v)", took.Round(time.Millisecond), upgradeTrialDeadline)
		if took < upgradeTrialDeadline {
			t.Errorf("rolled back after %v, before the trial deadline %v", took, upgradeTrialDeadline)
		}
	})
	t.Run("B in waves with a device offline", func(t *testing.T) { u.waves(t, devs) })
	samePIDs(t, "across the agent's upgrades", before, u.TaskPIDs(t))
	for _, d := range devs {
		if evs := u.eventsSince(d, marks[d]); len(evs) != 0 {
			t.Errorf("%s: containerd saw %s during the agent's upgrades, want nothing", d, fmtEvents(evs))
		}
	}
}

// upgradedFrom says the device's agent reports it replaced prev.
func upgradedFrom(prev string) func(schema.Device) bool {
	return func(d schema.Device) bool {
		if d.Status == nil || d.Status.Agent == nil || d.Status.Agent.Upgrade == nil {
			return false
		}
		up := d.Status.Agent.Upgrade
		return up.Phase == schema.AgentUpgradeUpdated && up.Previous == prev && up.Version == d.Status.Agent.Version
	}
}

// lineHas reports whether a line of out holds every word.
func lineHas(out string, words ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		ok := true
		for _, w := range words {
			if !containsWord(f, w) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func containsWord(fields []string, w string) bool {
	for _, f := range fields {
		if f == w {
			return true
		}
	}
	return false
}

// reportSwitch logs what one device's upgrade cost: time, bytes pulled,
// the MQTT session's downtime and the trial's memory.
func (u *upgradeFleet) reportSwitch(t *testing.T, device string, mark int, took time.Duration, layer int64, repo string) {
	t.Helper()
	logs := u.Agent(t, device).Logs()
	stopped := LogTimes(logs, mark, "agent stopped; containers left running")
	connected := LogTimes(logs, mark, "mqtt connected")
	var down time.Duration
	if len(stopped) >= 2 && len(connected) >= 2 {
		down = connected[0].Sub(stopped[0]) + connected[1].Sub(stopped[1])
	} else {
		t.Errorf("%s: cannot time the session's downtime from the logs (%d stops, %d connections)", device, len(stopped), len(connected))
	}
	rss := ""
	for _, l := range strings.Split(logs[min(mark, len(logs)):], "\n") {
		if i := strings.Index(l, "trial_max_rss_bytes="); i >= 0 {
			rss = strings.Fields(l[i+len("trial_max_rss_bytes="):])[0]
		}
	}
	n, _ := strconv.ParseInt(rss, 10, 64)
	t.Logf("BENCH agentupgrade: one agent upgrade on %s: %v from the rollout's apply to the hub seeing %s; %d bytes pulled from the registry per device (2 devices pulled; layer %d, binary %d); MQTT session down %v in all (two reconnections: the trial, then the new agent after exec); trial's peak RSS %.1f MiB",
		device, took.Round(time.Millisecond), agentB, u.reg.Served(repo)/2, layer, len(u.bBin), down.Round(time.Millisecond), float64(n)/(1<<20))
}

// badUpgrades: fleet agent upgrade against the real hub with a version
// newer than the hub (unknown), of another major release, and with a
// selector that matches no device: each exits non-zero naming the field,
// and the stored AgentRollout, and what the devices are told, stay as
// they were. (A version below the skew policy's floor needs a hub of
// v0.2 or later: hub/api's TestAgentRolloutAdmission.)
func (u *upgradeFleet) badUpgrades(t *testing.T, image string) {
	before := u.agentRollout(t)
	digest := goruntime.GOARCH + "=" + Sha256Digest([]byte("x"))
	for _, tt := range []struct {
		want string
		args []string
	}{
		{"spec.version: unknown version v0.1.0", []string{"--to", "v0.1.0"}},
		{"spec.version: v1.0.0 is another major release", []string{"--to", "v1.0.0"}},
		{"spec.selector: matches no device", []string{"--to", agentB, "-l", "site=nowhere"}},
		{"spec.selector: matches no device", []string{"--to", agentB, "--name", "other", "-l", "site=nowhere"}},
	} {
		args := append([]string{"agent", "upgrade", "--image", image, "--digest", digest}, tt.args...)
		out, errOut, err := u.RunCLI(t, "", args...)
		if err == nil || !strings.Contains(errOut, tt.want) {
			t.Errorf("fleet %s: %v, stdout %q, stderr %q; want a failure saying %q", strings.Join(args, " "), err, out, errOut, tt.want)
		}
	}
	after := u.agentRollout(t)
	if after.Metadata.ResourceVersion != before.Metadata.ResourceVersion || after.Spec.Version != agentA {
		t.Errorf("a refused upgrade changed agentrollout/fleet: %s %s -> %s %s", before.Spec.Version, before.Metadata.ResourceVersion, after.Spec.Version, after.Metadata.ResourceVersion)
	}
	if _, _, err := u.RunCLI(t, "", "get", "agentrollout", "other"); err == nil {
		t.Error("a refused upgrade stored agentrollout/other")
	}
	u.AwaitDevices(t, 10*time.Second, "still told "+agentA, runsAgent(agentA), u.Devices()...)
}

// dashboardShows checks that the dashboard's device list
// (/v1/dashboard/devices, what its table shows) has each device's agent
// version; the dashboard's snapshot lags the hub by its refresh, so it is
// polled.
func (u *upgradeFleet) dashboardShows(t *testing.T, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page struct {
			Items []struct {
				Name  string `json:"name"`
				Agent string `json:"agent"`
			} `json:"items"`
		}
		u.Get(t, "/v1/dashboard/devices?limit=100", &page)
		got := map[string]string{}
		for _, r := range page.Items {
			got[r.Name] = r.Agent
		}
		missing := ""
		for d, v := range want {
			if got[d] != v {
				missing += fmt.Sprintf(" %s: %q, want %s;", d, got[d], v)
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the dashboard's device list does not show the agents' versions:%s", missing)
			return
		}
		time.Sleep(pollEvery) // poll interval, not synchronisation
	}
}

// inWaves checks, from the agents' logs, that the second wave began
// only after the first: the second device started pulling B after the
// first device's trial had passed.
func inWaves(t *testing.T, firstLogs string, firstMark int, secondLogs string, secondMark int) {
	t.Helper()
	passed := LogTimes(firstLogs, firstMark, "agent trial passed")
	pulled := LogTimes(secondLogs, secondMark, "pulling the new agent release")
	if len(passed) == 0 || len(pulled) == 0 {
		t.Errorf("cannot order the waves from the logs: %d trials passed on the first device, %d pulls on the second", len(passed), len(pulled))
		return
	}
	if !pulled[0].After(passed[0]) {
		t.Errorf("the second device pulled B at %v, before the first device's trial passed at %v: not in waves", pulled[0], passed[0])
	}
	t.Logf("waves: the first device passed its trial at %s, the second began pulling %v later", passed[0].Format(time.StampMilli), pulled[0].Sub(passed[0]).Round(time.Millisecond))
}

// waves moves the devices to B with a Staged rollout, one device first,
// the third offline throughout (pending, never failed) until it returns
// and upgrades; it checks the versions in the CLI and the dashboard and
// logs what one device's switch cost.
func (u *upgradeFleet) waves(t *testing.T, devs []string) {
	first := devs[0]
	offline := u.Agent(t, devs[2])
	offline.Kill(t)
	u.AwaitDevices(t, time.Minute, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, devs[2])
	ref, digest, layer := u.reg.PushAgentImage(t, "fleet/agent:"+agentB, u.bBin)
	mark, mark1 := u.Agent(t, first).LogMark(), u.Agent(t, devs[1]).LogMark()
	peak := SampleAgentRSS(u.Agent(t, first))
	start := time.Now()
	u.rollout(t, agentB, ref, digest, false)
	u.AwaitDevices(t, 2*time.Minute, "running "+agentB, runsAgent(agentB), first)
	perDevice := time.Since(start)
	total, procs := peak()
	t.Logf("BENCH agentupgrade: the agent's processes on %s during the switch: at most %.1f MiB resident in all (%d processes at most: the previous agent waiting and the one in trial)", first, float64(total)/(1<<20), procs)
	u.AwaitDevices(t, 2*time.Minute, "running "+agentB, runsAgent(agentB), devs[1])
	inWaves(t, u.Agent(t, first).Logs(), mark, u.Agent(t, devs[1]).Logs(), mark1)
	ar := u.agentRollout(t)
	for _, d := range ar.Status.Devices {
		if d.Name == devs[2] && d.Phase != schema.AgentPending {
			t.Errorf("the offline device is %s (%s), want Pending", d.Phase, d.Reason)
		}
	}
	out := u.CLI(t, "get", "devices", "-o", "wide")
	for _, d := range devs[:2] {
		if !lineHas(out, d, agentB) {
			t.Errorf("fleet get devices -o wide does not show %s on %s:\n%s", agentB, d, out)
		}
	}
	if !lineHas(out, devs[2], agentA) {
		t.Errorf("fleet get devices -o wide does not show %s still on %s:\n%s", devs[2], agentA, out)
	}
	u.dashboardShows(t, map[string]string{devs[0]: agentB, devs[1]: agentB, devs[2]: agentA})
	u.reportSwitch(t, first, mark, perDevice, layer, "fleet/agent")

	offline.Start(t)
	u.AwaitDevices(t, 2*time.Minute, "running "+agentB+" after its return", runsAgent(agentB), devs[2])
	ar = u.awaitRolloutPhase(t, agentB, schema.RolloutComplete, time.Minute)
	for _, d := range ar.Status.Devices {
		if d.Phase != schema.AgentUpdated {
			t.Errorf("%s: %s, want Updated", d.Name, d.Phase)
		}
	}
	// The trial's report made the device Updated; the agent exec'd
	// after it says so too.
	u.AwaitDevices(t, time.Minute, "reporting the upgrade from "+agentA, upgradedFrom(agentA), devs...)
	for _, d := range devs {
		if v, _ := u.layouts[d].CurrentVersion(); v != agentB {
			t.Errorf("%s: current is %q, want %s", d, v, agentB)
		}
	}
}
