package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/schema"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

type message struct {
	topic    string
	retained bool
	payload  []byte
}

type fakePub struct {
	mu   sync.Mutex
	msgs []message
	err  error
	// failTopic, if set, fails every publish to that topic alone.
	failTopic string
}

func (p *fakePub) Publish(_ context.Context, topic string, retained bool, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.failTopic != "" && topic == p.failTopic {
		return errors.New("publish to " + topic + " failed")
	}
	p.msgs = append(p.msgs, message{topic, retained, payload})
	return nil
}

func (p *fakePub) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

func (p *fakePub) all() []message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]message(nil), p.msgs...)
}

func (p *fakePub) statuses(t *testing.T) []schema.DeviceStatus {
	t.Helper()
	var out []schema.DeviceStatus
	for _, m := range p.all() {
		var st schema.DeviceStatus
		if err := json.Unmarshal(m.payload, &st); err != nil {
			t.Fatal(err)
		}
		if !m.retained || m.topic != "fleet/v1/devices/dev1/status" {
			t.Fatalf("status published to %s retained=%v", m.topic, m.retained)
		}
		out = append(out, st)
	}
	return out
}

func TestReporterCoalescesAndHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{}
		r := NewReporter(ReporterOptions{
			Device: "dev1", Topic: "fleet/v1/devices/dev1/status", Publisher: pub, Version: "v9",
			NodeInfo: func() *schema.NodeInfo { return &schema.NodeInfo{Hostname: "pi"} }, Clock: clk,
			Heartbeat: 30 * time.Second, HeartbeatJitter: -1, // exactly 30 s (TestHeartbeatJitter covers the jitter)
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = r.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		advance := func(d time.Duration) { clk.Advance(d); synctest.Wait() }

		r.Update(schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{}})
		synctest.Wait()
		if n := len(pub.all()); n != 1 {
			t.Fatalf("first status: %d publishes", n)
		}
		// Intermediate states (work in progress) are coalesced.
		for gen := int64(2); gen <= 10; gen++ {
			r.Update(schema.DeviceStatus{ObservedGeneration: gen, Pods: pendingPods()})
			synctest.Wait()
		}
		if n := len(pub.all()); n != 1 {
			t.Fatalf("%d publishes within one interval: not coalesced", n)
		}
		advance(time.Second)
		sts := pub.statuses(t)
		if len(sts) != 2 || sts[1].ObservedGeneration != 10 {
			t.Fatalf("after the interval: %d publishes, last %+v", len(sts), sts[len(sts)-1])
		}
		// Unchanged content is not republished...
		r.Update(schema.DeviceStatus{ObservedGeneration: 10, Pods: pendingPods()})
		advance(5 * time.Second)
		if n := len(pub.all()); n != 2 {
			t.Fatalf("unchanged status republished (%d)", n)
		}
		// ...until the heartbeat, 30 s after the last publish.
		advance(24 * time.Second)
		if n := len(pub.all()); n != 2 {
			t.Fatalf("heartbeat early")
		}
		advance(time.Second)
		sts = pub.statuses(t)
		if len(sts) != 3 || !sts[2].Time.After(sts[1].Time) {
			t.Fatalf("no heartbeat: %d publishes", len(sts))
		}
		st := sts[2]
		if st.Device != "dev1" || st.Kind != schema.KindDeviceStatus || st.Agent.Version != "v9" || st.Agent.OS != goruntime.GOOS ||
			st.Agent.Arch != goruntime.GOARCH || st.Node == nil || st.Node.Hostname != "pi" {
			t.Fatalf("status fields: %+v", st)
		}
		if err := schema.ValidateDeviceStatus(&st); err != nil {
			t.Fatal(err)
		}

		// Offline: the publish fails; Republish after reconnecting sends it.
		pub.setErr(errors.New("not connected"))
		advance(time.Second)
		r.Update(schema.DeviceStatus{ObservedGeneration: 11, Pods: []schema.PodStatus{}})
		synctest.Wait()
		pub.setErr(nil)
		advance(time.Second)
		if n := len(pub.all()); n != 3 {
			t.Fatalf("status sent without a kick")
		}
		r.Republish()
		synctest.Wait()
		sts = pub.statuses(t)
		if len(sts) != 4 || sts[3].ObservedGeneration != 11 {
			t.Fatalf("not republished after reconnect: %d", len(sts))
		}
		// Republish with nothing changed still sends (the broker's
		// retained copy may be stale after a reconnect).
		advance(time.Second)
		r.Republish()
		synctest.Wait()
		if n := len(pub.all()); n != 5 {
			t.Fatalf("forced republish skipped: %d", n)
		}
	})
}

