package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func devices(n int32) schema.StagedStep { return schema.StagedStep{Devices: ptr(n)} }
func percent(n int32) schema.StagedStep { return schema.StagedStep{Percent: ptr(n)} }

func pause(s schema.StagedStep, d string) schema.StagedStep {
	s.Pause = d
	return s
}

// online and offline are devices on the old revision v1.
func online(name string, labels ...string) Device {
	d := Device{Name: name, Online: true, Revision: "v1", Labels: map[string]string{}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		d.Labels[k] = v
	}
	return d
}

func offline(name string) Device {
	d := online(name)
	d.Online = false
	return d
}

// onNew puts d on the new revision v2, given it at t0+at.
func onNew(d Device, at time.Duration) Device {
	d.Revision, d.AssignedAt = "v2", t0.Add(at)
	return d
}

// ready makes d report v2 Ready since t0+at.
func ready(d Device, at time.Duration) Device {
	d.Ready, d.ReadyChangedAt = true, t0.Add(at)
	return d
}

// unready makes d report v2 not Ready since t0+at.
func unready(d Device, at time.Duration) Device {
	d.Ready, d.ReadyChangedAt = false, t0.Add(at)
	return d
}

func failing(d Device, reason string) Device {
	d.Failed, d.Reason = true, reason
	return d
}

func since(d Device, at time.Duration) Device {
	d.OnlineSince = t0.Add(at)
	return d
}

// window is d holding the new revision back for its update window,
// which opens (or opened) at t0+at.
func window(d Device, at time.Duration) Device {
	d.WindowOpensAt = t0.Add(at)
	return d
}

// summary renders a plan compactly for comparison; times are relative
// to t0.
func summary(p Plan) string {
	s := p.Status
	out := fmt.Sprintf("%s %d/%d new=%v added=%v ready=%d failed=%d pending=%d", s.Phase, s.Step, s.Steps,
		p.New, p.Added, s.Ready, s.Failed, s.Pending)
	if s.Waiting != "" {
		out += " | " + s.Waiting
	}
	if !s.WaitUntil.IsZero() {
		out += " until " + rel(s.WaitUntil)
	}
	if !p.RecheckAt.IsZero() {
		out += " | recheck " + rel(p.RecheckAt)
	}
	if s.Reason != "" {
		out += " | " + s.Reason
	}
	return out
}

