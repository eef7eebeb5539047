package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// storeDevice returns a device's uid and labels as stored.
func storeDevice(st *store.Store, name string) (string, map[string]string, bool) {
	o, err := st.Get(context.Background(), schema.KindDevice, name)
	if err != nil {
		return "", nil, false
	}
	return o.GetMetadata().UID, o.GetMetadata().Labels, true
}

// register puts a stored device into the model, as the controller does.
func register(t testing.TB, st *store.Store, w *fleetmodel.Writer, name string) {
	t.Helper()
	uid, labels, ok := storeDevice(st, name)
	if !ok {
		t.Fatalf("device %s is not stored", name)
	}
	w.PutDevice(name, fleetmodel.Device{UID: uid, Labels: labels})
}

type noConn struct{}

func (noConn) Subscribe(context.Context, string, func(string, []byte)) error { return nil }

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

type fixture struct {
	st    *store.Store
	fm    *fleetmodel.Model
	w     *fleetmodel.Writer
	in    *Ingest
	m     *metrics.Metrics
	clock *clock
}

func newFixture(t testing.TB, devices ...string) *fixture {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, d := range devices {
		if _, err := st.Create(t.Context(), &schema.Device{Metadata: schema.ObjectMeta{Name: d}}, false); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{st: st, m: metrics.New(metrics.Gauges{}), clock: &clock{now: time.Unix(1_700_000_000, 0)}}
	f.fm = fleetmodel.New(fleetmodel.Options{Now: f.clock.Now})
	f.w = f.fm.Writer()
	for _, d := range devices {
		register(t, st, f.w, d)
	}
	f.in, err = New(Options{Conn: noConn{}, Store: st, Model: f.fm, Metrics: f.m, MaxPayload: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func statusJSON(device string, gen int64, arch string) string {
	return fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":"DeviceStatus","device":%q,"observedGeneration":%d,"time":"2024-01-01T00:00:00Z",
		"agent":{"version":"v1","os":"linux","arch":%q},"pods":[{"name":"web","phase":"Running","ready":true,"restarts":0,"containers":[]}]}`, device, gen, arch)
}

const topicPrefix = "fleet/v1/devices/"

func TestHandleStatusStoresAndLabels(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 3, "arm64")))
	st, _ := f.fm.DeviceState("pi", "")
	if st == nil || st.ObservedGeneration != 3 {
		t.Fatalf("DeviceState = %+v", st)
	}
	f.in.Flush(t.Context())
	err := f.st.View(t.Context(), func(tx *store.Txn) error {
		b, err := tx.Get(store.StatusKey("pi"))
		if err != nil {
			return err
		}
		var got schema.DeviceStatus
		if err := json.Unmarshal(b, &got); err != nil || got.ObservedGeneration != 3 {
			t.Errorf("stored status %s: %v", b, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err := f.st.Get(t.Context(), schema.KindDevice, "pi")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.GetMetadata().Labels[schema.LabelArch]; got != "arm64" {
		t.Errorf("fleet/arch = %q, want arm64", got)
	}
	rv := o.GetMetadata().ResourceVersion
	// The same arch again writes nothing.
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 4, "arm64")))
	f.in.Flush(t.Context())
	o, _ = f.st.Get(t.Context(), schema.KindDevice, "pi")
	if o.GetMetadata().ResourceVersion != rv {
		t.Errorf("an unchanged arch rewrote the device (resourceVersion %s -> %s)", rv, o.GetMetadata().ResourceVersion)
	}
	if n := counter(t, f.m.StatusMessages); n != 2 {
		t.Errorf("fleet_status_messages_total = %v, want 2", n)
	}

	// A new Ingest (a restarted hub) has the report from the store.
	fm2 := fleetmodel.New(fleetmodel.Options{Now: f.clock.Now})
	register(t, f.st, fm2.Writer(), "pi")
	in2, err := New(Options{Conn: noConn{}, Store: f.st, Model: fm2})
	if err != nil {
		t.Fatal(err)
	}
	if err := in2.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st, _ := fm2.DeviceState("pi", ""); st == nil || st.ObservedGeneration != 4 {
		t.Errorf("after reload: %+v", st)
	}
}

func TestHandleMalformedChangesNothing(t *testing.T) {
	f := newFixture(t, "pi", "other")
	good := statusJSON("pi", 7, "amd64")
	f.in.Handle(topicPrefix+"pi/status", []byte(good))
	f.in.Handle(topicPrefix+"pi/online", []byte("online"))
	tests := []struct {
		name, topic, payload, kind string
	}{
		{"not JSON", "pi/status", "{{{", "status"},
		{"wrong type", "pi/status", `{"device":"pi","observedGeneration":"seven","pods":[]}`, "status"},
		{"bad phase", "pi/status", strings.Replace(good, "Running", "Dancing", 1), "status"},
		{"negative generation", "pi/status", strings.Replace(good, `"observedGeneration":7`, `"observedGeneration":-1`, 1), "status"},
		{"other device", "pi/status", statusJSON("other", 9, "amd64"), "status"},
		{"too large", "pi/status", `{"device":"pi","pad":"` + strings.Repeat("x", 5000) + `"}`, "status"},
		{"array", "pi/status", `[1,2,3]`, "status"},
		{"bad online", "pi/online", "maybe", "online"},
		{"bad event", "pi/events", `{"device":"pi","type":"Weird","reason":"x"}`, "events"},
		{"event of another device", "pi/events", `{"device":"other","type":"Normal","reason":"x"}`, "events"},
		{"unknown kind", "pi/whatever", `x`, "unknown"},
		{"wildcard topic", "+/status", `x`, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := counter(t, f.m.Malformed.WithLabelValues(tt.kind))
			f.in.Handle(topicPrefix+tt.topic, []byte(tt.payload))
			if got := counter(t, f.m.Malformed.WithLabelValues(tt.kind)); got != before+1 {
				t.Errorf("malformed{%s} went from %v to %v", tt.kind, before, got)
			}
			st, online := f.fm.DeviceState("pi", "")
			if st == nil || st.ObservedGeneration != 7 || st.Agent.Arch != "amd64" || !online {
				t.Errorf("state changed: %+v online=%v", st, online)
			}
			if st, _ := f.fm.DeviceState("other", ""); st != nil {
				t.Errorf("other device got a state: %+v", st)
			}
		})
	}
}

func TestHandleUnknownDeviceIgnored(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.Handle(topicPrefix+"ghost/status", []byte(statusJSON("ghost", 1, "arm")))
	if st, _ := f.fm.DeviceState("ghost", ""); st != nil {
		t.Errorf("unknown device stored: %+v", st)
	}
	if n := counter(t, f.m.Ignored.WithLabelValues("status", metrics.ReasonUnknownDevice)); n != 1 {
		t.Errorf("ignored = %v", n)
	}
	f.in.Flush(t.Context())
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.StatusKey("ghost")); err == nil {
			t.Error("status of an unknown device stored")
		}
		return nil
	})
}

func TestOnlineStaleAndEvents(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.Handle(topicPrefix+"pi/online", []byte("online"))
	if _, online := f.fm.DeviceState("pi", ""); !online {
		t.Fatal("not online")
	}
	f.clock.add(DefaultStaleAfter + time.Second)
	if _, online := f.fm.DeviceState("pi", ""); online {
		t.Error("online after the stale threshold")
	}
	if info := f.fm.DeviceInfo("pi", ""); !info.Stale || !info.Online {
		t.Errorf("info %+v: want online (as last told) and stale", info)
	}
	f.in.Handle(topicPrefix+"pi/online", []byte("offline"))
	if info := f.fm.DeviceInfo("pi", ""); info.Online {
		t.Error("online after offline")
	}
	for i := range DefaultEventsPerDevice + 5 {
		f.in.Handle(topicPrefix+"pi/events", fmt.Appendf(nil, `{"device":"pi","type":"Normal","reason":"r%d"}`, i))
	}
	evs := f.fm.Events("pi", "")
	if len(evs) != DefaultEventsPerDevice || evs[0].Reason != "r5" || evs[len(evs)-1].Reason != fmt.Sprintf("r%d", DefaultEventsPerDevice+4) {
		t.Errorf("events: %d, first %q", len(evs), evs[0].Reason)
	}
	// The controller removes the deleted device's desired state.
	f.w.SetDesired(1, func(int) (string, *schema.DesiredState) { return "pi", nil })
	if len(f.fm.Events("pi", "")) != 0 {
		t.Error("events kept after the device was removed")
	}
}

func TestDeviceInfoJSONCache(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 1, "arm64")))
	f.in.Handle(topicPrefix+"pi/online", []byte("online"))
	a := f.fm.DeviceInfoJSON("pi", "")
	b := f.fm.DeviceInfoJSON("pi", "")
	if &a[0] != &b[0] {
		t.Error("second call did not use the cache")
	}
	f.clock.add(DefaultStaleAfter + time.Second)
	var info schema.DeviceObservedInfo
	if err := json.Unmarshal(f.fm.DeviceInfoJSON("pi", ""), &info); err != nil || !info.Stale {
		t.Errorf("cache not invalidated by staleness: %+v %v", info, err)
	}
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 2, "arm64")))
	info = schema.DeviceObservedInfo{}
	if err := json.Unmarshal(f.fm.DeviceInfoJSON("pi", ""), &info); err != nil || info.ObservedGeneration != 2 || info.Stale {
		t.Errorf("cache not invalidated by a report: %+v %v", info, err)
	}
}

func TestStatusOfDeletedDeviceNotWritten(t *testing.T) {
	f := newFixture(t, "pi")
	uid, _, _ := storeDevice(f.st, "pi")
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 1, "")))
	if _, err := f.st.Delete(t.Context(), schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Create(t.Context(), &schema.Device{Metadata: schema.ObjectMeta{Name: "pi"}}, false); err != nil {
		t.Fatal(err)
	}
	register(t, f.st, f.w, "pi")
	f.in.Flush(t.Context())
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.StatusKey("pi")); err == nil {
			t.Error("the old device's report was stored for the new device")
		}
		return nil
	})
	uid2, _, _ := storeDevice(f.st, "pi")
	if st, _ := f.fm.DeviceState("pi", uid2); st != nil || uid == uid2 {
		t.Errorf("new device sees the old one's report: %+v", st)
	}
}

// A device deleted after its report came and before the flush gets no
// status written, although the ingest (and here the registry snapshot it
// was handed) still knows its uid: the flush checks the store's own uid
// index in the write transaction.
func TestStatusOfDeviceDeletedBeforeFlushNotWritten(t *testing.T) {
	f := newFixture(t, "pi", "pi2")
	f.in.Handle(topicPrefix+"pi/status", []byte(statusJSON("pi", 1, "")))
	f.in.Handle(topicPrefix+"pi2/status", []byte(statusJSON("pi2", 1, "")))
	if _, err := f.st.Delete(t.Context(), schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	// The model still has it: the controller has not seen the deletion yet.
	f.in.Flush(t.Context())
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.StatusKey("pi")); err == nil {
			t.Error("a report was stored for a deleted device")
		}
		if _, err := tx.Get(store.StatusKey("pi2")); err != nil {
			t.Errorf("the other device's report was not stored: %v", err)
		}
		return nil
	})
}

func TestOlderStatus(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cur := &schema.DeviceStatus{Store: "s", ObservedGeneration: 5, Time: t0}
	tests := []struct {
		name string
		st   schema.DeviceStatus
		want bool
	}{
		{"older generation and time", schema.DeviceStatus{Store: "s", ObservedGeneration: 4, Time: t0.Add(-time.Second)}, true},
		{"same generation, heartbeat", schema.DeviceStatus{Store: "s", ObservedGeneration: 5, Time: t0.Add(time.Second)}, false},
		{"lower generation, clock jumped forward", schema.DeviceStatus{Store: "s", ObservedGeneration: 4, Time: t0.Add(time.Second)}, false},
		{"new store", schema.DeviceStatus{Store: "t", ObservedGeneration: 1, Time: t0.Add(-time.Second)}, false},
	}
	for _, tt := range tests {
		if got := older(&tt.st, cur); got != tt.want {
			t.Errorf("%s: older = %v, want %v", tt.name, got, tt.want)
		}
	}
	if older(cur, nil) {
		t.Error("a first report is never older")
	}
}

// TestHeartbeatDoesNotWakeTheController: a report that only repeats the
// last one with a new time and node facts is stored, but the controller
// is told only about reports that change something, or that end a stale
// or offline spell.
func TestHeartbeatDoesNotWakeTheController(t *testing.T) {
	f := newFixture(t, "pi")
	var changes []string
	f.in.opts.OnChange = func(d string) { changes = append(changes, d) }
	report := func(gen int64, at string, uptime int) {
		t.Helper()
		p := strings.Replace(statusJSON("pi", gen, "arm64"), `"time":"2024-01-01T00:00:00Z"`,
			fmt.Sprintf(`"time":%q,"node":{"uptimeSeconds":%d}`, at, uptime), 1)
		f.in.Handle(topicPrefix+"pi/status", []byte(p))
	}
	f.in.Handle(topicPrefix+"pi/online", []byte("online")) // a change
	steps := []struct {
		what string
		do   func()
		want int
	}{
		{"first report", func() { report(1, "2024-01-01T00:00:00Z", 10) }, 2},
		{"heartbeat", func() { f.clock.add(30 * time.Second); report(1, "2024-01-01T00:00:30Z", 40) }, 2},
		{"new generation", func() { report(2, "2024-01-01T00:00:31Z", 41) }, 3},
		{"heartbeat after a stale spell", func() {
			f.clock.add(DefaultStaleAfter + time.Second)
			report(2, "2024-01-01T00:02:02Z", 132)
		}, 4},
		{"heartbeat after offline", func() {
			f.in.Handle(topicPrefix+"pi/online", []byte("offline"))
			report(2, "2024-01-01T00:02:10Z", 140)
		}, 6}, // "offline" itself is a change
	}
	for _, s := range steps {
		s.do()
		if len(changes) != s.want {
			t.Fatalf("after %s: %d changes, want %d", s.what, len(changes), s.want)
		}
	}
	if st, _ := f.fm.DeviceState("pi", ""); st == nil || !st.Time.Equal(time.Date(2024, 1, 1, 0, 2, 10, 0, time.UTC)) {
		t.Errorf("the hub's copy is not the latest report: %+v", st)
	}
}

// FuzzHandle: whatever a device publishes on its own topics, the ingest
// does not panic, keeps only a valid report of that device, and what it
// writes to the store is that report.
func FuzzHandle(f *testing.F) {
	kinds := []string{"status", "online", "events", "desired", "status/x"}
	f.Add(uint8(0), []byte(statusJSON("pi", 3, "arm64")))
	f.Add(uint8(0), []byte(`{"device":"pi","observedGeneration":1,"time":"2024-01-01T00:00:00Z","pods":[{"name":"a","phase":"Failed","containers":[{"name":"c","state":"terminated","exitCode":-1}]}],"node":{"memoryBytes":-5}}`))
	f.Add(uint8(0), []byte(`{"device":"pi","agent":{"arch":"arm64 bad"}}`))
	f.Add(uint8(1), []byte("online"))
	f.Add(uint8(1), []byte("offline"))
	f.Add(uint8(2), []byte(`{"device":"pi","type":"Warning","reason":"BackOff","pod":"web","container":"c","message":"x","time":"2024-01-01T00:00:00Z"}`))
	f.Add(uint8(2), []byte(`{"device":"pi","type":"Normal","reason":""}`))
	f.Add(uint8(3), []byte(`{}`))
	f.Add(uint8(4), []byte(`{}`))
	fx := newFixture(f, "pi")
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		f := fx
		f.in.Handle(topicPrefix+"pi/"+kinds[int(kind)%len(kinds)], b)
		if st, _ := f.fm.DeviceState("pi", ""); st != nil {
			if st.Device != "pi" {
				t.Fatalf("kept a report of %q", st.Device)
			}
			if err := schema.ValidateDeviceStatus(st); err != nil {
				t.Fatalf("kept an invalid report: %v", err)
			}
		}
		for _, ev := range f.fm.Events("pi", "") {
			if ev.Device != "pi" {
				t.Fatalf("kept an event of %q", ev.Device)
			}
			if err := schema.ValidateEvent(&ev); err != nil {
				t.Fatalf("kept an invalid event: %v", err)
			}
		}
		var info schema.DeviceObservedInfo
		if err := json.Unmarshal(f.fm.DeviceInfoJSON("pi", ""), &info); err != nil {
			t.Fatalf("device info: %v", err)
		}
		f.in.Flush(t.Context())
		_ = f.st.View(t.Context(), func(tx *store.Txn) error {
			raw, err := tx.Get(store.StatusKey("pi"))
			if err != nil {
				return nil
			}
			var st schema.DeviceStatus
			if err := json.Unmarshal(raw, &st); err != nil || st.Device != "pi" {
				t.Fatalf("stored status %q: %v", raw, err)
			}
			return nil
		})
	})
}

func TestEventDedupeAndCrashReports(t *testing.T) {
	f := newFixture(t, "pi")
	var online []string
	f.in.opts.OnOnline = func(d string) { online = append(online, d) }
	f.in.Handle(topicPrefix+"pi/online", []byte("online"))
	f.in.Handle(topicPrefix+"pi/online", []byte("offline"))
	if len(online) != 1 || online[0] != "pi" {
		t.Errorf("OnOnline calls %v, want [pi]", online)
	}
	ev := func(id, ctr, tail string, code int, at string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"device":"pi","type":"Warning","reason":"BackOff","pod":"web","container":%q,"exitCode":%d,"logTail":%q,"time":%q}`,
			id, ctr, code, tail, at)
	}
	f.in.Handle(topicPrefix+"pi/events", ev("e1", "app", "boom\n", 2, "2024-01-01T00:00:00Z"))
	f.in.Handle(topicPrefix+"pi/events", ev("e1", "app", "boom\n", 2, "2024-01-01T00:00:00Z")) // re-delivered
	f.in.Handle(topicPrefix+"pi/events", ev("e2", "side", "bang\n", 3, "2024-01-01T00:01:00Z"))
	f.in.Handle(topicPrefix+"pi/events", ev("e3", "app", "later\n", 4, "2024-01-01T00:02:00Z"))
	f.in.Handle(topicPrefix+"pi/events", ev("", "app", "", 0, "2024-01-01T00:03:00Z")) // no id: kept, no tail
	f.in.Handle(topicPrefix+"pi/events", ev("", "app", "", 0, "2024-01-01T00:03:00Z"))
	evs := f.fm.Events("pi", "")
	if len(evs) != 5 {
		t.Errorf("%d events, want 5 (one duplicate dropped)", len(evs))
	}
	// An old agent's log tail becomes the crash report and leaves the
	// event, which only points at it: no reader of events gets a log.
	for _, e := range evs {
		if e.LogTail != "" || e.CrashReport != (e.ID != "") {
			t.Errorf("event %q kept: logTail %q, crashReport %v; want no log, a pointer iff it had one", e.ID, e.LogTail, e.CrashReport)
		}
	}
	if n := counter(t, f.m.Ignored.WithLabelValues(schema.TopicEvents, metrics.ReasonDuplicate)); n != 1 {
		t.Errorf("duplicates counted: %v", n)
	}
	crs := f.fm.CrashReports("pi", "")
	if len(crs) != 2 || crs[0].Container != "app" || crs[0].LogTail != "later\n" || *crs[0].ExitCode != 4 || crs[1].Container != "side" {
		t.Errorf("crash reports %+v", crs)
	}
	if cr, ok := f.fm.CrashReport("pi", "", "web", ""); !ok || cr.Container != "app" {
		t.Errorf("newest crash report of pod web: %+v %v", cr, ok)
	}
	for i := range fleetmodel.MaxCrashReports + 4 {
		f.in.Handle(topicPrefix+"pi/events", ev(fmt.Sprintf("x%d", i), fmt.Sprintf("c%d", i), "t", 1, fmt.Sprintf("2024-02-01T00:00:%02dZ", i)))
	}
	if crs := f.fm.CrashReports("pi", ""); len(crs) != fleetmodel.MaxCrashReports || crs[0].Container != fmt.Sprintf("c%d", fleetmodel.MaxCrashReports+3) {
		t.Errorf("%d crash reports kept, newest %q", len(crs), crs[0].Container)
	}
	f.w.SetDesired(1, func(int) (string, *schema.DesiredState) { return "pi", nil })
	if len(f.fm.CrashReports("pi", "")) != 0 {
		t.Error("crash reports kept after the device was removed")
	}
}

// Crash reports are stored with the next flush, loaded by a restarted
// hub, and deleted with the device.
func TestCrashReportsPersist(t *testing.T) {
	f := newFixture(t, "pi")
	f.in.Handle(topicPrefix+"pi/events", []byte(`{"id":"e1","device":"pi","type":"Warning","reason":"BackOff","pod":"web","container":"app","exitCode":1,"logTail":"boom\n","time":"2024-01-01T00:00:00Z"}`))
	f.in.Flush(t.Context())

	fm := fleetmodel.New(fleetmodel.Options{})
	register(t, f.st, fm.Writer(), "pi")
	in, err := New(Options{Conn: noConn{}, Store: f.st, Model: fm})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	uid, _, _ := storeDevice(f.st, "pi")
	if crs := fm.CrashReports("pi", uid); len(crs) != 1 || crs[0].LogTail != "boom\n" || crs[0].Container != "app" {
		t.Errorf("loaded crash reports %+v", crs)
	}
	if _, err := f.st.Delete(t.Context(), schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		if _, err := tx.Get(store.CrashReportsKey("pi")); err == nil {
			t.Error("crash reports kept after the device was deleted")
		}
		return nil
	})
}

