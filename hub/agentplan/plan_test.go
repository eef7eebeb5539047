package agentplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

const digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

func staged(version string, threshold string, autoRollback bool) *schema.AgentRollout {
	one, hundred, deadline := int32(1), int32(100), int32(120)
	a := &schema.AgentRollout{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindAgentRollout},
		Metadata: schema.ObjectMeta{Name: "fleet", Generation: 1},
		Spec: schema.AgentRolloutSpec{
			Version:   version,
			Image:     "registry.example.com/fleet/agent:" + version,
			Artifacts: []schema.AgentArtifact{{Arch: "arm64", Digest: digestB}},
			Strategy: schema.Strategy{Type: schema.StrategyStaged, Staged: &schema.Staged{
				Steps: []schema.StagedStep{{Devices: &one}, {Percent: &hundred}}, ProgressDeadlineSeconds: &deadline,
				FailureThreshold: schema.IntOrPercent(threshold), AutoRollback: autoRollback,
			}},
		},
	}
	if err := schema.ValidateAgentRollout(a); err != nil {
		panic(err)
	}
	return a
}

func devices(versions ...string) []Device {
	var out []Device
	for i, v := range versions {
		out = append(out, Device{Name: fmt.Sprintf("pi-%d", i+1), Online: true, Arch: "arm64", Version: v})
	}
	return out
}

// summary is the plan in one line: each device's desired version and phase.
func summary(p Plan) string {
	var parts []string
	for _, d := range p.Status.Devices {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", d.Name, orDash(d.Desired), d.Phase))
	}
	return strings.Join(parts, " ") + " " + string(p.Status.Rollout.Phase)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// TestWaves: version B reaches one device, then, once it reports B, the
// rest; the desired state names B's arm64 digest.
func TestWaves(t *testing.T) {
	ar := staged("v1.4.0", "1", false)
	devs := devices("v1.3.0", "v1.3.0", "v1.3.0")
	p := Next(Input{Rollout: ar, Devices: devs, Now: t0})
	if got, want := summary(p), "pi-1=v1.4.0/Updating pi-2=-/Pending pi-3=-/Pending Progressing"; got != want {
		t.Fatalf("first wave:\n got %s\nwant %s", got, want)
	}
	if a := p.Agents["pi-1"]; a == nil || a.Digest != digestB || a.Image != ar.Spec.Image || a.Rollout != "fleet" {
		t.Errorf("pi-1's agent %+v, want B's arm64 digest and image", a)
	}
	if _, ok := p.Agents["pi-2"]; ok {
		t.Errorf("pi-2 is named an agent before its wave: %+v", p.Agents["pi-2"])
	}
	devs[0].Version, devs[0].VersionSince = "v1.4.0", t0.Add(time.Second)
	p = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(2 * time.Second)})
	if got, want := summary(p), "pi-1=v1.4.0/Updated pi-2=v1.4.0/Updating pi-3=v1.4.0/Updating Progressing"; got != want {
		t.Fatalf("second wave:\n got %s\nwant %s", got, want)
	}
	devs[1].Version, devs[2].Version = "v1.4.0", "v1.4.0"
	p = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(3 * time.Second)})
	if got, want := summary(p), "pi-1=v1.4.0/Updated pi-2=v1.4.0/Updated pi-3=v1.4.0/Updated Complete"; got != want {
		t.Fatalf("done:\n got %s\nwant %s", got, want)
	}
}

// TestOfflinePendingNeverFailed: a device offline past the deadline is
// pending, never failed, and does not hold the rollout back (the planner
// goes on without it past the deadline); it stays given B and upgrades
// when it returns.
func TestOfflinePendingNeverFailed(t *testing.T) {
	ar := staged("v1.4.0", "1", true)
	devs := devices("v1.3.0", "v1.3.0", "v1.3.0")
	p := Next(Input{Rollout: ar, Devices: devs, Now: t0})
	devs[0].Version = "v1.4.0"
	devs[2].Online = false
	p = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(time.Second)})
	devs[1].Version = "v1.4.0"
	p = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(time.Hour)})
	if got, want := summary(p), "pi-1=v1.4.0/Updated pi-2=v1.4.0/Updated pi-3=v1.4.0/Pending Complete"; got != want {
		t.Fatalf("offline pi-3:\n got %s\nwant %s", got, want)
	}
	if p.Status.Rollout.Failed != 0 {
		t.Errorf("failed %d, want 0: an offline device never fails", p.Status.Rollout.Failed)
	}
	devs[2].Online, devs[2].OnlineSince, devs[2].Version = true, t0.Add(2*time.Hour), "v1.4.0"
	p = Next(Input{Rollout: ar, Devices: devs, State: p.State, Now: t0.Add(2 * time.Hour)})
	if got := summary(p); !strings.HasSuffix(got, "pi-3=v1.4.0/Updated Complete") {
		t.Errorf("pi-3 back: %s, want it updated and the rollout complete", got)
	}
}

