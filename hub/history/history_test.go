package history

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// clock is an injectable clock for the tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestSampleSizes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"online", unsafe.Sizeof(onlineSample{}), OnlineSampleBytes},
		{"device", unsafe.Sizeof(deviceSample{}), DeviceSampleBytes},
		{"rollout", unsafe.Sizeof(rolloutSample{}), RolloutSampleBytes},
	} {
		if tc.got != tc.want {
			t.Errorf("%s sample: %d bytes, the package doc says %d", tc.name, tc.got, tc.want)
		}
	}
	// A device's bookkeeping, besides its name and uid: the doc says
	// under 200 bytes with the map's entry.
	if n := unsafe.Sizeof(deviceSeries{}); n > 128 {
		t.Errorf("a device's series header is %d bytes", n)
	}
	if DeviceBoundBytes != 4608 {
		t.Errorf("DeviceBoundBytes = %d, the package doc and README say 4,608", DeviceBoundBytes)
	}
}

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		max, pushes int
		want        []int
	}{
		{max: 3, pushes: 0, want: []int{}},
		{max: 3, pushes: 2, want: []int{0, 1}},
		{max: 3, pushes: 3, want: []int{0, 1, 2}},
		{max: 3, pushes: 7, want: []int{4, 5, 6}},
		{max: 288, pushes: 1000, want: seq(712, 1000)},
		{max: 0, pushes: 5, want: []int{}},
	} {
		t.Run(fmt.Sprintf("max%d_pushes%d", tc.max, tc.pushes), func(t *testing.T) {
			r := newRing[int](tc.max)
			for i := range tc.pushes {
				r.push(i)
			}
			got := []int{}
			for i := range r.len() {
				got = append(got, *r.at(i))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ring holds %v, want %v", got, tc.want)
			}
			if cap(r.buf) > tc.max {
				t.Errorf("backing array of %d for a ring of %d", cap(r.buf), tc.max)
			}
		})
	}
	r := newRing[int](5)
	for i := range 8 {
		r.push(i)
	}
	r.dropOldest(2)
	if got := []int{*r.at(0), *r.at(1), *r.at(2)}; r.len() != 3 || !slices.Equal(got, []int{5, 6, 7}) {
		t.Errorf("after dropping 2 of [3..7]: len %d, %v", r.len(), got)
	}
}

