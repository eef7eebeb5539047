package rollout

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// The property tests draw thousands of random cases from fixed seeds, so
// a failure reproduces: the message names the seed.

const propertyCases = 5000

// genStrategy draws a valid Staged strategy.
func genStrategy(r *rand.Rand) *schema.Staged {
	s := &schema.Staged{AutoRollback: r.IntN(2) == 0}
	n := 1 + r.IntN(5)
	dev, pct := int32(0), int32(0)
	for i := 0; i < n-1; i++ {
		var st schema.StagedStep
		if r.IntN(2) == 0 {
			dev += int32(r.IntN(4))
			st.Devices = ptr(max(dev, 1))
		} else {
			pct += int32(r.IntN(40))
			st.Percent = ptr(min(max(pct, 1), 100))
		}
		s.Steps = append(s.Steps, st)
	}
	s.Steps = append(s.Steps, percent(100))
	for i := range s.Steps {
		if r.IntN(3) == 0 {
			s.Steps[i].Pause = fmt.Sprintf("%dm", r.IntN(20))
		}
	}
	s.MinReadySeconds = int32(r.IntN(3) * 30)
	if r.IntN(2) == 0 {
		s.ProgressDeadlineSeconds = ptr(int32(120 + r.IntN(1000)))
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		s.FailureThreshold = schema.IntOrPercent(fmt.Sprint(r.IntN(5)))
	case 2:
		s.FailureThreshold = schema.IntOrPercent(fmt.Sprintf("%d%%", r.IntN(40)))
	}
	if r.IntN(3) == 0 {
		s.SelectorOrder = []string{"canary=true", "ring"}
	}
	return s
}

// past draws a time up to d before t0.
func past(r *rand.Rand, d time.Duration) time.Time {
	return t0.Add(-time.Duration(r.Int64N(int64(d))))
}

// genDevices draws n devices, some on the new revision v2, in random
// order.
func genDevices(r *rand.Rand, n int) []Device {
	devs := make([]Device, n)
	for i := range devs {
		d := &devs[i]
		d.Name = fmt.Sprintf("d%03d", i)
		d.Online = r.IntN(5) > 0
		if r.IntN(2) == 0 {
			d.OnlineSince = past(r, time.Hour)
		}
		switch r.IntN(10) {
		case 0, 1, 2:
			d.Revision = "v2"
			d.AssignedAt = past(r, 40*time.Minute)
		case 3:
			d.Revision = ""
		default:
			d.Revision = "v1"
		}
		d.Ready = r.IntN(5) < 3
		if r.IntN(3) > 0 {
			d.ReadyChangedAt = past(r, 20*time.Minute)
		}
		if r.IntN(20) == 0 {
			d.Failed, d.Reason = true, "CrashLoopBackOff"
		}
		switch r.IntN(10) {
		case 0:
			d.Labels = map[string]string{"canary": "true"}
		case 1:
			d.Labels = map[string]string{"ring": "1"}
		}
	}
	r.Shuffle(n, func(i, j int) { devs[i], devs[j] = devs[j], devs[i] })
	return devs
}

// genInput draws a whole input at t0.
func genInput(r *rand.Rand) Input {
	s := genStrategy(r)
	in := Input{Strategy: s, Revision: "v2", LastGood: "v1", Devices: genDevices(r, r.IntN(40)), Now: t0}
	switch r.IntN(20) {
	case 0:
		in.LastGood = ""
	case 1:
		in.LastGood = "v2"
	}
	if r.IntN(4) > 0 {
		phases := []Phase{PhaseProgressing, PhaseProgressing, PhaseProgressing, PhasePaused, PhaseComplete, PhaseStopped, PhaseRolledBack}
		in.State = State{
			Revision:      "v2",
			Phase:         phases[r.IntN(len(phases))],
			Step:          r.IntN(len(s.Steps) + 1),
			WaveStartedAt: past(r, 30*time.Minute),
			Paused:        r.IntN(10) == 0,
		}
		if r.IntN(2) == 0 {
			in.State.PauseStartedAt = past(r, 30*time.Minute)
		}
		if r.IntN(10) == 0 {
			in.State.Revision = "v0"
		}
	}
	return in
}

