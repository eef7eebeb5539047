package reconcile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// TestDiffHeldUpdate: a held pod pulls its new images ahead and keeps the
// running version; once prepared it still waits; released, it switches.
// A first install is never held.
func TestDiffHeldUpdate(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	hold := map[string]Hold{"web": {Reason: schema.UpdateReasonWindow, Until: t0.Add(time.Hour)}}
	running := []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)}
	prepared := state.History{key(v2, "c0"): {Prepared: true}}
	for _, tt := range []struct {
		name     string
		observed []runtime.Container
		hist     state.History
		holds    map[string]Hold
		want     string
	}{
		{"held, not downloaded: pull ahead", running, nil, hold, "prepare web/c0"},
		{"held, downloaded: wait, the old version runs", running, prepared, hold, ""},
		{"released: switch", running, prepared, nil, "remove web/c0 (SpecChanged); create web/c0 replace"},
		{"first install is not held", nil, nil, hold, "create web/c0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Diff([]schema.Pod{v2}, tt.observed, nil, tt.hist, nil, t0, Policy{Holds: tt.holds})
			if got := summary(p); got != tt.want {
				t.Errorf("plan %q, want %q", got, tt.want)
			}
		})
	}
}

// TestUpdateGateWindow: outside its window a pod that replaces a running
// version is held until the window opens, read in the device's zone;
// UpdateNow and a first install are not held.
func TestUpdateGateWindow(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	v2.UpdateWindow = &schema.UpdateWindow{Schedule: "0 1 * * *", Duration: "4h", TimeZone: schema.TimeZoneDevice}
	running := []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)}
	g := &updateGate{loc: paris, lockRoot: t.TempDir(), seen: map[string]lockSeen{}}
	noon := time.Date(2026, 3, 10, 12, 0, 0, 0, paris)

	holds, wake := g.holds([]schema.Pod{v2}, running, nil, noon, nopRecorder{})
	h, ok := holds["web"]
	open := time.Date(2026, 3, 11, 1, 0, 0, 0, paris)
	if !ok || h.Reason != schema.UpdateReasonWindow || !h.Until.Equal(open) || !wake.Equal(open) {
		t.Fatalf("at noon: holds %+v, wake %v; want held until %v", holds, wake, open)
	}
	if want := "waiting for window until 2026-03-11T01:00:00+01:00"; h.Message != want {
		t.Errorf("message %q, want %q", h.Message, want)
	}
	// 00:30 UTC is 01:30 in Paris: open.
	if holds, _ := g.holds([]schema.Pod{v2}, running, nil, time.Date(2026, 3, 11, 0, 30, 0, 0, time.UTC), nopRecorder{}); len(holds) != 0 {
		t.Errorf("inside the window in the device's zone: held %+v", holds)
	}
	// The same instant on a device in UTC: closed.
	gUTC := &updateGate{loc: time.UTC, lockRoot: g.lockRoot, seen: map[string]lockSeen{}}
	if holds, _ := gUTC.holds([]schema.Pod{v2}, running, nil, time.Date(2026, 3, 11, 0, 30, 0, 0, time.UTC), nopRecorder{}); len(holds) != 1 {
		t.Errorf("00:30 on a UTC device: want held")
	}
	if holds, _ := g.holds([]schema.Pod{v2}, nil, nil, noon, nopRecorder{}); len(holds) != 0 {
		t.Errorf("first install held: %+v", holds)
	}
	now := v2
	now.UpdateNow = true
	if holds, _ := g.holds([]schema.Pod{now}, running, nil, noon, nopRecorder{}); len(holds) != 0 {
		t.Errorf("updateNow held: %+v", holds)
	}
}