func pendingPods() []schema.PodStatus {
	return []schema.PodStatus{{Name: "web", Hash: "h1", Phase: schema.PhasePending, Containers: []schema.ContainerStatus{
		{Name: "c", Image: "nginx", State: schema.ContainerWaiting, Reason: "Creating"},
	}}}
}

func restartingPods(restarts int32) []schema.PodStatus {
	return []schema.PodStatus{{Name: "web", Hash: "h1", Phase: schema.PhaseRunning, Restarts: restarts, Containers: []schema.ContainerStatus{
		{Name: "c", Image: "nginx", State: schema.ContainerWaiting, Reason: "Restarting", Restarts: restarts},
	}}}
}

func readyPods(hash string, restarts int32) []schema.PodStatus {
	return []schema.PodStatus{{Name: "web", Hash: hash, Phase: schema.PhaseRunning, Ready: true, Restarts: restarts, Containers: []schema.ContainerStatus{
		{Name: "c", Image: "nginx", State: schema.ContainerRunning, Restarts: restarts},
	}}}
}

func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []schema.PodStatus
		want bool
	}{
		{"no pods", []schema.PodStatus{}, true},
		{"ready", readyPods("h1", 0), true},
		{"succeeded", []schema.PodStatus{{Name: "job", Phase: schema.PhaseSucceeded}}, true},
		{"failed", []schema.PodStatus{{Name: "job", Phase: schema.PhaseFailed}}, true},
		{"pending", pendingPods(), false},
		{"restarting", restartingPods(1), false},
		{"unknown", []schema.PodStatus{{Name: "web", Phase: schema.PhaseUnknown}}, false},
		{"one of two pending", append(readyPods("h1", 0), schema.PodStatus{Name: "db", Phase: schema.PhasePending}), false},
	} {
		if got := Settled(&schema.DeviceStatus{Pods: tc.pods}); got != tc.want {
			t.Errorf("%s: Settled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReporterPublishesSettledAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := startReporter(t, ReporterOptions{})
		advance, update, last := rig.advance, rig.update, rig.last

		// The "Pending" status goes out; the converged one follows at
		// once, not an interval later.
		update(2, pendingPods())
		last(1)
		advance(100 * time.Millisecond)
		update(2, readyPods("h1", 0))
		if st := last(2); !st.Pods[0].Ready || !st.Time.Equal(t0.Add(100*time.Millisecond)) {
			t.Fatalf("converged status %+v", st)
		}

		// A flapping intermediate state is still coalesced: at most one
		// publish per interval (from the last publish), carrying the latest.
		for i := int32(1); i <= 9; i++ {
			if i%2 == 1 {
				update(2, restartingPods(i))
			} else {
				update(2, pendingPods())
			}
			advance(100 * time.Millisecond)
		}
		// 900 ms since the converged publish: still held.
		last(2)
		advance(100 * time.Millisecond)
		if st := last(3); st.Pods[0].Ready || st.Pods[0].Restarts != 9 {
			t.Fatalf("coalesced intermediate status %+v", st.Pods[0])
		}
		for i := int32(10); i <= 15; i++ {
			update(2, restartingPods(i))
			advance(100 * time.Millisecond)
		}
		last(3)

		// Back to ready: at once, although the interval is not over.
		update(2, readyPods("h1", 15))
		last(4)
		// A settled status that only changes details (restart count) at
		// the same observedGeneration is coalesced like any change.
		advance(100 * time.Millisecond)
		update(2, readyPods("h1", 16))
		last(4)
		// A new observedGeneration that is already settled goes at once.
		update(3, readyPods("h1", 16))
		if st := last(5); st.ObservedGeneration != 3 {
			t.Fatalf("generation 3 not published: %+v", st)
		}
		// Nothing left held: no extra publish when the interval ends.
		advance(2 * time.Second)
		last(5)
	})
}