// roundTrip returns st after a JSON round trip, as a restarted hub reads
// it from its store.
func roundTrip(t *testing.T, st State) State {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatalf("marshal state: %v", err)
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal state %s: %v", b, err)
	}
	return out
}

// apply returns the input the next call sees once the hub has carried out
// p at in.Now and the devices have not reported since: the devices of
// p.Added run v2 from now, those of p.Old the last good revision, and the
// state comes back from the store.
func apply(t *testing.T, in Input, p Plan) Input {
	t.Helper()
	next := in
	next.State = roundTrip(t, p.State)
	next.Devices = slices.Clone(in.Devices)
	for i := range next.Devices {
		d := &next.Devices[i]
		switch {
		case slices.Contains(p.Added, d.Name):
			d.Revision, d.AssignedAt = in.Revision, in.Now
			d.Ready, d.ReadyChangedAt, d.Failed, d.Reason = false, in.Now, false, ""
		case !p.IsNew(d.Name):
			d.Revision = in.LastGood
		}
	}
	return next
}

func onNewInInput(in Input) int {
	n := 0
	for _, d := range in.Devices {
		if d.Revision == in.Revision {
			n++
		}
	}
	return n
}

func TestPropertiesOfOneCall(t *testing.T) {
	for seed := range uint64(propertyCases) {
		r := rand.New(rand.NewPCG(seed, 28))
		in := genInput(r)
		p := Next(in)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: %s\nplan: %s", seed, fmt.Sprintf(format, args...), summary(p))
		}
		n := len(in.Devices)

		// New and Old are sorted and split the devices.
		if !slices.IsSorted(p.New) || !slices.IsSorted(p.Old) || !slices.IsSorted(p.Added) {
			fail("lists not sorted")
		}
		all := append(slices.Clone(p.New), p.Old...)
		slices.Sort(all)
		var names []string
		for _, d := range in.Devices {
			names = append(names, d.Name)
		}
		slices.Sort(names)
		if !slices.Equal(all, names) {
			fail("new %v and old %v do not split the devices %v", p.New, p.Old, names)
		}

		// A wave never exceeds its share: devices are added only up to
		// the step's target; those already on the new revision keep it.
		target := in.Strategy.StepTarget(p.State.Step, n)
		switch {
		case p.State.Phase == PhaseComplete:
			if len(p.New) != n {
				fail("complete with %d of %d devices on the new revision", len(p.New), n)
			}
		case len(p.Added) > 0 && len(p.New) > target:
			fail("added %v: %d devices on the new revision, more than the %d of step %d", p.Added, len(p.New), target, p.State.Step+1)
		case len(p.New) > max(target, onNewInInput(in)):
			fail("%d devices on the new revision, more than the share %d or the %d already on it", len(p.New), target, onNewInInput(in))
		}

		// Offline devices never count as failures: the plan does not
		// depend on what an offline device reports failing.
		online := 0
		for _, d := range in.Devices {
			if d.Online && p.IsNew(d.Name) {
				online++
			}
		}
		if p.Status.Failed > online {
			fail("%d failures among %d online devices on the new revision", p.Status.Failed, online)
		}
		flipped := in
		flipped.Devices = slices.Clone(in.Devices)
		for i := range flipped.Devices {
			if d := &flipped.Devices[i]; !d.Online {
				d.Failed, d.Reason = !d.Failed, "ErrImagePull"
			}
		}
		if q := Next(flipped); !reflect.DeepEqual(q, p) {
			fail("flipping offline devices' failures changed the plan to %s", summary(q))
		}

		// A rollback always targets the last good revision, and only
		// when the strategy asks for it.
		if p.State.Phase == PhaseRolledBack {
			if in.LastGood == "" || len(p.New) != 0 || len(p.Old) != n {
				fail("rolled back with last good %q: new %v", in.LastGood, p.New)
			}
			wasRolledBack := in.State.Revision == in.Revision && in.State.Phase == PhaseRolledBack
			if !wasRolledBack && !in.Strategy.AutoRollback {
				fail("rolled back without autoRollback")
			}
			if !wasRolledBack && !strings.HasPrefix(p.State.Reason, "rolled back to revision "+in.LastGood+": ") {
				fail("rolled back with the reason %q", p.State.Reason)
			}
		}

		// Failures at the threshold stop the rollout.
		startsOpen := in.State.Revision != in.Revision || !in.State.Phase.Final()
		if startsOpen && in.Revision != in.LastGood {
			reported := 0
			for _, d := range in.Devices {
				if d.Revision == in.Revision && d.Online && d.Failed {
					reported++
				}
			}
			stopped := p.State.Phase == PhaseStopped || p.State.Phase == PhaseRolledBack
			if reported >= in.Strategy.FailureLimit(n) && !stopped {
				fail("%d reported failures reach the limit %d, but the rollout goes on", reported, in.Strategy.FailureLimit(n))
			}
			if stopped && p.State.FinishedAt != in.Now {
				fail("stopped without FinishedAt")
			}
		}

		// Restart safety: the same input with the state read back from
		// the store gives the same plan...
		again := in
		again.State = roundTrip(t, in.State)
		if q := Next(again); !reflect.DeepEqual(q, p) {
			fail("after a state round trip the plan is %s", summary(q))
		}
		// ...and once the plan is carried out, planning again at the same
		// moment from the persisted state changes nothing.
		next := apply(t, in, p)
		q := Next(next)
		if len(q.Added) != 0 || !slices.Equal(q.New, p.New) || !reflect.DeepEqual(q.State, p.State) ||
			q.Status != p.Status || !q.RecheckAt.Equal(p.RecheckAt) {
			fail("planning again from the persisted state gives %s (state %+v, was %+v)", summary(q), q.State, p.State)
		}
	}
}