// TestEventBatch: a message carrying events in "more" adds each, in
// order, deduplicated by ID (a batch re-sent after a reconnect adds
// nothing twice), none of them keeping a "more"; a batch naming another
// device, or nesting, is refused whole and counted.
func TestEventBatch(t *testing.T) {
	f := newFixture(t, "pi", "pi2")
	batch := []byte(`{"id":"a","device":"pi","type":"Normal","reason":"Pulled","pod":"web","time":"2024-01-01T00:00:00Z",` +
		`"more":[{"id":"b","device":"pi","type":"Normal","reason":"Started","pod":"web","time":"2024-01-01T00:00:01Z"},` +
		`{"id":"c","device":"pi","type":"Warning","reason":"BackOff","pod":"web","container":"app","exitCode":1,"logTail":"boom\n","time":"2024-01-01T00:00:02Z"}]}`)
	f.in.Handle(topicPrefix+"pi/events", batch)
	f.in.Handle(topicPrefix+"pi/events", batch) // re-delivered
	evs := f.fm.Events("pi", "")
	var got []string
	for _, ev := range evs {
		got = append(got, ev.ID+":"+ev.Reason)
		if ev.More != nil {
			t.Errorf("event %s kept a more", ev.ID)
		}
	}
	if strings.Join(got, " ") != "a:Pulled b:Started c:BackOff" {
		t.Errorf("events %v, want a:Pulled b:Started c:BackOff once each", got)
	}
	if crs := f.fm.CrashReports("pi", ""); len(crs) != 1 || crs[0].LogTail != "boom\n" {
		t.Errorf("crash report from a batched event: %+v", crs)
	}
	before := counter(t, f.m.Malformed.WithLabelValues(schema.TopicEvents))
	for _, bad := range []string{
		`{"id":"x","device":"pi","type":"Normal","reason":"Pulled","time":"2024-01-01T00:00:00Z","more":[{"id":"y","device":"pi2","type":"Normal","reason":"Started","time":"2024-01-01T00:00:00Z"}]}`,
		`{"id":"x","device":"pi","type":"Normal","reason":"Pulled","time":"2024-01-01T00:00:00Z","more":[{"id":"y","device":"pi","type":"Normal","reason":"Started","time":"2024-01-01T00:00:00Z","more":[{"id":"z","device":"pi","type":"Normal","reason":"Started","time":"2024-01-01T00:00:00Z"}]}]}`,
		`{"id":"x","device":"pi","type":"Normal","reason":"Pulled","time":"2024-01-01T00:00:00Z","more":[{"id":"y","device":"pi","type":"Odd","reason":"Started","time":"2024-01-01T00:00:00Z"}]}`,
	} {
		f.in.Handle(topicPrefix+"pi/events", []byte(bad))
	}
	if n := counter(t, f.m.Malformed.WithLabelValues(schema.TopicEvents)) - before; n != 3 {
		t.Errorf("%v bad batches counted, want 3", n)
	}
	if n := len(f.fm.Events("pi", "")); n != 3 {
		t.Errorf("%d events after bad batches, want still 3", n)
	}
	if n := len(f.fm.Events("pi2", "")); n != 0 {
		t.Errorf("pi's batch gave pi2 %d events", n)
	}
}