func rel(t time.Time) string {
	d := t.Sub(t0)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

// issueStrategy is close to the issue's example: a canary, half with a
// pause, then everyone.
func issueStrategy() *schema.Staged {
	return &schema.Staged{
		Steps:           []schema.StagedStep{devices(1), pause(percent(50), "10m"), percent(100)},
		MinReadySeconds: 30,
		AutoRollback:    true,
	}
}

// at step returns a state of the v2 rollout at step i (from 0) whose
// wave started at t0+wave.
func atStep(i int, wave time.Duration) State {
	return State{Revision: "v2", Phase: PhaseProgressing, Step: i, WaveStartedAt: t0.Add(wave)}
}

func TestNext(t *testing.T) {
	const m = time.Minute
	withOrder := issueStrategy()
	withOrder.SelectorOrder = []string{"canary=true", "ring"}
	noRollback := issueStrategy()
	noRollback.AutoRollback = false
	tolerant := issueStrategy()
	tolerant.FailureThreshold = "50%"
	twoFailures := issueStrategy()
	twoFailures.FailureThreshold = "2"

	tests := []struct {
		name     string
		strategy *schema.Staged
		lastGood string // "v1" unless set; "-" for none
		devices  []Device
		state    State
		want     string
	}{
		{
			name:    "a new revision starts with the canary, by name",
			devices: []Device{online("c"), online("a"), online("b"), online("d")},
			want:    "Progressing 1/3 new=[a] added=[a] ready=0 failed=0 pending=4 | step 1 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:     "selectorOrder goes first, in the order of its entries",
			strategy: withOrder,
			devices:  []Device{online("a"), online("b", "ring=1"), online("c", "canary=true"), online("d", "canary=false")},
			want:     "Progressing 1/3 new=[c] added=[c] ready=0 failed=0 pending=4 | step 1 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:     "selectorOrder: a key alone matches any value",
			strategy: withOrder,
			devices:  []Device{online("a"), online("b", "ring=1"), online("c", "canary=false")},
			want:     "Progressing 1/3 new=[b] added=[b] ready=0 failed=0 pending=3 | step 1 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "online devices go before offline ones",
			devices: []Device{offline("a"), online("b"), online("c")},
			want:    "Progressing 1/3 new=[b] added=[b] ready=0 failed=0 pending=3 | step 1 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "the canary is Ready but not for minReadySeconds yet",
			devices: []Device{ready(onNew(online("a"), -m), -10*time.Second), online("b"), online("c"), online("d")},
			state:   atStep(0, -m),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=4 | step 1 of 3: 1 device to become healthy (1 Ready for less than 30s) until +20s | recheck +20s",
		},
		{
			name:    "a healthy canary starts the next wave: 50% of 4",
			devices: []Device{ready(onNew(online("a"), -2*m), -m), online("b"), online("c"), online("d")},
			state:   atStep(0, -2*m),
			want:    "Progressing 2/3 new=[a b] added=[b] ready=1 failed=0 pending=3 | step 2 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "a healthy wave starts its pause",
			devices: []Device{ready(onNew(online("a"), -9*m), -8*m), ready(onNew(online("b"), -5*m), -4*m), online("c"), online("d")},
			state:   atStep(1, -5*m),
			want:    "Progressing 2/3 new=[a b] added=[] ready=2 failed=0 pending=2 | step 2 of 3: pausing 10m0s before step 3 until +10m0s | recheck +10m0s",
		},
		{
			name:    "the pause over, the last wave goes out",
			devices: []Device{ready(onNew(online("a"), -29*m), -28*m), ready(onNew(online("b"), -25*m), -24*m), online("c"), online("d")},
			state: func() State {
				s := atStep(1, -25*m)
				s.PauseStartedAt = t0.Add(-10 * m)
				return s
			}(),
			want: "Progressing 3/3 new=[a b c d] added=[c d] ready=2 failed=0 pending=2 | step 3 of 3: 2 devices to become healthy (2 starting) until +10m0s | recheck +10m0s",
		},
		{
			name: "a device that stops being healthy restarts the pause",
			devices: []Device{ready(onNew(online("a"), -9*m), -8*m), unready(onNew(online("b"), -5*m), -10*time.Second),
				online("c"), online("d")},
			state: func() State {
				s := atStep(1, -5*m)
				s.PauseStartedAt = t0.Add(-3 * m)
				return s
			}(),
			want: "Progressing 2/3 new=[a b] added=[] ready=1 failed=0 pending=3 | step 2 of 3: 1 device to become healthy (1 starting) until +9m50s | recheck +9m50s",
		},
		{
			name: "every device healthy after the last step: complete",
			devices: []Device{ready(onNew(online("a"), -time.Hour), -time.Hour), ready(onNew(online("b"), -time.Hour), -time.Hour),
				ready(onNew(online("c"), -5*m), -4*m), ready(onNew(online("d"), -5*m), -4*m)},
			state: atStep(2, -5*m),
			want:  "Complete 3/3 new=[a b c d] added=[] ready=4 failed=0 pending=0",
		},
		{
			name:    "an image that cannot be pulled rolls back to the last good revision",
			devices: []Device{failing(onNew(online("a"), -m), "ImagePullBackOff"), online("b"), online("c"), online("d")},
			state:   atStep(0, -m),
			want:    "RolledBack 1/3 new=[] added=[] ready=0 failed=0 pending=4 | rolled back to revision v1: 1 of 4 devices failed revision v2, reaching failureThreshold 0: a (ImagePullBackOff)",
		},
		{
			name:     "without autoRollback the rollout stops where it is",
			strategy: noRollback,
			devices:  []Device{failing(onNew(online("a"), -m), "CrashLoopBackOff"), online("b"), online("c"), online("d")},
			state:    atStep(0, -m),
			want:     "Stopped 1/3 new=[a] added=[] ready=0 failed=1 pending=3 | stopped: 1 of 4 devices failed revision v2, reaching failureThreshold 0: a (CrashLoopBackOff); autoRollback is off",
		},
		{
			name:     "nothing to roll back to on a first rollout",
			lastGood: "-",
			devices:  []Device{failing(onNew(online("a"), -m), ""), online("b")},
			state:    atStep(0, -m),
			want:     "Stopped 1/3 new=[a] added=[] ready=0 failed=1 pending=1 | stopped: 1 of 2 devices failed revision v2, reaching failureThreshold 0: a (failed); not rolled back: no earlier revision completed its rollout",
		},
		{
			name:    "online and not Ready within progressDeadlineSeconds is a failure",
			devices: []Device{onNew(online("a"), -11*m), online("b")},
			state:   atStep(0, -11*m),
			want:    "RolledBack 1/3 new=[] added=[] ready=0 failed=0 pending=2 | rolled back to revision v1: 1 of 2 devices failed revision v2, reaching failureThreshold 0: a (not Ready within 10m0s)",
		},
		{
			name:    "an offline device is never a failure, and is waited for at most progressDeadlineSeconds",
			devices: []Device{failing(onNew(offline("a"), -11*m), "CrashLoopBackOff"), online("b"), online("c"), online("d")},
			state:   atStep(0, -11*m),
			want:    "Progressing 2/3 new=[a b] added=[b] ready=0 failed=0 pending=4 | step 2 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "an offline device holds its wave back until its deadline",
			devices: []Device{onNew(offline("a"), -m), online("b"), online("c"), online("d")},
			state:   atStep(0, -m),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=4 | step 1 of 3: 1 device to become healthy (1 offline) until +9m0s | recheck +9m0s",
		},
		{
			name:    "an offline device's last Ready report stands",
			devices: []Device{ready(onNew(offline("a"), -5*m), -4*m), online("b"), online("c"), online("d")},
			state:   atStep(0, -5*m),
			want:    "Progressing 2/3 new=[a b] added=[b] ready=1 failed=0 pending=3 | step 2 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "a device that reconnects gets a whole deadline from then",
			devices: []Device{since(onNew(online("a"), -time.Hour), -m), online("b")},
			state:   atStep(0, -time.Hour),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +9m0s | recheck +9m0s",
		},
		{
			name:    "a device outside its update window is pending, not failed, past its deadline",
			devices: []Device{window(onNew(online("a"), -time.Hour), 2*time.Hour), online("b")},
			state:   atStep(0, -time.Hour),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +2h0m0s | recheck +2h0m0s",
		},
		{
			name:    "a device's deadline counts from its window opening",
			devices: []Device{window(onNew(online("a"), -time.Hour), -3*m), online("b")},
			state:   atStep(0, -time.Hour),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +7m0s | recheck +7m0s",
		},
		{
			name:    "a device whose readiness flaps gets a whole deadline from the flap",
			devices: []Device{unready(onNew(online("a"), -time.Hour), -2*m), online("b")},
			state:   atStep(0, -time.Hour),
			want:    "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +8m0s | recheck +8m0s",
		},
		{
			name: "without AssignedAt, the deadline counts from the wave's start",
			devices: func() []Device {
				d := onNew(online("a"), 0)
				d.AssignedAt = time.Time{}
				return []Device{d, online("b")}
			}(),
			state: atStep(0, -4*m),
			want:  "Progressing 1/3 new=[a] added=[] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +6m0s | recheck +6m0s",
		},
		{
			name:     "failures below the threshold do not hold the rollout back",
			strategy: tolerant,
			devices:  []Device{failing(onNew(online("a"), -m), "CrashLoopBackOff"), online("b"), online("c"), online("d")},
			state:    atStep(0, -m),
			want:     "Progressing 2/3 new=[a b] added=[b] ready=0 failed=1 pending=3 | step 2 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:     "a count threshold: the second failure stops it",
			strategy: twoFailures,
			devices: []Device{failing(onNew(online("a"), -m), "CrashLoopBackOff"), failing(onNew(online("b"), -m), "ErrImagePull"),
				failing(onNew(online("c"), -m), "CrashLoopBackOff"), failing(onNew(online("d"), -m), "CrashLoopBackOff"), online("e")},
			state: atStep(1, -m),
			want:  "RolledBack 2/3 new=[] added=[] ready=0 failed=0 pending=5 | rolled back to revision v1: 4 of 5 devices failed revision v2, reaching failureThreshold 2: a (CrashLoopBackOff), b (ErrImagePull), c (CrashLoopBackOff) and 1 more",
		},
		{
			name:    "paused: no wave starts",
			devices: []Device{ready(onNew(online("a"), -2*m), -m), online("b"), online("c"), online("d")},
			state:   func() State { s := atStep(0, -2*m); s.Paused = true; return s }(),
			want:    "Paused 1/3 new=[a] added=[] ready=1 failed=0 pending=3 | paused by an operator: no step starts until the rollout is resumed",
		},
		{
			name:    "paused: failures still stop the rollout",
			devices: []Device{failing(onNew(online("a"), -2*m), "CrashLoopBackOff"), online("b")},
			state:   func() State { s := atStep(0, -2*m); s.Paused = true; return s }(),
			want:    "RolledBack 1/3 new=[] added=[] ready=0 failed=0 pending=2 | rolled back to revision v1: 1 of 2 devices failed revision v2, reaching failureThreshold 0: a (CrashLoopBackOff)",
		},
		{
			name:    "paused before the first wave",
			devices: []Device{online("a"), online("b")},
			state:   State{Paused: true},
			want:    "Paused 1/3 new=[] added=[] ready=0 failed=0 pending=2 | paused by an operator: no step starts until the rollout is resumed",
		},
		{
			name:     "rolling out the last good revision is complete at once",
			lastGood: "v2",
			devices:  []Device{online("a"), ready(onNew(online("b"), -m), -m)},
			want:     "Complete 1/3 new=[a b] added=[a] ready=1 failed=0 pending=1",
		},
		{
			name:    "a state for another revision is discarded",
			devices: []Device{online("a"), online("b")},
			state:   State{Revision: "v0", Phase: PhaseRolledBack, Step: 2, Reason: "old news"},
			want:    "Progressing 1/3 new=[a] added=[a] ready=0 failed=0 pending=2 | step 1 of 3: 1 device to become healthy (1 starting) until +10m0s | recheck +10m0s",
		},
		{
			name:    "a device that joins a complete rollout gets the new revision",
			devices: []Device{ready(onNew(online("a"), -time.Hour), -time.Hour), online("b")},
			state:   State{Revision: "v2", Phase: PhaseComplete, Step: 2},
			want:    "Complete 3/3 new=[a b] added=[b] ready=1 failed=0 pending=1",
		},
		{
			name:    "a rolled back revision stays rolled back",
			devices: []Device{ready(onNew(online("a"), -time.Hour), -time.Hour), online("b")},
			state:   State{Revision: "v2", Phase: PhaseRolledBack, Reason: "rolled back to revision v1: earlier"},
			want:    "RolledBack 1/3 new=[] added=[] ready=0 failed=0 pending=2 | rolled back to revision v1: earlier",
		},
		{
			name:    "a wave never takes more devices than its share, and devices already on it keep it",
			devices: []Device{onNew(online("a"), -m), onNew(online("b"), -m), online("c")},
			state:   atStep(0, -m),
			want:    "Progressing 1/3 new=[a b] added=[] ready=0 failed=0 pending=3 | step 1 of 3: 2 devices to become healthy (2 starting) until +9m0s | recheck +9m0s",
		},
		{
			name:    "no devices: the steps still go by, pauses included",
			devices: nil,
			want:    "Progressing 2/3 new=[] added=[] ready=0 failed=0 pending=0 | step 2 of 3: pausing 10m0s before step 3 until +10m0s | recheck +10m0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.strategy
			if s == nil {
				s = issueStrategy()
			}
			lastGood := tt.lastGood
			switch lastGood {
			case "":
				lastGood = "v1"
			case "-":
				lastGood = ""
			}
			in := Input{Strategy: s, Revision: "v2", LastGood: lastGood, Devices: tt.devices, State: tt.state, Now: t0}
			p := Next(in)
			if got := summary(p); got != tt.want {
				t.Errorf("plan:\n got  %s\n want %s", got, tt.want)
			}
			if len(p.New)+len(p.Old) != len(tt.devices) {
				t.Errorf("new %v and old %v do not cover the %d devices", p.New, p.Old, len(tt.devices))
			}
		})
	}
}

func TestNextDoesNotModifyInput(t *testing.T) {
	devs := []Device{online("b"), online("a"), onNew(online("c"), -time.Minute)}
	in := Input{Strategy: issueStrategy(), Revision: "v2", LastGood: "v1", Devices: devs, Now: t0}
	before := fmt.Sprint(devs)
	Next(in)
	if after := fmt.Sprint(devs); after != before {
		t.Errorf("Next modified its input:\n before %s\n after  %s", before, after)
	}
}

func TestIsNew(t *testing.T) {
	p := Next(Input{Strategy: &schema.Staged{Steps: []schema.StagedStep{devices(2), percent(100)}}, Revision: "v2",
		Devices: []Device{online("c"), online("a"), online("b")}, Now: t0})
	for name, want := range map[string]bool{"a": true, "b": true, "c": false, "zz": false} {
		if got := p.IsNew(name); got != want {
			t.Errorf("IsNew(%q) = %v, want %v (new %v)", name, got, want, p.New)
		}
	}
}
