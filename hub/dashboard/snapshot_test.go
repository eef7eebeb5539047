package dashboard

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/selector"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// fleet builds a model: each device is "name state labels…", state one of
// online, offline, stale, unknown; "crash" adds a crash-looping pod.
func fleet(t testing.TB, now *time.Time, devices ...string) *fleetmodel.Model {
	t.Helper()
	m := fleetmodel.New(fleetmodel.Options{Now: func() time.Time { return *now }, StaleAfter: time.Minute})
	w := m.Writer()
	for i, spec := range devices {
		f := strings.Fields(spec)
		name, state := f[0], f[1]
		labels := map[string]string{"fleet/device": name}
		crash := false
		for _, kv := range f[2:] {
			if kv == "crash" {
				crash = true
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
		uid := fmt.Sprint("uid-", i)
		w.PutDevice(name, fleetmodel.Device{UID: uid, Labels: labels})
		ds := &schema.DesiredState{Device: name, Generation: 2, Pods: []schema.Pod{{Name: "web", Hash: "h2"}}}
		w.SetDesired(1, func(int) (string, *schema.DesiredState) { return name, ds })
		if state == StateNever {
			continue
		}
		pod := schema.PodStatus{Name: "web", Hash: "h2", Phase: schema.PhaseRunning, Ready: true, Restarts: int32(i)}
		if crash {
			pod.Ready, pod.Message = false, "back-off 10s restarting failed container"
		}
		st := &schema.DeviceStatus{Device: name, ObservedGeneration: 2, Agent: schema.AgentInfo{Version: "v1." + fmt.Sprint(i%3), Arch: "arm64"},
			Pods: []schema.PodStatus{pod}}
		seen := *now
		if state == StateStale {
			seen = now.Add(-2 * time.Minute)
		}
		m.UpdateReport(name, uid, func(r *fleetmodel.Report, _ bool) bool {
			r.Status, r.Online, r.LastSeen = st, state != StateOffline, seen
			return true
		})
	}
	return m
}

func names(p Page) string {
	var out []string
	for _, r := range p.Items {
		out = append(out, r.Name)
	}
	return strings.Join(out, " ")
}

func TestQueries(t *testing.T) {
	now := t0
	m := fleet(t, &now,
		"pi-1 online site=north role=sensor",
		"pi-2 offline site=north role=display",
		"pi-3 stale site=south role=sensor",
		"pi-4 unknown site=south",
		"kiosk-10 online site=east role=display crash",
	)
	s, err := takeSnapshot(m, nil, 7, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Counts{Devices: 5, Online: 2, Offline: 1, Stale: 1, Unknown: 1, Converged: 3}); s.counts != want {
		t.Errorf("counts %+v, want %+v", s.counts, want)
	}
	tests := []struct {
		query   string
		want    string
		matched int
	}{
		{"", "kiosk-10 pi-1 pi-2 pi-3 pi-4", 5},
		{"q=PI", "pi-1 pi-2 pi-3 pi-4", 4},
		{"q=north+sensor", "pi-1", 1},
		{"q=role%3Ddisplay", "kiosk-10 pi-2", 2},
		{"q=v1.1", "kiosk-10 pi-2", 2},
		{"labelSelector=site%3Dsouth", "pi-3 pi-4", 2},
		{"labelSelector=site+in+(north,east),role!%3Dsensor", "kiosk-10 pi-2", 2},
		{"labelSelector=!role", "pi-4", 1},
		{"state=online", "kiosk-10 pi-1", 2},
		{"state=stale", "pi-3", 1},
		{"state=unknown", "pi-4", 1},
		{"state=problem", "kiosk-10 pi-3 pi-4", 3},
		{"pod=web", "kiosk-10 pi-1 pi-2 pi-3 pi-4", 5},
		{"pod=other", "", 0},
		{"sort=-name", "pi-4 pi-3 pi-2 pi-1 kiosk-10", 5},
		{"sort=state", "pi-2 pi-3 pi-4 kiosk-10 pi-1", 5},
		{"sort=-restarts", "kiosk-10 pi-3 pi-2 pi-1 pi-4", 5},
		{"sort=lastSeen", "pi-4 pi-3 kiosk-10 pi-1 pi-2", 5},
		{"limit=2&offset=1", "pi-1 pi-2", 5},
		{"limit=2&offset=4", "pi-4", 5},
		{"offset=9", "", 5},
	}
	for _, tt := range tests {
		v, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		q, err := parseQuery(v, selector.Parse)
		if err != nil {
			t.Errorf("%s: %v", tt.query, err)
			continue
		}
		p := s.page(q)
		if got := names(p); got != tt.want || p.Matched != tt.matched || p.Total != 5 || p.Seq != 7 {
			t.Errorf("%s: got %q (%d of %d, seq %d), want %q (%d of 5, seq 7)", tt.query, got, p.Matched, p.Total, p.Seq, tt.want, tt.matched)
		}
	}
}

func TestRows(t *testing.T) {
	now := t0
	m := fleet(t, &now, "pi-1 online site=north crash")
	s, err := takeSnapshot(m, nil, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	p := s.page(Query{Pod: "web", Limit: 10})
	if len(p.Items) != 1 {
		t.Fatalf("items %+v", p.Items)
	}
	r := p.Items[0]
	if r.State != StateOnline || r.Converged || r.Pods != 1 || r.Ready != 0 || r.Agent != "v1.0" || r.Arch != "arm64" ||
		r.Problem != "web: back-off 10s restarting failed container" || r.DesiredGeneration != 2 || r.ObservedGeneration != 2 {
		t.Errorf("row %+v", r)
	}
	if r.Pod == nil || r.Pod.DesiredHash != "h2" || r.Pod.Hash != "h2" || r.Pod.Phase != "Running" || r.Pod.Ready || r.Pod.Status != "Running" {
		t.Errorf("pod %+v", r.Pod)
	}
}

// TestRowsTruthful: a device that went back from a failed revision shows
// the revision and images that run, Running and ready, and the failed
// revision; an offline or stale device's pod reads Unknown, with its last
// report kept as such.
func TestRowsTruthful(t *testing.T) {
	now := t0
	m := fleet(t, &now, "pi-1 online", "pi-2 offline", "pi-3 stale")
	for i, name := range []string{"pi-1", "pi-2", "pi-3"} {
		m.UpdateReport(name, fmt.Sprint("uid-", i), func(r *fleetmodel.Report, _ bool) bool {
			st := *r.Status
			r.Status = &st
			st.Pods = []schema.PodStatus{{Name: "web", Hash: "h1", Phase: schema.PhaseRunning, Ready: true,
				Message:        "revision h2 failed to start (container app: exit code 1, 3 times); the previous version runs again",
				Containers:     []schema.ContainerStatus{{Name: "app", Image: "app:1", State: schema.ContainerRunning}},
				FailedRevision: &schema.FailedRevision{Hash: "h2", Container: "app", Image: "app:2", Reason: "CrashLoopBackOff"}}}
			return true
		})
	}
	s, err := takeSnapshot(m, nil, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range s.page(Query{Pod: "web", Limit: 10}).Items {
		rows[r.Name] = r
	}
	on := rows["pi-1"].Pod
	if on == nil || on.Hash != "h1" || on.DesiredHash != "h2" || on.Status != "Running" || on.Phase != "Running" || !on.Ready ||
		!slices.Equal(on.Images, []string{"app:1"}) || on.FailedRevision == nil || on.FailedRevision.Hash != "h2" || on.FailedRevision.Reason != "CrashLoopBackOff" {
		t.Errorf("online device that went back: pod %+v", on)
	}
	for _, name := range []string{"pi-2", "pi-3"} {
		r := rows[name]
		if r.Pod == nil || r.Pod.Status != "Unknown" || r.Pod.Phase != "Running" || r.LastSeen == nil || r.State == StateOnline {
			t.Errorf("%s (%s): pod %+v, last seen %v; want status Unknown, last reported Running", name, r.State, r.Pod, r.LastSeen)
		}
	}
}

func TestBadQueries(t *testing.T) {
	for _, tt := range []struct{ query, param string }{
		{"state=sleepy", "state"},
		{"sort=colour", "sort"},
		{"sort=--name", "sort"},
		{"limit=501", "limit"},
		{"limit=-1", "limit"},
		{"offset=x", "offset"},
	} {
		v, _ := url.ParseQuery(tt.query)
		_, err := parseQuery(v, selector.Parse)
		pe, ok := err.(*paramError)
		if !ok || pe.param != tt.param {
			t.Errorf("%s: %v, want an error naming %s", tt.query, err, tt.param)
		}
	}
	v, _ := url.ParseQuery("labelSelector=a%3D%3D%3D")
	if _, err := parseQuery(v, selector.Parse); err == nil {
		t.Error("a malformed labelSelector was accepted")
	}
}

// TestSnapshotReuse: an unchanged device is taken over from the previous
// snapshot; a changed one is read again.
func TestSnapshotReuse(t *testing.T) {
	now := t0
	m := fleet(t, &now, "pi-1 online", "pi-2 online")
	s1, err := takeSnapshot(m, nil, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	uid, _, _ := m.Device("pi-2")
	m.UpdateReport("pi-2", uid, func(r *fleetmodel.Report, _ bool) bool {
		r.Online = false
		return true
	})
	s2, err := takeSnapshot(m, s1, 2, now)
	if err != nil {
		t.Fatal(err)
	}
	if s2.lookup("pi-1").info != s1.lookup("pi-1").info {
		t.Error("the unchanged device was decoded again")
	}
	if s2.lookup("pi-2").state != StateOffline || s1.lookup("pi-2").state != StateOnline {
		t.Errorf("pi-2: %s then %s, want online then offline", s1.lookup("pi-2").state, s2.lookup("pi-2").state)
	}
}

func manyDevices(b *testing.B, n int) (*fleetmodel.Model, *time.Time) {
	now := t0
	specs := make([]string, n)
	for i := range specs {
		specs[i] = fmt.Sprintf("shop-%05d online site=s%d role=r%d", i, i%8, i%4)
	}
	return fleet(b, &now, specs...), &now
}

// BenchmarkSnapshot10k: one scan of 10,000 unchanged devices.
func BenchmarkSnapshot10k(b *testing.B) {
	m, now := manyDevices(b, 10000)
	prev, err := takeSnapshot(m, nil, 1, *now)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if prev, err = takeSnapshot(m, prev, 1, *now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPage10k: one filtered, sorted page out of 10,000 devices.
func BenchmarkPage10k(b *testing.B) {
	m, now := manyDevices(b, 10000)
	s, err := takeSnapshot(m, nil, 1, *now)
	if err != nil {
		b.Fatal(err)
	}
	sel, err := selector.Parse("site in (s1,s2)")
	if err != nil {
		b.Fatal(err)
	}
	q := Query{Search: "shop-0", Selector: sel, Sort: "-lastSeen", Limit: DefaultLimit}
	b.ResetTimer()
	for b.Loop() {
		if p := s.page(q); p.Matched != 2500 {
			b.Fatalf("matched %d", p.Matched)
		}
	}
}