func seq(from, to int) []int {
	out := []int{}
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestOnline(t *testing.T) {
	type rec struct {
		after           time.Duration // clock advance before recording
		online, offline int
	}
	for _, tc := range []struct {
		name string
		recs []rec
		// want: per sample, "online/offline min..max".
		want []string
	}{
		{"one interval merges, the dip shows", []rec{{0, 3, 0}, {time.Minute, 2, 1}, {time.Minute, 3, 0}},
			[]string{"3/0 min2 max1"}},
		{"a sample per interval", []rec{{0, 3, 0}, {5 * time.Minute, 2, 1}, {5 * time.Minute, 1, 2}},
			[]string{"3/0 min3 max0", "2/1 min2 max1", "1/2 min1 max2"}},
		{"samples age out of the window", []rec{{0, 9, 9}, {24 * time.Hour, 1, 0}, {5 * time.Minute, 2, 0}},
			[]string{"1/0 min1 max0", "2/0 min2 max0"}},
		{"no negative or huge counts", []rec{{0, 1 << 40, -1}}, []string{"2147483647/-1 min2147483647 max-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			h := New(Options{Now: c.Now})
			for _, r := range tc.recs {
				c.add(r.after)
				h.RecordOnline(r.online, r.offline)
			}
			o := h.Online()
			got := []string{}
			for i := range o.Time {
				got = append(got, fmt.Sprintf("%d/%d min%d max%d", o.Online[i], o.Offline[i], o.MinOnline[i], o.MaxOffline[i]))
				if int64(o.Time[i])%300 != 0 {
					t.Errorf("sample %d starts at %v, not on a 5 min boundary", i, o.Time[i])
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("online series %q, want %q", got, tc.want)
			}
			if o.IntervalSeconds != 300 || o.WindowSeconds != 86400 {
				t.Errorf("interval %v s, window %v s; want 300 and 86400", o.IntervalSeconds, o.WindowSeconds)
			}
		})
	}
}

func TestOnlineBound(t *testing.T) {
	c := newClock()
	h := New(Options{Now: c.Now})
	for range 3 * DefaultSamples {
		h.RecordOnline(1, 0)
		c.add(DefaultInterval)
	}
	if u := h.Usage(); u.OnlineSamples != DefaultSamples || u.Bytes != DefaultSamples*OnlineSampleBytes {
		t.Errorf("after 3 days: %d samples, %d bytes; want %d and %d", u.OnlineSamples, u.Bytes, DefaultSamples, DefaultSamples*OnlineSampleBytes)
	}
	c.add(25 * time.Hour)
	if o := h.Online(); len(o.Time) != 0 {
		t.Errorf("a day after the last sample, %d samples are still shown", len(o.Time))
	}
}

func f64(v float64) *float64 { return &v }

func TestDevice(t *testing.T) {
	const gib = 1 << 30
	type rec struct {
		after time.Duration
		uid   string
		rep   DeviceReport
	}
	status := func(usedGiB, diskUsedGiB uint64) DeviceReport {
		return DeviceReport{MemoryTotalBytes: 4 * gib, MemoryAvailableBytes: (4 - usedGiB) * gib, DiskTotalBytes: 32 * gib, DiskFreeBytes: (32 - diskUsedGiB) * gib}
	}
	for _, tc := range []struct {
		name string
		recs []rec
		want []string // "mem disk temp" per sample, in GiB and °C, - for null
	}{
		{"status reports", []rec{{0, "u1", status(1, 10)}, {5 * time.Minute, "u1", status(2, 11)}},
			[]string{"1 10 -", "2 11 -"}},
		{"the latest report in an interval wins", []rec{{0, "u1", status(1, 10)}, {time.Minute, "u1", status(3, 12)}},
			[]string{"3 12 -"}},
		{"a top report's temperature joins the status's sample", []rec{{0, "u1", status(1, 10)}, {time.Second, "u1", DeviceReport{TemperatureCelsius: f64(51.27)}}},
			[]string{"1 10 51.3"}},
		{"nothing reported is null", []rec{{0, "u1", DeviceReport{}}}, []string{"- - -"}},
		{"a new device of the same name starts afresh", []rec{{0, "u1", status(1, 10)}, {5 * time.Minute, "u2", status(2, 11)}},
			[]string{"2 11 -"}},
		{"samples age out", []rec{{0, "u1", status(1, 10)}, {24*time.Hour + time.Minute, "u1", status(2, 11)}},
			[]string{"2 11 -"}},
		{"available above total is no negative use", []rec{{0, "u1", DeviceReport{MemoryTotalBytes: gib, MemoryAvailableBytes: 2 * gib}}},
			[]string{"0 - -"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			h := New(Options{Now: c.Now})
			for _, r := range tc.recs {
				c.add(r.after)
				h.RecordDevice("pi", r.uid, r.rep)
			}
			d := h.Device("pi")
			got := []string{}
			for i := range d.Time {
				got = append(got, fmt.Sprintf("%s %s %s", gibOf(d.MemoryUsedBytes[i]), gibOf(d.DiskUsedBytes[i]), tempOf(d.TemperatureCelsius[i])))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("device series %q, want %q", got, tc.want)
			}
		})
	}
	if d := New(Options{}).Device("nobody"); d.Time == nil || len(d.Time) != 0 || d.MemoryUsedBytes == nil {
		t.Errorf("an unknown device: %+v, want empty (not null) columns", d)
	}
}

func gibOf(b *uint64) string {
	if b == nil {
		return "-"
	}
	return fmt.Sprint(*b >> 30)
}

func tempOf(c *float64) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprint(*c)
}

// TestDeviceMemoryBound: a day and more of reports from many devices
// takes Samples × DeviceSampleBytes per device, not a byte more.
func TestDeviceMemoryBound(t *testing.T) {
	c := newClock()
	h := New(Options{Now: c.Now})
	const devices = 50
	rep := DeviceReport{MemoryTotalBytes: 1 << 30, MemoryAvailableBytes: 1 << 29, TemperatureCelsius: f64(40)}
	for range 2 * DefaultSamples {
		for d := range devices {
			h.RecordDevice(fmt.Sprint("pi-", d), "u", rep)
			h.RecordDevice(fmt.Sprint("pi-", d), "u", rep) // twice per interval: one sample
		}
		c.add(DefaultInterval)
	}
	u := h.Usage()
	if u.DeviceSamples != devices*DefaultSamples || u.DeviceSampleCap != devices*DefaultSamples {
		t.Errorf("%d devices after two days: %d samples in arrays of %d; want %d in %d", devices, u.DeviceSamples, u.DeviceSampleCap, devices*DefaultSamples, devices*DefaultSamples)
	}
	if per := u.DeviceSampleCap * DeviceSampleBytes / devices; per != DeviceBoundBytes {
		t.Errorf("%d bytes of samples per device, the bound is %d", per, DeviceBoundBytes)
	}
	// A device that reported once takes a few samples' room, not 288.
	h.RecordDevice("quiet", "u", rep)
	if u2 := h.Usage(); u2.DeviceSampleCap-u.DeviceSampleCap > 4 {
		t.Errorf("one report took room for %d samples", u2.DeviceSampleCap-u.DeviceSampleCap)
	}
	h.ForgetDevice("quiet")
	if u3 := h.Usage(); u3.Devices != devices {
		t.Errorf("after ForgetDevice: %d devices, want %d", u3.Devices, devices)
	}
}

func staged(rev int64, step int, phase schema.RolloutPhase, updated, ready, failed int) schema.DeploymentStatus {
	return schema.DeploymentStatus{Revision: rev, Targeted: 4, Updated: updated, Ready: ready, Failed: failed,
		Rollout: &schema.RolloutStatus{Revision: rev, Phase: phase, Step: step, Steps: 2, Targeted: 4,
			Updated: updated, Ready: ready, Failed: failed, Pending: 4 - ready - failed}}
}

func TestRollout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []schema.DeploymentStatus
		want     []string // "rev step/steps phase u/r/f/p" per sample
	}{
		{"only changes are kept", []schema.DeploymentStatus{
			staged(1, 1, schema.RolloutProgressing, 0, 0, 0),
			staged(1, 1, schema.RolloutProgressing, 0, 0, 0),
			staged(1, 1, schema.RolloutProgressing, 1, 0, 0),
			staged(1, 1, schema.RolloutProgressing, 1, 1, 0),
			staged(1, 2, schema.RolloutProgressing, 4, 1, 0),
			staged(1, 2, schema.RolloutComplete, 4, 4, 0),
			staged(1, 2, schema.RolloutComplete, 4, 4, 0),
		}, []string{"1 1/2 Progressing 0/0/0/4", "1 1/2 Progressing 1/0/0/4", "1 1/2 Progressing 1/1/0/3",
			"1 2/2 Progressing 4/1/0/3", "1 2/2 Complete 4/4/0/0"}},
		{"a failed wave", []schema.DeploymentStatus{
			staged(2, 1, schema.RolloutProgressing, 1, 0, 1),
			staged(3, 1, schema.RolloutRolledBack, 4, 3, 1),
		}, []string{"2 1/2 Progressing 1/0/1/3", "3 1/2 RolledBack 4/3/1/0"}},
		{"not staged: one step", []schema.DeploymentStatus{
			{Revision: 1, Targeted: 3, Updated: 2, Ready: 1, Pending: 2},
		}, []string{"1 1/1  2/1/0/2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			h := New(Options{Now: c.Now})
			for _, st := range tc.statuses {
				c.add(time.Second)
				h.RecordRollout("web", st)
			}
			d := h.Deployment("web")
			got := []string{}
			for i := range d.Time {
				got = append(got, fmt.Sprintf("%d %d/%d %s %d/%d/%d/%d", d.Revision[i], d.Step[i], d.Steps[i], d.Phase[i], d.Updated[i], d.Ready[i], d.Failed[i], d.Pending[i]))
				if i > 0 && d.Time[i] <= d.Time[i-1] {
					t.Errorf("times not increasing: %v", d.Time)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rollout series\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestRolloutBound(t *testing.T) {
	h := New(Options{RolloutSamples: 10})
	for i := range 100 {
		h.RecordRollout("web", schema.DeploymentStatus{Targeted: 100, Updated: i})
	}
	d := h.Deployment("web")
	if len(d.Updated) != 10 || d.Updated[0] != 90 || d.Updated[9] != 99 {
		t.Errorf("100 changes in a series of 10: %v", d.Updated)
	}
	if u := h.Usage(); u.Bytes != 10*RolloutSampleBytes {
		t.Errorf("%d bytes for a series of 10, want %d", u.Bytes, 10*RolloutSampleBytes)
	}
}

// TestRecorder reads a real fleet model: the online count, new reports
// only, and drops what is gone.
func TestRecorder(t *testing.T) {
	c := newClock()
	m := fleetmodel.New(fleetmodel.Options{StaleAfter: -1, Now: c.Now})
	w := m.Writer()
	h := New(Options{Now: c.Now})
	r := NewRecorder(h, m, time.Second)
	report := func(name, uid string, avail uint64, online bool) {
		st := &schema.DeviceStatus{Device: name, Time: c.Now(), Node: &schema.NodeInfo{MemoryTotalBytes: 4 << 30, MemoryAvailBytes: avail, DiskTotalBytes: 8 << 30, DiskFreeBytes: 4 << 30}}
		m.UpdateReport(name, uid, func(rp *fleetmodel.Report, _ bool) bool {
			rp.Status, rp.Online, rp.LastSeen = st, online, c.Now()
			return true
		})
	}
	w.PutDevice("a", fleetmodel.Device{UID: "ua"})
	w.PutDevice("b", fleetmodel.Device{UID: "ub"})
	report("a", "ua", 3<<30, true)
	report("b", "ub", 2<<30, true)
	w.SetDeploymentStatus("web", staged(1, 1, schema.RolloutProgressing, 1, 0, 0))
	r.Scan()

	c.add(5 * time.Minute)
	report("b", "ub", 2<<30, false) // b goes offline
	m.SetTop("a", "ua", &schema.TopReport{Device: "a", Time: c.Now(), Node: schema.NodeMetrics{TemperatureCelsius: f64(48.5)}})
	r.Scan()
	r.Scan() // nothing new: no new sample

	if o := h.Online(); !slices.Equal(o.Online, []int32{2, 1}) || !slices.Equal(o.Offline, []int32{0, 1}) {
		t.Errorf("online %v offline %v, want [2 1] and [0 1]", o.Online, o.Offline)
	}
	if d := h.Device("a"); len(d.Time) != 2 || d.TemperatureCelsius[1] == nil || *d.TemperatureCelsius[1] != 48.5 || *d.MemoryUsedBytes[0] != 1<<30 {
		t.Errorf("device a: %+v", d)
	}
	if d := h.Device("b"); len(d.Time) != 2 {
		t.Errorf("device b: %d samples, want 2 (one per report)", len(d.Time))
	}
	if d := h.Deployment("web"); len(d.Time) != 1 {
		t.Errorf("deployment web: %d samples, want 1 (one status)", len(d.Time))
	}

	w.DeleteDevice("b")
	w.DeleteDeploymentStatus("web")
	r.Scan()
	if u := h.Usage(); u.Devices != 1 || u.Deployments != 0 {
		t.Errorf("after deleting b and web: %d devices, %d deployments in the history; want 1 and 0", u.Devices, u.Deployments)
	}
}

// BenchmarkScan: one scan of 10,000 devices that reported once.
func BenchmarkScan(b *testing.B) {
	m := fleetmodel.New(fleetmodel.Options{StaleAfter: -1})
	w := m.Writer()
	for i := range 10000 {
		name := fmt.Sprintf("pi-%05d", i)
		w.PutDevice(name, fleetmodel.Device{UID: name})
		st := &schema.DeviceStatus{Device: name, Time: time.Now(), Node: &schema.NodeInfo{MemoryTotalBytes: 4 << 30, MemoryAvailBytes: 1 << 30}}
		m.UpdateReport(name, name, func(r *fleetmodel.Report, _ bool) bool {
			r.Status, r.Online, r.LastSeen = st, true, time.Now()
			return true
		})
	}
	h := New(Options{})
	r := NewRecorder(h, m, 0)
	b.ResetTimer()
	for b.Loop() {
		r.Scan()
	}
}

// TestRecorderRun: Run scans at once, keeps scanning deployments, and
// returns when its context ends.
func TestRecorderRun(t *testing.T) {
	m := fleetmodel.New(fleetmodel.Options{StaleAfter: -1})
	w := m.Writer()
	w.PutDevice("a", fleetmodel.Device{UID: "ua"})
	h := New(Options{Interval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- NewRecorder(h, m, time.Hour).Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(h.Online().Time) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no online sample: Run did not scan at once")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	// A deployment's change shows within RolloutScanInterval, long before
	// the next full scan (an hour).
	w.SetDeploymentStatus("web", schema.DeploymentStatus{Targeted: 1, Updated: 1})
	for len(h.Deployment("web").Time) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deployment's status was not recorded within its scan interval")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestOnlineStartsWithSampling: the first interval is drawn from when the
// hub started sampling, not from the interval's boundary before it.
func TestOnlineStartsWithSampling(t *testing.T) {
	c := newClock()
	c.add(90 * time.Second) // 12:01:30
	h := New(Options{Now: c.Now})
	h.RecordOnline(2, 0)
	c.add(4 * time.Minute) // 12:05:30
	h.RecordOnline(3, 0)
	o := h.Online()
	want := []float64{float64(c.Now().Add(-4 * time.Minute).Unix()), float64(c.Now().Truncate(5 * time.Minute).Unix())}
	if !slices.Equal(o.Time, want) {
		t.Errorf("sample times %v, want %v (12:01:30, then 12:05:00)", o.Time, want)
	}
}