// TestFailureRollsBack: after A completed, B fails on the first device
// (it went back by itself); the rollout stops at its threshold and, with
// autoRollback, every device is named A again.
func TestFailureRollsBack(t *testing.T) {
	a := staged("v1.3.0", "1", true)
	devs := devices("v1.3.0", "v1.3.0", "v1.3.0")
	p := Next(Input{Rollout: a, Devices: devs, Now: t0})
	p = Next(Input{Rollout: a, Devices: devs, State: p.State, Now: t0.Add(time.Second)})
	p = Next(Input{Rollout: a, Devices: devs, State: p.State, Now: t0.Add(2 * time.Second)})
	if p.Status.Rollout.Phase != schema.RolloutComplete {
		t.Fatalf("A: %s, want Complete", summary(p))
	}
	b := staged("v1.4.0", "1", true)
	p = Next(Input{Rollout: b, Devices: devs, State: p.State, Now: t0.Add(time.Minute)})
	if got, want := summary(p), "pi-1=v1.4.0/Updating pi-2=v1.3.0/Pending pi-3=v1.3.0/Pending Progressing"; got != want {
		t.Fatalf("B's first wave:\n got %s\nwant %s", got, want)
	}
	devs[0].Failed, devs[0].Reason = true, "new agent exited at start (exit status 2)"
	p = Next(Input{Rollout: b, Devices: devs, State: p.State, Now: t0.Add(2 * time.Minute)})
	if got, want := summary(p), "pi-1=v1.3.0/RolledBack pi-2=v1.3.0/Pending pi-3=v1.3.0/Pending RolledBack"; got != want {
		t.Fatalf("rolled back:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(p.Status.Rollout.Reason, "exited at start") || p.Status.LastGoodVersion != "v1.3.0" {
		t.Errorf("reason %q, last good %q: want the device's words and v1.3.0", p.Status.Rollout.Reason, p.Status.LastGoodVersion)
	}
}

// TestSilentDeviceFails: an online device that never reports B within
// progressDeadlineSeconds fails; without autoRollback the rollout stops.
func TestSilentDeviceFails(t *testing.T) {
	b := staged("v1.4.0", "1", false)
	devs := devices("v1.3.0", "v1.3.0")
	p := Next(Input{Rollout: b, Devices: devs, Now: t0})
	p = Next(Input{Rollout: b, Devices: devs, State: p.State, Now: t0.Add(3 * time.Minute)})
	if got, want := summary(p), "pi-1=v1.4.0/Failed pi-2=-/Pending Stopped"; got != want {
		t.Fatalf("silent:\n got %s\nwant %s", got, want)
	}
}

// TestNoArtifactForArch: a device whose architecture has no artifact, or
// that never reported one, is named no agent.
func TestNoArtifactForArch(t *testing.T) {
	b := staged("v1.4.0", "1", false)
	b.Spec.Image = ""
	devs := devices("v1.3.0", "v1.3.0")
	devs[0].Arch = "arm"
	devs[1].Arch = ""
	p := Next(Input{Rollout: b, Devices: devs, Now: t0})
	if len(p.Agents) != 0 {
		t.Errorf("agents %v, want none", p.Agents)
	}
}

// TestPure: Next does not modify its input state.
func TestPure(t *testing.T) {
	b := staged("v1.4.0", "1", false)
	devs := devices("v1.3.0")
	p := Next(Input{Rollout: b, Devices: devs, Now: t0})
	before := slices.Collect(func(yield func(string) bool) {
		for k := range p.State.Assigned {
			yield(k)
		}
	})
	_ = Next(Input{Rollout: staged("v1.4.1", "1", false), Devices: devices("v1.3.0", "v1.3.0"), State: p.State, Now: t0.Add(time.Hour)})
	if len(p.State.Assigned) != len(before) || p.State.Spec.Version != "v1.4.0" {
		t.Errorf("input state changed: %+v", p.State)
	}
}