func TestEventsRateLimit(t *testing.T) {
	clk := clock.NewFake(t0)
	e := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: &fakePub{}, Clock: clk})
	for i := 0; i < 10; i++ {
		e.Record(schema.EventWarning, "Exited", "web", "c", "container exited")
	}
	if n := e.Pending(); n != 3 {
		t.Fatalf("crash loop: %d events queued, want the burst of 3", n)
	}
	clk.Advance(time.Minute)
	e.Record(schema.EventWarning, "Exited", "web", "c", "container exited")
	e.mu.Lock()
	last := e.queue[len(e.queue)-1]
	e.mu.Unlock()
	if !strings.Contains(last.ev.Message, "(7 similar events suppressed)") {
		t.Fatalf("suppressed count missing: %q", last.ev.Message)
	}
	// All keys together: a burst of 20, then one per second.
	e2 := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: &fakePub{}, Clock: clk})
	for i := 0; i < 50; i++ {
		e2.Record(schema.EventNormal, "Started", fmt.Sprintf("p%d", i), "c", "")
	}
	if n := e2.Pending(); n != 20 {
		t.Fatalf("global limit: %d queued", n)
	}
	// An event about the agent itself (a refused desired state) is not
	// starved by a burst of container events; its own bucket still holds.
	for range 5 {
		e2.Record(schema.EventWarning, "InvalidDesiredState", "", "", "bad payload")
	}
	if n := e2.Pending(); n != 23 {
		t.Fatalf("after a burst of pod events: %d queued, want 20 and the 3 InvalidDesiredState of their own burst", n)
	}
	// The queue is bounded; the oldest go first.
	e3 := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: &fakePub{}, Clock: clk, Burst: 1000, QueueSize: 5})
	for i := 0; i < 50; i++ {
		e3.Record(schema.EventNormal, "Started", fmt.Sprintf("p%d", i), "c", "")
	}
	if n := e3.Pending(); n != 5 || e3.queue[0].ev.Pod != "p45" {
		t.Fatalf("queue: %d, head %s", n, e3.queue[0].ev.Pod)
	}
}

func TestEventsPublishWhenConnected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{err: errors.New("offline")}
		e := NewEvents(EventsOptions{Device: "dev1", Topic: "fleet/v1/devices/dev1/events", Publisher: pub, Clock: clk})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		e.Record(schema.EventWarning, "InvalidDesiredState", "", "", "bad")
		e.Record(schema.EventNormal, "Started", "web", "c", "ok")
		synctest.Wait()
		if e.Pending() != 2 {
			t.Fatalf("events lost while offline: %d pending", e.Pending())
		}
		pub.setErr(nil)
		e.Flush()
		synctest.Wait()
		msgs := pub.all()
		if len(msgs) != 2 || e.Pending() != 0 {
			t.Fatalf("published %d, pending %d", len(msgs), e.Pending())
		}
		var ev schema.Event
		if err := json.Unmarshal(msgs[0].payload, &ev); err != nil {
			t.Fatal(err)
		}
		if msgs[0].retained || ev.Reason != "InvalidDesiredState" || ev.Type != schema.EventWarning || ev.Device != "dev1" {
			t.Fatalf("event = %+v retained=%v", ev, msgs[0].retained)
		}
		if err := schema.ValidateEvent(&ev); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReadNodeInfo(t *testing.T) {
	n := ReadNodeInfo(t.TempDir())
	if n.Hostname == "" {
		t.Fatal("no hostname")
	}
	if goruntime.GOOS == "linux" && (n.MemoryTotalBytes == 0 || n.DiskTotalBytes == 0 || n.UptimeSeconds == 0) {
		t.Fatalf("node facts missing: %+v", n)
	}
}

func TestParseMeminfo(t *testing.T) {
	total, avail := parseMeminfo([]byte("MemTotal:        3884108 kB\nMemFree:  1 kB\nMemAvailable:    2000000 kB\n"))
	if total != 3884108*1024 || avail != 2000000*1024 {
		t.Fatalf("%d %d", total, avail)
	}
	if parseUptime([]byte("12345.67 890.12\n")) != 12345 {
		t.Fatal("uptime")
	}
}

func TestReporterSettleGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := startReporter(t, ReporterOptions{MinInterval: time.Millisecond, SettleGrace: 200 * time.Millisecond})
		advance, update, count := rig.advance, rig.update, rig.last

		// The first status goes out at once, whatever it says.
		update(1, pendingPods())
		count(1)
		advance(time.Second)
		update(1, readyPods("h1", 0))
		count(2)
		advance(time.Second)

		// Work that settles within the grace: one publish, the settled one.
		update(2, pendingPods())
		advance(70 * time.Millisecond)
		count(2)
		update(2, readyPods("h2", 0))
		if st := count(3); st.ObservedGeneration != 2 || !st.Pods[0].Ready {
			t.Fatalf("settled status %+v", st)
		}
		advance(time.Second)
		count(3)

		// Work that takes longer shows as in progress once the grace ends.
		update(3, pendingPods())
		advance(199 * time.Millisecond)
		count(3)
		advance(time.Millisecond)
		if st := count(4); st.ObservedGeneration != 3 || st.Pods[0].Ready {
			t.Fatalf("in-progress status %+v", st)
		}
		update(3, readyPods("h3", 0))
		if st := count(5); !st.Pods[0].Ready {
			t.Fatalf("settled status %+v", st)
		}
	})
}

// reporterRig runs a Reporter on a fake clock inside a synctest bubble.
type reporterRig struct {
	t   *testing.T
	clk *clock.Fake
	pub *fakePub
	r   *Reporter
}

func startReporter(t *testing.T, o ReporterOptions) *reporterRig {
	rig := &reporterRig{t: t, clk: clock.NewFake(t0), pub: &fakePub{}}
	o.Device, o.Topic, o.Publisher, o.Clock = "dev1", "fleet/v1/devices/dev1/status", rig.pub, rig.clk
	o.NodeInfo = func() *schema.NodeInfo { return nil }
	rig.r = NewReporter(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = rig.r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rig
}

func (rig *reporterRig) advance(d time.Duration) { rig.clk.Advance(d); synctest.Wait() }

func (rig *reporterRig) update(gen int64, pods []schema.PodStatus) {
	rig.r.Update(schema.DeviceStatus{ObservedGeneration: gen, Pods: pods})
	synctest.Wait()
}

// last fails unless n statuses were published and returns the last one.
func (rig *reporterRig) last(n int) schema.DeviceStatus {
	rig.t.Helper()
	sts := rig.pub.statuses(rig.t)
	if len(sts) != n {
		rig.t.Fatalf("%d publishes, want %d", len(sts), n)
	}
	return sts[n-1]
}

// TestHeartbeatJitter: each heartbeat comes 24-30 s after the last
// publish, and two agents that published together do not beat together.
func TestHeartbeatJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pubs := []*fakePub{{}, {}}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for i, pub := range pubs {
			r := NewReporter(ReporterOptions{
				Device: "dev1", Topic: "fleet/v1/devices/dev1/status", Publisher: pub, Clock: clk,
				NodeInfo: func() *schema.NodeInfo { return nil }, Seed: uint64(i + 1), Heartbeat: 30 * time.Second,
			})
			wg.Go(func() { _ = r.Run(ctx) })
			r.Update(schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{}})
		}
		synctest.Wait()
		const beats = 40
		at := make([][]time.Time, len(pubs)) // publish times on the fake clock
		for step := 0; step < beats*30*10; step++ {
			clk.Advance(100 * time.Millisecond)
			synctest.Wait()
			for i, pub := range pubs {
				for len(at[i]) < len(pub.all()) {
					at[i] = append(at[i], clk.Now())
				}
			}
		}
		for i := range pubs {
			if len(at[i]) < beats {
				t.Fatalf("reporter %d: %d publishes in %d heartbeat periods", i, len(at[i]), beats)
			}
			distinct := map[time.Duration]bool{}
			for k := 1; k < len(at[i]); k++ {
				gap := at[i][k].Sub(at[i][k-1])
				if gap < 24*time.Second || gap > 30*time.Second+100*time.Millisecond {
					t.Fatalf("reporter %d: heartbeat %d after %s, want 24-30 s", i, k, gap)
				}
				distinct[gap.Round(time.Second)] = true
			}
			if len(distinct) < 4 {
				t.Errorf("reporter %d: gaps take %d values: not jittered", i, len(distinct))
			}
		}
		same := 0
		for k := 1; k < min(len(at[0]), len(at[1])); k++ {
			if at[0][k] == at[1][k] {
				same++
			}
		}
		if same > 1 {
			t.Errorf("two agents that published together beat together %d times", same)
		}
	})
}