// fleetSim plays a staged rollout against simulated devices: an online
// good device reports the new revision Ready a little after it gets it, a
// bad one reports it failing, an offline device reports nothing and says,
// from an old report, that it failed.
type fleetSim struct {
	in    Input
	bad   map[string]bool
	delay map[string]time.Duration
	ever  map[string]bool // devices that ever ran the new revision
}

func newFleetSim(r *rand.Rand, badShare float64) *fleetSim {
	s := genStrategy(r)
	n := 1 + r.IntN(80)
	sim := &fleetSim{bad: map[string]bool{}, delay: map[string]time.Duration{}, ever: map[string]bool{}}
	sim.in = Input{Strategy: s, Revision: "v2", LastGood: "v1", Now: t0}
	for i := range n {
		d := Device{Name: fmt.Sprintf("d%03d", i), Revision: "v1", Online: r.IntN(10) > 0}
		if r.IntN(10) == 0 {
			d.Labels = map[string]string{"canary": "true"}
		}
		if !d.Online {
			d.Failed, d.Reason = true, "CrashLoopBackOff"
		}
		sim.in.Devices = append(sim.in.Devices, d)
		sim.bad[d.Name] = d.Online && r.Float64() < badShare
		// Within the smallest deadline the generator draws (120s), minus
		// the largest minReadySeconds (60s).
		sim.delay[d.Name] = time.Duration(r.IntN(60)) * time.Second
	}
	return sim
}

// observe updates what the devices report at sim.in.Now.
func (sim *fleetSim) observe() {
	now := sim.in.Now
	for i := range sim.in.Devices {
		d := &sim.in.Devices[i]
		if !d.Online || d.Revision != sim.in.Revision {
			continue
		}
		at := d.AssignedAt.Add(sim.delay[d.Name])
		if now.Before(at) {
			continue
		}
		if sim.bad[d.Name] {
			d.Failed, d.Reason = true, "CrashLoopBackOff"
		} else if !d.Ready {
			d.Ready, d.ReadyChangedAt = true, at
		}
	}
}

