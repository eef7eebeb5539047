package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// benchInput is a 10,000-device rollout of the strategy at step
// 2 of 4 (10%): the first 1,000 devices by name run the new revision,
// healthy when healthy is set, a twentieth of the fleet is offline and a
// tenth is labelled canary.
func benchInput(healthy bool) Input {
	s := &schema.Staged{
		Steps:           []schema.StagedStep{devices(1), pause(percent(10), "10m"), percent(50), percent(100)},
		MinReadySeconds: 30,
		AutoRollback:    true,
		SelectorOrder:   []string{"canary=true"},
	}
	in := Input{Strategy: s, Revision: "v2", LastGood: "v1", Now: t0,
		State: State{Revision: "v2", Phase: PhaseProgressing, Step: 1, WaveStartedAt: t0.Add(-5 * time.Minute)}}
	const n = 10000
	for i := range n {
		d := Device{Name: fmt.Sprintf("shop-%05d", (i*7919)%n), Online: i%20 != 0, Revision: "v1"}
		if i%10 == 0 {
			d.Labels = map[string]string{"canary": "true"}
		}
		in.Devices = append(in.Devices, d)
	}
	for i := range in.Devices {
		d := &in.Devices[i]
		if d.Name < "shop-01000" {
			d.Revision, d.AssignedAt = "v2", t0.Add(-5*time.Minute)
			d.Ready, d.ReadyChangedAt = healthy || i%2 == 0, t0.Add(-4*time.Minute)
		}
	}
	if healthy {
		in.State.PauseStartedAt = t0.Add(-11 * time.Minute)
	}
	return in
}

// BenchmarkNextWaiting10k: a wave is not healthy yet; nothing moves.
func BenchmarkNextWaiting10k(b *testing.B) {
	in := benchInput(false)
	if p := Next(in); len(p.Added) != 0 || p.State.Step != 1 || p.State.Phase != PhaseProgressing {
		b.Fatalf("unexpected plan: %s", summary(p))
	}
	b.ReportAllocs()
	for b.Loop() {
		Next(in)
	}
}

// BenchmarkNextWaitingSorted10k: the same, with the devices listed by
// name, as the hub's store lists them: no sorting at all.
func BenchmarkNextWaitingSorted10k(b *testing.B) {
	in := benchInput(false)
	slices.SortFunc(in.Devices, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
	if p := Next(in); len(p.Added) != 0 || p.State.Step != 1 || p.State.Phase != PhaseProgressing {
		b.Fatalf("unexpected plan: %s", summary(p))
	}
	b.ReportAllocs()
	for b.Loop() {
		Next(in)
	}
}

// BenchmarkNextWave10k: the wave is healthy and its pause over; the next
// wave takes 4,000 more devices.
func BenchmarkNextWave10k(b *testing.B) {
	in := benchInput(true)
	if p := Next(in); len(p.Added) != 4000 || p.State.Step != 2 || p.State.Phase != PhaseProgressing {
		b.Fatalf("unexpected plan: %s", summary(p))
	}
	b.ReportAllocs()
	for b.Loop() {
		Next(in)
	}
}

// BenchmarkNextRollback10k: failures reach the threshold; every device
// goes back.
func BenchmarkNextRollback10k(b *testing.B) {
	in := benchInput(true)
	for i := range in.Devices {
		if d := &in.Devices[i]; d.Revision == "v2" && d.Online {
			d.Failed, d.Reason = true, "CrashLoopBackOff"
		}
	}
	if p := Next(in); p.State.Phase != PhaseRolledBack {
		b.Fatalf("unexpected plan: %s", p.State.Phase)
	}
	b.ReportAllocs()
	for b.Loop() {
		Next(in)
	}
}