// TestEventsQueueWhileOffline: events recorded offline get IDs, are
// bounded by count and bytes (the oldest dropped and counted on the
// next one published), and go out in order on reconnect; a failed
// publish is repeated with the same ID.
func TestEventsQueueWhileOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{err: errors.New("offline")}
		e := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: pub, Clock: clk,
			Burst: 1000, PerKeyBurst: 1000, QueueSize: 5})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		for i := range 8 {
			e.Record(schema.EventNormal, "Started", fmt.Sprintf("p%d", i), "c", "")
		}
		synctest.Wait()
		e.mu.Lock()
		firstID := e.queue[0].ev.ID
		e.mu.Unlock()
		pub.setErr(nil)
		e.Flush()
		synctest.Wait()
		msgs := pub.all()
		if len(msgs) != 5 || e.Pending() != 0 {
			t.Fatalf("published %d, pending %d", len(msgs), e.Pending())
		}
		ids := map[string]bool{}
		for i, m := range msgs {
			var ev schema.Event
			if err := json.Unmarshal(m.payload, &ev); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("p%d", i+3); ev.Pod != want {
				t.Errorf("event %d is about %s, want %s (in order)", i, ev.Pod, want)
			}
			if len(ev.ID) != 24 || ids[ev.ID] {
				t.Errorf("event %d ID %q: want 24 hex digits, unique", i, ev.ID)
			}
			ids[ev.ID] = true
			if wantDropped := map[bool]int{true: 3, false: 0}[i == 0]; ev.Dropped != wantDropped {
				t.Errorf("event %d dropped = %d, want %d", i, ev.Dropped, wantDropped)
			}
		}
		var head schema.Event
		_ = json.Unmarshal(msgs[0].payload, &head)
		if head.ID != firstID {
			t.Errorf("the event retried after the outage has ID %s, was %s", head.ID, firstID)
		}
	})
}

func TestEventsQueueBytesBound(t *testing.T) {
	clk := clock.NewFake(t0)
	e := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: &fakePub{err: errors.New("offline")}, Clock: clk,
		Burst: 1000, PerKeyBurst: 1000, QueueBytes: 40 << 10})
	tail := strings.Repeat("x", schema.MaxCrashLogBytes)
	for i := range 20 {
		code := int32(1)
		e.RecordEvent(schema.Event{Type: schema.EventWarning, Reason: "Exited", Pod: fmt.Sprintf("p%d", i), Container: "c", ExitCode: &code, LogTail: tail})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bytes > 40<<10 || len(e.queue) != 4 {
		t.Fatalf("queue of %d events, %d bytes; want 4 within 40 KiB", len(e.queue), e.bytes)
	}
	if h := e.queue[0]; h.ev.Pod != "p16" || h.ev.Dropped != 16 || h.ev.LogTail != "" || !h.ev.CrashReport ||
		!strings.Contains(string(h.report), tail) || *h.ev.ExitCode != 1 {
		t.Fatalf("head = %s dropped %d", h.ev.Pod, h.ev.Dropped)
	}
}

