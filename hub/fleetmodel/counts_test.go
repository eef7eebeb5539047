package fleetmodel

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recount counts from scratch, device by device, through the read API.
func recount(m *Model) (devices, online, converged int64) {
	for _, ref := range m.Devices(schema.LabelSelector{}) {
		devices++
		st, on := m.DeviceState(ref.Name, ref.UID)
		if on {
			online++
		}
		if ds := m.Desired(ref.Name); ds != nil && Converged(ds, st) {
			converged++
		}
	}
	return devices, online, converged
}

// TestCountsMatchRecount drives a model through random changes of
// registrations, desired states, reports, events and time. After every
// step the counts it keeps must equal a full recount.
func TestCountsMatchRecount(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { countsVsRecount(t, seed, 10*time.Second) })
		// Staleness off (the hub's default): presence is the online flag.
		t.Run(fmt.Sprint("seed", seed, "/no-staleness"), func(t *testing.T) { countsVsRecount(t, seed, -1) })
	}
}

// TestNoStaleness: with StaleAfter negative (the hub's default, agents
// that do not heartbeat) a connected device stays online however long it
// is silent, and is offline as soon as its online topic says so.
func TestNoStaleness(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	m := New(Options{Now: clk.Now, StaleAfter: -1})
	m.Writer().PutDevice("pi", Device{UID: "u"})
	set := func(on bool) {
		m.UpdateReport("pi", "u", func(r *Report, _ bool) bool {
			r.Online = on
			if on {
				r.LastSeen = m.Now()
			}
			return true
		})
	}
	set(true)
	clk.add(30 * 24 * time.Hour)
	if _, on := m.DeviceState("pi", "u"); !on || m.OnlineCount() != 1 {
		t.Fatalf("a connected device silent for 30 days: online %v, count %d; want online", on, m.OnlineCount())
	}
	if info := m.DeviceInfo("pi", "u"); info.Stale || !info.Online {
		t.Fatalf("info %+v: want online, not stale", info)
	}
	set(false)
	if _, on := m.DeviceState("pi", "u"); on || m.OnlineCount() != 0 {
		t.Fatalf("after its last will: online %v, count %d; want offline", on, m.OnlineCount())
	}
}

func countsVsRecount(t *testing.T, seed uint64, staleAfter time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	m := New(Options{Now: clk.Now, StaleAfter: staleAfter})
	w := m.Writer()
	name := func() string { return fmt.Sprintf("d%d", rng.IntN(12)) }
	uid := func() string { return fmt.Sprintf("u%d", rng.IntN(3)) }
	gen := func() int64 { return int64(1 + rng.IntN(3)) }
	for step := range 3000 {
		var what string
		switch op := rng.IntN(12); op {
		case 0, 1:
			n, u := name(), uid()
			what = "register " + n + " " + u
			w.PutDevice(n, Device{UID: u, Labels: map[string]string{"site": fmt.Sprint(rng.IntN(2))}})
		case 2:
			n := name()
			what = "unregister " + n
			w.DeleteDevice(n)
		case 3, 4:
			n, g := name(), gen()
			what = fmt.Sprintf("desired %s gen %d", n, g)
			ds := &schema.DesiredState{Device: n, Generation: g, Store: "s", Pods: []schema.Pod{{Name: "web", Hash: "h"}}}
			w.SetDesired(1, func(int) (string, *schema.DesiredState) { return n, ds })
		case 5:
			n := name()
			what = "remove " + n
			w.SetDesired(1, func(int) (string, *schema.DesiredState) { return n, nil })
		case 6, 7:
			n, u, g, ready := name(), uid(), gen(), rng.IntN(3) > 0
			what = fmt.Sprintf("status %s %s gen %d ready %v", n, u, g, ready)
			st := &schema.DeviceStatus{Device: n, ObservedGeneration: g, Store: "s",
				Pods: []schema.PodStatus{{Name: "web", Hash: "h", Phase: schema.PhaseRunning, Ready: ready}}}
			m.UpdateReport(n, u, func(r *Report, _ bool) bool {
				r.Status, r.LastSeen = st, m.Now()
				return true
			})
		case 8:
			n, u, on := name(), uid(), rng.IntN(2) == 0
			what = fmt.Sprintf("online %s %s %v", n, u, on)
			m.UpdateReport(n, u, func(r *Report, _ bool) bool {
				r.Online = on
				if on {
					r.LastSeen = m.Now()
				}
				return true
			})
		case 9:
			n, u := name(), uid()
			what = "event " + n
			m.AddEvent(n, u, schema.Event{Device: n, Type: schema.EventNormal, Reason: "r"}, 4)
		case 10:
			d := time.Duration(rng.IntN(4000)) * time.Millisecond
			what = fmt.Sprint("time +", d)
			clk.add(d)
		default:
			n := name()
			what = "load " + n
			m.LoadReports(map[string]Report{n: {Status: &schema.DeviceStatus{Device: n, ObservedGeneration: gen(), Store: "s"}, LastSeen: clk.Now()}})
		}
		if step%500 == 499 {
			// A reload replaces everything at once.
			devices := map[string]Device{}
			for _, ref := range m.Devices(schema.LabelSelector{}) {
				d, _ := w.Device(ref.Name)
				devices[ref.Name] = d
			}
			w.Replace(devices, nil)
		}
		gd, gon, gconv := m.Counts()
		wd, won, wconv := recount(m)
		if gd != wd || gon != won || gconv != wconv {
			t.Fatalf("step %d (%s): counts %d/%d/%d (devices/online/converged), a recount gives %d/%d/%d",
				step, what, gd, gon, gconv, wd, won, wconv)
		}
		if m.OnlineCount() != gon || m.ConvergedCount() != gconv || int64(m.DeviceCount()) != gd {
			t.Fatalf("step %d (%s): OnlineCount, ConvergedCount or DeviceCount disagree with Counts", step, what)
		}
		if pd, pon, pconv := presenceCounts(m); pd != gd || pon != gon || pconv != gconv {
			t.Fatalf("step %d (%s): DevicePresences add up to %d/%d/%d (devices/online/converged), Counts says %d/%d/%d",
				step, what, pd, pon, pconv, gd, gon, gconv)
		}
	}
}

