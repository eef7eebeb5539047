package agentplan

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestPropertyOfflineNeverFailed: over random walks of devices going
// offline and online, reporting the old or the new version and failing
// their trial, a device that is offline is never Failed, a device is only
// named a version the rollout or its last good spec has, and the waves
// never name more devices than the current step allows while progressing.
func TestPropertyOfflineNeverFailed(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		ar := staged("v1.4.0", "2", r.IntN(2) == 0)
		devs := devices("v1.3.0", "v1.3.0", "v1.3.0", "v1.3.0", "v1.3.0")
		var st State
		now := t0
		for step := range 30 {
			for i := range devs {
				switch r.IntN(6) {
				case 0:
					devs[i].Online = !devs[i].Online
				case 1:
					devs[i].Version = "v1.4.0"
				case 2:
					devs[i].Failed, devs[i].Reason = true, "trial failed"
				}
			}
			now = now.Add(time.Duration(r.IntN(300)) * time.Second)
			p := Next(Input{Rollout: ar, Devices: devs, State: st, Now: now})
			st = p.State
			for i, d := range p.Status.Devices {
				if !devs[i].Online && d.Phase == schema.AgentFailed {
					t.Fatalf("seed %d step %d: offline %s is Failed", seed, step, d.Name)
				}
				if a := p.Agents[d.Name]; a != nil && a.Version != "v1.4.0" {
					t.Fatalf("seed %d step %d: %s named %s, want only v1.4.0 (no last good on a first rollout)", seed, step, d.Name, a.Version)
				}
			}
			if rs := p.Status.Rollout; rs.Phase == schema.RolloutProgressing && rs.Step == 1 && len(p.Agents) > 1 {
				t.Fatalf("seed %d step %d: first step of {devices: 1} names %d devices", seed, step, len(p.Agents))
			}
		}
	}
}
