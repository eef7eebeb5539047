package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EAgentUpgradePowerCut: a power cut (kill -9 of every agent
// process: the running agent and the one in trial) at each step of the
// switch leaves a working agent when the device starts again the way
// systemd would (<upgrade-dir>/current): while the release is pulled
// (or just after: the cut lands where the agent is when the test sees the
// step's log line), once the trial started, once the agent in trial connected, and once it
// passed. Each device then ends on B with its containers untouched.
func TestE2EAgentUpgradePowerCut(t *testing.T) {
	u := startUpgradeFleet(t, "agcut", 4)
	devs := u.Devices()
	steps := map[string]string{
		devs[0]: "pulling the new agent release",
		devs[1]: "agent trial started",
		devs[2]: "agent in trial connected",
		devs[3]: "agent trial passed",
	}
	before := u.TaskPIDs(t)
	marks := map[string]int{}
	for _, d := range devs {
		marks[d] = u.Agent(t, d).LogMark()
	}
	ref, digest, _ := u.reg.PushAgentImage(t, "fleet/agent:"+agentB, u.bBin)
	u.rollout(t, agentB, ref, digest, true)

	// Cut each device's power at its step.
	pending := map[string]bool{}
	for _, d := range devs {
		pending[d] = true
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(pending) > 0 {
		for d := range pending {
			a := u.Agent(t, d)
			logs := a.Logs()
			if !strings.Contains(logs[min(marks[d], len(logs)):], steps[d]) {
				continue
			}
			n := KillAllAgentProcesses(t, a)
			cur, _ := u.layouts[d].CurrentVersion()
			next, _ := u.layouts[d].NextVersion()
			t.Logf("%s: power cut after %q: %d agent processes killed; current %s, next %q", d, steps[d], n, cur, next)
			delete(pending, d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps not reached within 2m: %v", pending)
		}
		time.Sleep(pollEvery) // poll interval, not synchronisation
	}
	for _, d := range devs {
		for _, p := range AgentProcesses(u.Agent(t, d)) {
			t.Errorf("%s: agent process %d survived the power cut", d, p)
		}
	}
	samePIDs(t, "after the power cuts", before, u.TaskPIDs(t))

	// Power back: each device starts current, as systemd does.
	for _, d := range devs {
		u.Agent(t, d).Start(t)
	}
	u.AwaitDevices(t, 3*time.Minute, "on "+agentB+" after the power cuts", func(d schema.Device) bool {
		return runsAgent(agentB)(d) && upgradedFrom(agentA)(d)
	}, devs...)
	for _, d := range devs {
		l := u.layouts[d]
		if v, _ := l.CurrentVersion(); v != agentB {
			t.Errorf("%s: current %q, want %s", d, v, agentB)
		}
		if v, _ := l.NextVersion(); v != "" {
			t.Errorf("%s: next still names %s", d, v)
		}
		ents, _ := os.ReadDir(l.Dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".part-") {
				t.Errorf("%s: partial file %s left in the layout", d, e.Name())
			}
		}
	}
	u.awaitRolloutPhase(t, agentB, schema.RolloutComplete, time.Minute)
	samePIDs(t, "after the upgrade", before, u.TaskPIDs(t))
}
