package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

const agentDigest = "sha256:abababababababababababababababababababababababababababababababab"

func agentRolloutObj(version string) *schema.AgentRollout {
	one, hundred := int32(1), int32(100)
	return &schema.AgentRollout{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindAgentRollout},
		Metadata: schema.ObjectMeta{Name: "fleet"},
		Spec: schema.AgentRolloutSpec{
			Version: version, Image: "registry.example.com/fleet/agent:" + version,
			Artifacts: []schema.AgentArtifact{{Arch: "arm64", Digest: agentDigest}},
			Selector:  schema.LabelSelector{MatchLabels: map[string]string{"site": "shop"}},
			Strategy: schema.Strategy{Type: schema.StrategyStaged, Staged: &schema.Staged{
				Steps: []schema.StagedStep{{Devices: &one}, {Percent: &hundred}}, FailureThreshold: "1", AutoRollback: true,
			}},
		},
	}
}

// reportAgent makes device i report agent version v on arm64.
func (f *stagedFleet) reportAgent(i int, v string) {
	f.status.set(f.name(i), &schema.DeviceStatus{Device: f.name(i), Agent: schema.AgentInfo{Version: v, OS: "linux", Arch: "arm64"}})
	f.c.DeviceStatusChanged(f.name(i))
}

// agents returns the agent version each device's published desired state
// names ("" none).
func (f *stagedFleet) agents() []string {
	out := make([]string, f.n)
	for i := range f.n {
		if ds := f.pub.desired(f.t, f.name(i)); ds != nil && ds.Agent != nil {
			out[i] = ds.Agent.Version
			if ds.Agent.Digest != agentDigest || ds.Agent.Rollout != "fleet" {
				f.t.Errorf("%s's desired agent %+v: want the arm64 digest and rollout fleet", f.name(i), ds.Agent)
			}
		}
	}
	return out
}

func (f *stagedFleet) agentStatus() *schema.AgentRolloutStatus {
	o, err := f.st.Get(f.t.Context(), schema.KindAgentRollout, "fleet")
	if err != nil {
		f.t.Fatal(err)
	}
	return o.(*schema.AgentRollout).Status
}

// TestControllerAgentRollout: on a real store, an AgentRollout puts the
// version and digest in the desired state of one device, then, once it
// reports the version, of the rest; the status, in the store, follows;
// a restarted hub resumes where it was.
func TestControllerAgentRollout(t *testing.T) {
	f := newStagedFleet(t, 3)
	for i := range 3 {
		f.reportAgent(i, "v1.3.0")
	}
	apply(t, f.st, agentRolloutObj("v1.4.0"))
	eventually(t, "first wave", func() bool { a := f.agents(); return count(a, "v1.4.0") == 1 && a[0] == "v1.4.0" })
	f.c.StatusChanged()
	if st := f.agentStatus(); st == nil || st.Rollout == nil || st.Rollout.Step != 1 || st.Devices[0].Phase != schema.AgentUpdating {
		t.Fatalf("status after the first wave: %+v", st)
	}
	f.reportAgent(0, "v1.4.0")
	eventually(t, "second wave", func() bool { return count(f.agents(), "v1.4.0") == 3 })
	f.restart()
	for i := range 3 {
		f.reportAgent(i, "v1.4.0")
	}
	eventually(t, "complete", func() bool {
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutComplete && st.Devices[2].Phase == schema.AgentUpdated
	})
	eventually(t, "every device named B after the restart", func() bool { return count(f.agents(), "v1.4.0") == 3 })
}

// TestControllerAgentRolloutRollsBack: B fails on its first device while
// online (it does not report B within the deadline); the rollout rolls
// back and every device is named A, the last good release, again.
func TestControllerAgentRolloutRollsBack(t *testing.T) {
	f := newStagedFleet(t, 2)
	for i := range 2 {
		f.reportAgent(i, "v1.3.0")
	}
	apply(t, f.st, agentRolloutObj("v1.3.0"))
	eventually(t, "A complete", func() bool {
		f.c.StatusChanged()
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutComplete
	})
	apply(t, f.st, agentRolloutObj("v1.4.0"))
	eventually(t, "B's first wave", func() bool { return f.agents()[0] == "v1.4.0" })
	f.clock.Advance(11 * time.Minute)
	f.c.StatusChanged()
	eventually(t, "rolled back", func() bool {
		f.c.StatusChanged()
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutRolledBack && st.LastGoodVersion == "v1.3.0"
	})
	// The status is stored before the desired states are published.
	eventually(t, "every device named A again", func() bool { a := f.agents(); return a[0] == "v1.3.0" && a[1] == "v1.3.0" })
}