// TestEventsCrashReportOnItsOwnTopic: an event with a log tail goes out
// as two messages, in order: the crash report (with the log) on the
// crashreports topic, then the event (CrashReport set, no log) on the
// events topic, never batched together. Offline, both wait in the queue;
// a failed publish of either is retried, and once the crash report is
// acknowledged it is not sent again.
func TestEventsCrashReportOnItsOwnTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{err: errors.New("offline")}
		e := NewEvents(EventsOptions{Device: "dev1", Topic: "fleet/v1/devices/dev1/events", Publisher: pub, Clock: clk,
			Batch: true, Linger: 250 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		code := int32(3)
		e.Record(schema.EventNormal, "Started", "web", "app", "started")
		e.RecordEvent(schema.Event{Type: schema.EventWarning, Reason: "Exited", Pod: "web", Container: "app",
			Message: "exited 3", ExitCode: &code, LogTail: "fatal: SECRET-LOG-LINE\n"})
		e.Record(schema.EventNormal, "Started", "web", "app", "started again")
		clk.Advance(time.Second)
		synctest.Wait()
		if n := len(pub.all()); n != 0 || e.Pending() != 3 {
			t.Fatalf("offline: %d published, %d pending; want 0 and 3", n, e.Pending())
		}
		pub.setErr(nil)
		e.Flush()
		clk.Advance(time.Second)
		synctest.Wait()
		msgs := pub.all()
		var topics []string
		for _, m := range msgs {
			topics = append(topics, m.topic)
			if m.retained {
				t.Errorf("%s published retained", m.topic)
			}
		}
		want := "fleet/v1/devices/dev1/events fleet/v1/devices/dev1/crashreports fleet/v1/devices/dev1/events"
		if strings.Join(topics, " ") != want {
			t.Fatalf("published to %v, want %s", topics, want)
		}
		var cr schema.CrashReport
		if err := json.Unmarshal(msgs[1].payload, &cr); err != nil {
			t.Fatal(err)
		}
		if err := schema.ValidateCrashReport(&cr); err != nil || cr.LogTail != "fatal: SECRET-LOG-LINE\n" || cr.Pod != "web" || cr.Container != "app" || *cr.ExitCode != 3 {
			t.Fatalf("crash report %s: %v", msgs[1].payload, err)
		}
		for _, i := range []int{0, 2} {
			if strings.Contains(string(msgs[i].payload), "SECRET-LOG-LINE") || strings.Contains(string(msgs[i].payload), "logTail") {
				t.Errorf("an events message carries the log: %s", msgs[i].payload)
			}
		}
		var ev schema.Event
		if err := json.Unmarshal(msgs[2].payload, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Reason != "Exited" || !ev.CrashReport || len(ev.More) != 1 || ev.More[0].Message != "started again" {
			t.Fatalf("the crash's event %s: want Exited with crashReport, the next event in more", msgs[2].payload)
		}

		// The event's publish fails after its crash report went out: the
		// event is retried, the report is not sent twice.
		pub.mu.Lock()
		pub.failTopic = "fleet/v1/devices/dev1/events"
		pub.mu.Unlock()
		e.RecordEvent(schema.Event{Type: schema.EventWarning, Reason: "BackOff", Pod: "web", Container: "app", ExitCode: &code, LogTail: "again\n"})
		clk.Advance(time.Second)
		synctest.Wait()
		if got := pub.all()[3:]; len(got) != 1 || got[0].topic != "fleet/v1/devices/dev1/crashreports" || e.Pending() != 1 {
			t.Fatalf("the event's publish failing: %d more messages, %d pending; want its crash report alone, the event queued", len(got), e.Pending())
		}
		pub.mu.Lock()
		pub.failTopic = ""
		pub.mu.Unlock()
		e.Flush()
		clk.Advance(time.Second)
		synctest.Wait()
		if got := pub.all()[4:]; len(got) != 1 || got[0].topic != "fleet/v1/devices/dev1/events" || e.Pending() != 0 {
			t.Fatalf("after the event's retry: %d more messages, %d pending; want the event alone", len(got), e.Pending())
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.bytes != 0 {
			t.Errorf("queue bytes %d with nothing queued", e.bytes)
		}
	})
}

// TestIdleSendsNothing: by default an unchanged status is never
// republished, whatever the node's free memory does, until the node
// figures move materially (a tenth of the memory, a twentieth of the
// disk) at a node check.
func TestIdleSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{}
		var mu sync.Mutex
		node := schema.NodeInfo{Hostname: "pi", MemoryTotalBytes: 1000, MemoryAvailBytes: 500, DiskTotalBytes: 1000, DiskFreeBytes: 800, UptimeSeconds: 10}
		r := NewReporter(ReporterOptions{
			Device: "dev1", Topic: "fleet/v1/devices/dev1/status", Publisher: pub, Clock: clk,
			NodeInfo: func() *schema.NodeInfo { mu.Lock(); defer mu.Unlock(); n := node; return &n },
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = r.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		setNode := func(f func(n *schema.NodeInfo)) { mu.Lock(); f(&node); mu.Unlock() }

		r.Update(schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{}})
		synctest.Wait()
		if n := len(pub.all()); n != 1 {
			t.Fatalf("first status: %d publishes", n)
		}
		// A day of resyncs (the same status every 30 s) with small moves
		// of free memory and the uptime ticking: nothing goes out.
		for i := 0; i < 2880; i++ {
			setNode(func(n *schema.NodeInfo) { n.MemoryAvailBytes = 500 + uint64(i%9)*10; n.UptimeSeconds += 30 })
			r.Update(schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{}})
			clk.Advance(30 * time.Second)
			synctest.Wait()
		}
		if n := len(pub.all()); n != 1 {
			t.Fatalf("an idle day published %d statuses, want only the first", n)
		}
		// Free disk drops by a twentieth: the next node check sends it.
		setNode(func(n *schema.NodeInfo) { n.DiskFreeBytes = 750 })
		clk.Advance(5 * time.Minute)
		synctest.Wait()
		sts := pub.statuses(t)
		if len(sts) != 2 || sts[1].Node == nil || sts[1].Node.DiskFreeBytes != 750 {
			t.Fatalf("after a material disk change: %d publishes", len(sts))
		}
		// A real change goes out at once, node or not.
		r.Update(schema.DeviceStatus{ObservedGeneration: 2, Pods: []schema.PodStatus{}})
		synctest.Wait()
		if n := len(pub.all()); n != 3 {
			t.Fatalf("a new observedGeneration: %d publishes, want 3", n)
		}
	})
}