// TestOnlineAtTheStaleEdge: a device last heard from exactly StaleAfter
// ago is online; a nanosecond later it is not, in the counts as in
// DeviceState.
func TestOnlineAtTheStaleEdge(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 500_000_000)}
	m := New(Options{Now: clk.Now, StaleAfter: time.Minute})
	m.Writer().PutDevice("pi", Device{UID: "u"})
	m.UpdateReport("pi", "u", func(r *Report, wasOnline bool) bool {
		if wasOnline {
			t.Error("a device never heard from was online")
		}
		r.Online, r.LastSeen = true, clk.Now()
		return true
	})
	for _, tt := range []struct {
		after time.Duration
		want  int64
	}{{0, 1}, {time.Minute, 1}, {time.Nanosecond, 0}} {
		clk.add(tt.after)
		_, on := m.DeviceState("pi", "u")
		if got := m.OnlineCount(); got != tt.want || on != (tt.want == 1) {
			t.Errorf("after +%v: online count %d, DeviceState online %v; want %d", tt.after, got, on, tt.want)
		}
	}
}

// TestReportOfAnEarlierDevice: a report belongs to the device (uid) it
// came for; a new device of the same name starts afresh, and a report
// loaded from the store (no uid) counts for whichever device has the name.
func TestReportOfAnEarlierDevice(t *testing.T) {
	m := New(Options{})
	w := m.Writer()
	w.PutDevice("pi", Device{UID: "old"})
	m.UpdateReport("pi", "old", func(r *Report, _ bool) bool {
		r.Status, r.Online, r.LastSeen = &schema.DeviceStatus{Device: "pi"}, true, m.Now()
		return true
	})
	w.PutDevice("pi", Device{UID: "new"})
	if st, on := m.DeviceState("pi", "new"); st != nil || on {
		t.Errorf("the new device sees the old one's report: %+v %v", st, on)
	}
	if _, on, _ := m.Counts(); on != 0 {
		t.Errorf("online %d, want 0: the report is the old device's", on)
	}
	m.UpdateReport("pi", "new", func(r *Report, wasOnline bool) bool {
		if wasOnline || r.Status != nil {
			t.Errorf("the new device's report starts from the old one's: %+v", r)
		}
		return false
	})
	m.LoadReports(map[string]Report{"other": {Status: &schema.DeviceStatus{Device: "other"}}})
	if st, _ := m.DeviceState("other", "any"); st == nil {
		t.Error("a stored report is not the device's")
	}
	if !m.HasReport("pi") || m.HasReport("ghost") {
		t.Error("HasReport is wrong")
	}
}