// TestStatusOwnsItsPayload: the caller may reuse its buffer once Handle
// returns (the fuzzer does); the kept report, decoded in place, must not
// change with it.
func TestStatusOwnsItsPayload(t *testing.T) {
	f := newFixture(t, "pi")
	buf := []byte(statusJSON("pi", 3, "arm64"))
	f.in.Handle(topicPrefix+"pi/status", buf)
	for i := range buf {
		buf[i] = '"'
	}
	st, _ := f.fm.DeviceState("pi", "")
	if st == nil || st.Device != "pi" || st.Agent.Arch != "arm64" {
		t.Fatalf("the report changed with the caller's buffer: %+v", st)
	}
	if err := schema.ValidateDeviceStatus(st); err != nil {
		t.Fatalf("the report changed with the caller's buffer: %v", err)
	}
}

// TestCrashReportTopic: a crash report on the device's crashreports topic
// becomes its container's (the newest kept, a re-delivery changing
// nothing), is stored with the next flush, and comes with no event; a
// malformed one is refused, counted and changes nothing.
func TestCrashReportTopic(t *testing.T) {
	f := newFixture(t, "pi", "pi2")
	cr := func(dev, ctr, tail, at string) []byte {
		return fmt.Appendf(nil, `{"device":%q,"pod":"web","container":%q,"time":%q,"reason":"Exited","message":"exited 3","exitCode":3,"logTail":%q}`,
			dev, ctr, at, tail)
	}
	f.in.Handle(topicPrefix+"pi/crashreports", cr("pi", "app", "boom\n", "2024-01-01T00:00:00Z"))
	f.in.Handle(topicPrefix+"pi/crashreports", cr("pi", "app", "boom\n", "2024-01-01T00:00:00Z")) // re-delivered
	f.in.Handle(topicPrefix+"pi/crashreports", cr("pi", "app", "older\n", "2023-01-01T00:00:00Z"))
	crs := f.fm.CrashReports("pi", "")
	if len(crs) != 1 || crs[0].LogTail != "boom\n" || crs[0].Device != "pi" || *crs[0].ExitCode != 3 || crs[0].Message != "exited 3" {
		t.Fatalf("crash reports %+v, want app's boom once", crs)
	}
	if n := len(f.fm.Events("pi", "")); n != 0 {
		t.Errorf("a crash report made %d events", n)
	}
	before := counter(t, f.m.Malformed.WithLabelValues(schema.TopicCrashReports))
	for _, bad := range [][]byte{
		cr("pi2", "app", "not mine\n", "2024-01-02T00:00:00Z"), // names another device
		cr("pi", "", "no container\n", "2024-01-02T00:00:00Z"),
		cr("pi", "app", "", "2024-01-02T00:00:00Z"),
		cr("pi", "app", strings.Repeat("x", schema.MaxCrashLogBytes+1), "2024-01-02T00:00:00Z"),
		[]byte(`{"device":"pi","pod":"web","container":"app","reason":"Exited","logTail":"no time"}`),
		[]byte(`not json`),
	} {
		f.in.Handle(topicPrefix+"pi/crashreports", bad)
	}
	if n := counter(t, f.m.Malformed.WithLabelValues(schema.TopicCrashReports)) - before; n != 6 {
		t.Errorf("%v bad crash reports counted, want 6", n)
	}
	if crs := f.fm.CrashReports("pi", ""); len(crs) != 1 || crs[0].LogTail != "boom\n" {
		t.Errorf("after bad crash reports: %+v", crs)
	}
	if n := len(f.fm.CrashReports("pi2", "")); n != 0 {
		t.Errorf("pi's message gave pi2 %d crash reports", n)
	}
	f.in.Flush(t.Context())
	_ = f.st.View(t.Context(), func(tx *store.Txn) error {
		if v, err := tx.Get(store.CrashReportsKey("pi")); err != nil || !strings.Contains(string(v), "boom") {
			t.Errorf("stored crash reports: %s %v", v, err)
		}
		return nil
	})
}