func TestNodeMoved(t *testing.T) {
	base := schema.NodeInfo{Hostname: "pi", MemoryTotalBytes: 1000, MemoryAvailBytes: 500, DiskTotalBytes: 2000, DiskFreeBytes: 1000, UptimeSeconds: 100}
	for _, c := range []struct {
		name string
		edit func(n *schema.NodeInfo)
		want bool
	}{
		{"uptime only", func(n *schema.NodeInfo) { n.UptimeSeconds += 3600 }, false},
		{"memory by less than a tenth", func(n *schema.NodeInfo) { n.MemoryAvailBytes -= 99 }, false},
		{"memory by a tenth", func(n *schema.NodeInfo) { n.MemoryAvailBytes -= 100 }, true},
		{"disk by less than a twentieth", func(n *schema.NodeInfo) { n.DiskFreeBytes += 99 }, false},
		{"disk by a twentieth", func(n *schema.NodeInfo) { n.DiskFreeBytes += 100 }, true},
		{"reboot", func(n *schema.NodeInfo) { n.UptimeSeconds = 5 }, true},
		{"hostname", func(n *schema.NodeInfo) { n.Hostname = "pi2" }, true},
		{"temperature appears", func(n *schema.NodeInfo) { n.TemperatureCelsius = ptr(51.0) }, true},
	} {
		n := base
		c.edit(&n)
		if got := NodeMoved(&base, &n); got != c.want {
			t.Errorf("%s: NodeMoved = %v, want %v", c.name, got, c.want)
		}
	}
	if NodeMoved(nil, nil) || !NodeMoved(nil, &base) {
		t.Error("nil figures")
	}
	warm := base
	warm.TemperatureCelsius = ptr(50.0)
	for _, c := range []struct {
		now  *float64
		want bool
	}{{ptr(54.9), false}, {ptr(45.1), false}, {ptr(55.0), true}, {ptr(45.0), true}, {nil, true}} {
		n := warm
		n.TemperatureCelsius = c.now
		if got := NodeMoved(&warm, &n); got != c.want {
			t.Errorf("temperature 50 → %v: NodeMoved = %v, want %v", c.now, got, c.want)
		}
	}
}

func TestParseMillidegrees(t *testing.T) {
	if c := parseMillidegrees([]byte("48312\n")); c == nil || *c != 48.312 {
		t.Errorf("48312: got %v, want 48.312", c)
	}
	if c := parseMillidegrees([]byte("hot")); c != nil {
		t.Errorf("hot: got %v, want nil", *c)
	}
}

func ptr(f float64) *float64 { return &f }