// TestControllerAgentRolloutOfflineDevice: a device offline through the
// rollout is pending, never failed; the rollout goes on without it past
// the deadline; when it comes back it is timed from its return, so it is
// updating, not failed, and updated once it reports the version.
func TestControllerAgentRolloutOfflineDevice(t *testing.T) {
	f := newStagedFleet(t, 2)
	f.reportAgent(0, "v1.3.0")
	// d1 reported its arch once (the hub keeps it as fleet/arch), and is
	// offline now.
	if _, err := f.st.Mutate(t.Context(), schema.KindDevice, f.name(1), func(o schema.Object) error {
		o.GetMetadata().Labels[schema.LabelArch] = "arm64"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.status.mu.Lock()
	delete(f.status.st, f.name(1))
	f.status.mu.Unlock()
	f.c.DeviceStatusChanged(f.name(1))
	apply(t, f.st, agentRolloutObj("v1.4.0"))
	eventually(t, "first wave", func() bool { return f.agents()[0] == "v1.4.0" })
	f.reportAgent(0, "v1.4.0")
	eventually(t, "d1 given the version while offline", func() bool { return f.agents()[1] == "v1.4.0" })
	f.clock.Advance(11 * time.Minute)
	eventually(t, "complete without d1", func() bool {
		f.c.StatusChanged()
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutComplete
	})
	if st := f.agentStatus(); st.Devices[1].Phase != schema.AgentPending || st.Rollout.Failed != 0 {
		t.Fatalf("offline d1: phase %s, failed %d; want Pending and 0", st.Devices[1].Phase, st.Rollout.Failed)
	}
	f.reportAgent(1, "v1.3.0") // back online, still the old agent
	eventually(t, "d1 updating", func() bool {
		st := f.agentStatus()
		return st.Devices[1].Online && st.Devices[1].Phase == schema.AgentUpdating
	})
	f.reportAgent(1, "v1.4.0")
	eventually(t, "d1 updated", func() bool { return f.agentStatus().Devices[1].Phase == schema.AgentUpdated })
}

// TestControllerAgentRolloutReportedFailure: a device whose agent reports
// (status.agent.upgrade) that the new version failed its trial is failed
// at once, with the agent's words, long before the progress deadline; at
// the failure threshold the rollout rolls back. A failure the agent
// reports about another version counts for nothing.
func TestControllerAgentRolloutReportedFailure(t *testing.T) {
	f := newStagedFleet(t, 2)
	for i := range 2 {
		f.reportAgent(i, "v1.3.0")
	}
	apply(t, f.st, agentRolloutObj("v1.3.0"))
	eventually(t, "A complete", func() bool {
		f.c.StatusChanged()
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutComplete
	})
	apply(t, f.st, agentRolloutObj("v1.4.0"))
	eventually(t, "B's first wave", func() bool { return f.agents()[0] == "v1.4.0" })
	report := func(version, msg string) {
		f.status.set(f.name(0), &schema.DeviceStatus{Device: f.name(0), Agent: schema.AgentInfo{
			Version: "v1.3.0", OS: "linux", Arch: "arm64",
			Upgrade: &schema.AgentUpgradeStatus{Version: version, Phase: schema.AgentUpgradeFailed, Message: msg, Previous: "v1.3.0"},
		}})
		f.c.DeviceStatusChanged(f.name(0))
	}
	report("v1.9.0", "about another version")
	f.c.StatusChanged()
	if st := f.agentStatus(); st.Devices[0].Phase != schema.AgentUpdating {
		t.Fatalf("a failure about another version: phase %s, want Updating", st.Devices[0].Phase)
	}
	report("v1.4.0", "trial of v1.4.0 failed: it exited at start (exit status 3)")
	eventually(t, "rolled back on the reported failure", func() bool {
		f.c.StatusChanged()
		st := f.agentStatus()
		return st != nil && st.Rollout != nil && st.Rollout.Phase == schema.RolloutRolledBack
	})
	st := f.agentStatus()
	if !strings.Contains(st.Rollout.Reason+st.Devices[0].Reason, "exited at start") {
		t.Errorf("reasons %q / %q: want the agent's words", st.Rollout.Reason, st.Devices[0].Reason)
	}
	eventually(t, "every device named A again", func() bool { a := f.agents(); return a[0] == "v1.3.0" && a[1] == "v1.3.0" })
}