// nextEvent is the next moment a device reports something new.
func (sim *fleetSim) nextEvent() time.Time {
	var next time.Time
	for _, d := range sim.in.Devices {
		if !d.Online || d.Revision != sim.in.Revision || d.Ready || d.Failed {
			continue
		}
		if at := d.AssignedAt.Add(sim.delay[d.Name]); at.After(sim.in.Now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// run plays the rollout to its end and returns the last plan.
func (sim *fleetSim) run(t *testing.T, seed uint64) Plan {
	t.Helper()
	n := len(sim.in.Devices)
	for range 10000 {
		sim.observe()
		p := Next(sim.in)
		if p.State.Phase != PhaseComplete && len(p.Added) > 0 {
			if target := sim.in.Strategy.StepTarget(p.State.Step, n); len(p.New) > target {
				t.Fatalf("seed %d: %d devices on the new revision, more than the %d of step %d", seed, len(p.New), target, p.State.Step+1)
			}
		}
		for _, name := range p.New {
			sim.ever[name] = true
		}
		if p.State.Phase.Final() {
			return p
		}
		sim.in = apply(t, sim.in, p)
		next := p.RecheckAt
		if ev := sim.nextEvent(); !ev.IsZero() && (next.IsZero() || ev.Before(next)) {
			next = ev
		}
		if next.IsZero() {
			t.Fatalf("seed %d: the rollout is stuck: %s", seed, summary(p))
		}
		sim.in.Now = next
	}
	t.Fatalf("seed %d: the rollout did not end", seed)
	return Plan{}
}

func TestRolloutOfHealthyDevicesCompletes(t *testing.T) {
	for seed := range uint64(propertyCases / 5) {
		r := rand.New(rand.NewPCG(seed, 1))
		sim := newFleetSim(r, 0)
		p := sim.run(t, seed)
		if p.State.Phase != PhaseComplete {
			t.Fatalf("seed %d: healthy devices, yet %s", seed, summary(p))
		}
		minReady := sim.in.Strategy.MinReady()
		for _, d := range sim.in.Devices {
			if !d.Online {
				continue
			}
			if !p.IsNew(d.Name) || !d.Ready || p.State.FinishedAt.Before(d.ReadyChangedAt.Add(minReady)) {
				t.Fatalf("seed %d: complete at %s but online device %s is not healthy on the new revision: %+v",
					seed, rel(p.State.FinishedAt), d.Name, d)
			}
		}
	}
}

func TestRolloutStopsAtTheFailureThreshold(t *testing.T) {
	stops := 0
	for seed := range uint64(propertyCases / 5) {
		r := rand.New(rand.NewPCG(seed, 2))
		sim := newFleetSim(r, 0.1+r.Float64()*0.3)
		p := sim.run(t, seed)
		n := len(sim.in.Devices)
		bad := 0
		for _, b := range sim.bad {
			if b {
				bad++
			}
		}
		limit := sim.in.Strategy.FailureLimit(n)
		switch {
		case bad < limit:
			// Every bad device fails before the rollout can complete;
			// fewer than the limit never stop it.
			if p.State.Phase != PhaseComplete || p.Status.Failed != bad {
				t.Fatalf("seed %d: %d bad devices, below the limit %d, yet %s", seed, bad, limit, summary(p))
			}
		case sim.in.Strategy.AutoRollback:
			if p.State.Phase != PhaseRolledBack || len(p.New) != 0 {
				t.Fatalf("seed %d: %d bad devices reach the limit %d: want a rollback, got %s", seed, bad, limit, summary(p))
			}
		default:
			if p.State.Phase != PhaseStopped {
				t.Fatalf("seed %d: %d bad devices reach the limit %d: want a stop, got %s", seed, bad, limit, summary(p))
			}
		}
		if p.State.Phase == PhaseComplete {
			continue
		}
		stops++
		// No device beyond the share of the step the rollout stopped at
		// ever ran the bad revision.
		if target := sim.in.Strategy.StepTarget(p.State.Step, n); len(sim.ever) > target {
			t.Fatalf("seed %d: %d devices ran the bad revision, more than the %d of step %d", seed, len(sim.ever), target, p.State.Step+1)
		}
	}
	if stops < propertyCases/50 {
		t.Errorf("only %d simulations stopped: the generator does not exercise the threshold", stops)
	}
}