// TestFailedPublishRetriedOnce: a status that could not be published
// (not connected yet) is retried after PublishTimeout; once the
// reconnect's Republish has put it out, the retry is cancelled and
// nothing more goes out.
func TestFailedPublishRetriedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{}
		pub.setErr(errors.New("not connected"))
		r := NewReporter(ReporterOptions{
			Device: "dev1", Topic: "fleet/v1/devices/dev1/status", Publisher: pub, Clock: clk,
			NodeInfo: func() *schema.NodeInfo { return nil },
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = r.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		r.Update(schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{}})
		synctest.Wait()
		pub.setErr(nil)
		r.Republish()            // the session connected
		clk.Advance(time.Second) // MinInterval after the failed attempt
		synctest.Wait()
		if n := len(pub.all()); n != 1 {
			t.Fatalf("after the reconnect: %d publishes, want 1", n)
		}
		clk.Advance(time.Hour)
		synctest.Wait()
		if n := len(pub.all()); n != 1 {
			t.Fatalf("an hour later: %d publishes, want still 1 (a cancelled retry fired)", n)
		}
		// Without a reconnect the retry alone puts a failed status out.
		pub.setErr(errors.New("timeout"))
		r.Update(schema.DeviceStatus{ObservedGeneration: 2, Pods: []schema.PodStatus{}})
		synctest.Wait()
		pub.setErr(nil)
		clk.Advance(10 * time.Second)
		synctest.Wait()
		if sts := pub.statuses(t); len(sts) != 2 || sts[1].ObservedGeneration != 2 {
			t.Fatalf("after a failed publish and PublishTimeout: %d publishes", len(sts))
		}
	})
}

// TestEventsBatch: with Batch and a linger, the events recorded within it
// go out as one message, the first with the others in "more", in order;
// a message never exceeds BatchBytes; one failed publish keeps them all
// queued, and a later one sends them once.
func TestEventsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		pub := &fakePub{}
		e := NewEvents(EventsOptions{Device: "dev1", Topic: "t", Publisher: pub, Clock: clk,
			Batch: true, Linger: 250 * time.Millisecond, BatchBytes: 1200})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		e.Record(schema.EventNormal, "Pulled", "web", "c", "image present")
		synctest.Wait()
		clk.Advance(70 * time.Millisecond)
		synctest.Wait()
		e.Record(schema.EventNormal, "Started", "web", "c", "started")
		synctest.Wait()
		if n := len(pub.all()); n != 0 {
			t.Fatalf("%d messages before the linger ended", n)
		}
		clk.Advance(180 * time.Millisecond)
		synctest.Wait()
		msgs := pub.all()
		if len(msgs) != 1 {
			t.Fatalf("%d messages, want one carrying both events", len(msgs))
		}
		var ev schema.Event
		if err := json.Unmarshal(msgs[0].payload, &ev); err != nil {
			t.Fatal(err)
		}
		if err := schema.ValidateEvent(&ev); err != nil {
			t.Fatalf("the batch is not a valid Event: %v\n%s", err, msgs[0].payload)
		}
		if ev.Reason != "Pulled" || len(ev.More) != 1 || ev.More[0].Reason != "Started" || ev.More[0].ID == ev.ID || ev.More[0].Device != "dev1" {
			t.Fatalf("batch %s: want Pulled with Started in more", msgs[0].payload)
		}
		if e.Pending() != 0 {
			t.Fatalf("%d pending after the acknowledgement", e.Pending())
		}

		// Offline: everything stays queued; once back, the batches are
		// bounded by BatchBytes and carry every event once, in order.
		pub.setErr(errors.New("offline"))
		for i := range 8 {
			e.Record(schema.EventNormal, "Started", fmt.Sprintf("p%d", i), "c", strings.Repeat("x", 200))
		}
		clk.Advance(time.Second)
		synctest.Wait()
		if e.Pending() != 8 {
			t.Fatalf("%d pending after a failed publish, want 8", e.Pending())
		}
		pub.setErr(nil)
		e.Flush()
		clk.Advance(time.Second)
		synctest.Wait()
		var pods []string
		for _, m := range pub.all()[1:] {
			if len(m.payload) > 1200 {
				t.Errorf("message of %d bytes, over BatchBytes", len(m.payload))
			}
			var b schema.Event
			if err := json.Unmarshal(m.payload, &b); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, b.Pod)
			for _, x := range b.More {
				pods = append(pods, x.Pod)
			}
		}
		if want := "p0 p1 p2 p3 p4 p5 p6 p7"; strings.Join(pods, " ") != want || len(pub.all()) < 3 {
			t.Fatalf("events after the reconnect %v in %d messages, want %s in several", pods, len(pub.all())-1, want)
		}
	})
}