// TestUpdateGateLock: a flock held on a file of the pod's lock directory
// holds its replacement, naming the holder; released, or past its
// deadline under force, it does not; under wait it still does.
func TestUpdateGateLock(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	v2.UpdateLock = &schema.UpdateLock{Deadline: "10m"}
	running := []runtime.Container{ctr(key(v1, "c0"), runtime.StateRunning)}
	g := &updateGate{loc: time.UTC, lockRoot: t.TempDir(), seen: map[string]lockSeen{}}
	dir, err := g.ensureLockDir("web")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("lock dir mode %v (%v), want sticky 0777", fi.Mode(), err)
	}
	if holds, _ := g.holds([]schema.Pod{v2}, running, nil, t0, nopRecorder{}); len(holds) != 0 {
		t.Fatalf("no lock file: held %+v", holds)
	}
	f, err := os.Create(filepath.Join(dir, "updates.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if holds, _ := g.holds([]schema.Pod{v2}, running, nil, t0, nopRecorder{}); len(holds) != 0 {
		t.Fatalf("unlocked file: held %+v", holds)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	holds, wake := g.holds([]schema.Pod{v2}, running, nil, t0, nopRecorder{})
	h := holds["web"]
	if h.Reason != schema.UpdateReasonLock || !h.Since.Equal(t0) || !h.Until.Equal(t0.Add(10*time.Minute)) || !wake.Equal(t0.Add(lockPoll)) {
		t.Fatalf("locked: holds %+v, wake %v", holds, wake)
	}
	if !strings.HasPrefix(h.Holder, "updates.lock: pid ") || !strings.Contains(h.Message, "update lock held by updates.lock: pid") {
		t.Errorf("holder %q, message %q: want the file and the pid", h.Holder, h.Message)
	}
	// Still held later: the same since.
	if holds, _ := g.holds([]schema.Pod{v2}, running, nil, t0.Add(time.Minute), nopRecorder{}); !holds["web"].Since.Equal(t0) {
		t.Errorf("since moved: %+v", holds["web"])
	}
	// Past the deadline: force replaces it.
	if holds, _ := g.holds([]schema.Pod{v2}, running, nil, t0.Add(11*time.Minute), nopRecorder{}); len(holds) != 0 {
		t.Errorf("past the deadline under force: held %+v", holds)
	}
	wait := v2
	wait.UpdateLock = &schema.UpdateLock{Deadline: "10m", OnDeadline: schema.LockWait}
	if holds, _ := g.holds([]schema.Pod{wait}, running, nil, t0.Add(11*time.Minute), nopRecorder{}); holds["web"].Reason != schema.UpdateReasonLock {
		t.Errorf("past the deadline under wait: not held")
	}
	// Released: not held.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if holds, _ := g.holds([]schema.Pod{wait}, running, nil, t0.Add(12*time.Minute), nopRecorder{}); len(holds) != 0 {
		t.Errorf("released: held %+v", holds)
	}
}

// TestUpdateStatus: the pod status of a held update is that of the
// version that runs, with update saying downloaded and waiting.
func TestUpdateStatus(t *testing.T) {
	v1 := pod("web", schema.RestartAlways, "app:1")
	v2 := pod("web", schema.RestartAlways, "app:2")
	h2 := schema.PodSpecHash(v2.Spec)
	newSt := schema.PodStatus{Name: "web", Hash: h2, Phase: schema.PhasePending}
	runSt := schema.PodStatus{Name: "web", Hash: schema.PodSpecHash(v1.Spec), Phase: schema.PhaseRunning, Ready: true}
	hold := &Hold{Reason: schema.UpdateReasonWindow, Until: t0, Message: "waiting for window until X"}
	st := updateStatus(newSt, v2, h2, true, true, hold, &runSt)
	if st.Hash != runSt.Hash || !st.Ready || st.Update == nil || st.Update.State != schema.UpdateWaiting || st.Update.Hash != h2 ||
		st.Message != "downloaded; waiting for window until X" || st.Update.Reason != schema.UpdateReasonWindow {
		t.Fatalf("held, downloaded: %+v / %+v", st, st.Update)
	}
	if st := updateStatus(newSt, v2, h2, true, false, hold, &runSt); st.Update.State != schema.UpdateDownloading {
		t.Errorf("held, downloading: %+v", st.Update)
	}
	if st := updateStatus(newSt, v2, h2, true, true, nil, nil); st.Update.State != schema.UpdateDownloaded || st.Hash != h2 {
		t.Errorf("released: %+v", st.Update)
	}
	v2.UpdateWindow = &schema.UpdateWindow{Schedule: "0 1 * * *", Duration: "1h"}
	if st := updateStatus(newSt, v2, h2, false, true, nil, nil); st.Update == nil || st.Update.State != schema.UpdateSwitched {
		t.Errorf("switched: %+v", st.Update)
	}
}
