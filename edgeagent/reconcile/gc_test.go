package reconcile

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

func TestParseDiskFloor(t *testing.T) {
	tests := []struct {
		in   string
		want DiskFloor
		err  bool
	}{
		{in: "10%", want: DiskFloor{Percent: 10}},
		{in: " 2.5 % ", want: DiskFloor{Percent: 2.5}},
		{in: "1Gi", want: DiskFloor{Bytes: 1 << 30}},
		{in: "500M", want: DiskFloor{Bytes: 500e6}},
		{in: "1073741824", want: DiskFloor{Bytes: 1 << 30}},
		{in: "0", want: DiskFloor{Off: true}},
		{in: "0%", want: DiskFloor{Off: true}},
		{in: "100%", err: true},
		{in: "-1%", err: true},
		{in: "-1Gi", err: true},
		{in: "lots", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		got, err := ParseDiskFloor(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseDiskFloor(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil {
			if again, err := ParseDiskFloor(got.String()); err != nil || again != got {
				t.Errorf("ParseDiskFloor(%q.String() = %q) = %+v, %v", tt.in, got.String(), again, err)
			}
		}
	}
}

func TestDiskFloorBelow(t *testing.T) {
	d := runtime.DiskSpace{Total: 1000, Free: 99}
	for _, tt := range []struct {
		f    DiskFloor
		want bool
	}{
		{DiskFloor{Percent: 10}, true},
		{DiskFloor{Percent: 9.9}, false},
		{DiskFloor{Bytes: 100}, true},
		{DiskFloor{Bytes: 99}, false},
		{DiskFloor{Off: true}, false},
	} {
		if got := tt.f.Below(d); got != tt.want {
			t.Errorf("%v.Below(%+v) = %v", tt.f, d, got)
		}
	}
	if (DiskFloor{Percent: 10}).Below(runtime.DiskSpace{}) {
		t.Error("an unmeasured disk is below the floor")
	}
}

func TestPlanImageGC(t *testing.T) {
	img := func(names ...string) []runtime.Image {
		var out []runtime.Image
		for _, n := range names {
			name, err := runtime.ImageName(n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, runtime.Image{Name: name})
		}
		return out
	}
	tests := []struct {
		name                string
		pulled              []runtime.Image
		needed              []string
		undo                []UndoImage
		unused, reclaimable string
	}{
		{name: "nothing pulled", needed: []string{"nginx:1"}},
		{
			name:   "needed by any reference is kept",
			pulled: img("nginx:1", "docker.io/library/redis:7", "registry.local:5000/app:2"),
			needed: []string{"docker.io/library/nginx:1", "redis:7"},
			unused: "registry.local:5000/app:2",
		},
		{
			name:        "undo images are reclaimable, oldest first",
			pulled:      img("app:1", "api:1", "app:2", "old:1"),
			needed:      []string{"app:2"},
			undo:        []UndoImage{{Image: "api:1", Since: t0.Add(time.Hour)}, {Image: "app:1", Since: t0}},
			unused:      "docker.io/library/old:1",
			reclaimable: "docker.io/library/app:1,docker.io/library/api:1",
		},
		{
			name:        "an image both undo and needed is kept",
			pulled:      img("app:1", "base:1"),
			needed:      []string{"base:1"},
			undo:        []UndoImage{{Image: "base:1", Since: t0}, {Image: "app:1", Since: t0}},
			reclaimable: "docker.io/library/app:1",
		},
		{
			name:        "an image two undos share is as young as the youngest",
			pulled:      img("shared:1", "mid:1"),
			undo:        []UndoImage{{Image: "shared:1", Since: t0}, {Image: "mid:1", Since: t0.Add(time.Minute)}, {Image: "shared:1", Since: t0.Add(time.Hour)}},
			reclaimable: "docker.io/library/mid:1,docker.io/library/shared:1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanImageGC(tt.pulled, tt.needed, tt.undo)
			if got := strings.Join(p.Unused, ","); got != tt.unused {
				t.Errorf("unused = %q, want %q", got, tt.unused)
			}
			if got := strings.Join(p.Reclaimable, ","); got != tt.reclaimable {
				t.Errorf("reclaimable = %q, want %q", got, tt.reclaimable)
			}
		})
	}
}

func (h *harness) removedImages() []string {
	var out []string
	for _, op := range h.rt.Ops() {
		if img, ok := strings.CutPrefix(op, "rmi "); ok {
			out = append(out, img)
		}
	}
	return out
}

// TestReconcilerImageGC: once converged, the agent deletes the images it
// pulled that nothing needs, keeps the previous revision's (an undo
// starts without a pull) and never deletes an image it did not pull.
func TestReconcilerImageGC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		h.rt.AddImage("base:1") // imported by hand: never the agent's to delete
		h.start()
		defer h.stop()
		base := pod("base", schema.RestartAlways, "base:1")
		v1 := pod("web", schema.RestartAlways, "app:1")
		v2 := pod("web", schema.RestartAlways, "app:2")
		v3 := pod("web", schema.RestartAlways, "app:3")
		h.offer(1, v1, base)
		h.advance(DefaultSteadyAfter)
		h.offer(2, v2)
		h.advance(DefaultSteadyAfter)
		if got := h.removedImages(); len(got) != 0 {
			t.Fatalf("deleted %v; app:1 is v2's previous revision, base:1 not the agent's", got)
		}
		h.offer(3, v3)
		h.advance(DefaultSteadyAfter)
		if got := h.removedImages(); !slices.Equal(got, []string{"docker.io/library/app:1"}) {
			t.Fatalf("deleted %v, want app:1 only", got)
		}
		if !h.rt.HasImage("app:2") || !h.rt.HasImage("app:3") || !h.rt.HasImage("base:1") {
			t.Fatal("a kept image is gone")
		}
		if h.countEvents("ImageGC") != 1 {
			t.Errorf("events %v, want one ImageGC", h.events)
		}

		// An undo to v2 starts without pulling.
		pulls := h.rt.Calls().Pull
		h.offer(4, v2)
		if h.state(idOf(v2, "c0")) != runtime.StateRunning || h.rt.Calls().Pull != pulls {
			t.Fatalf("undo: v2 %s after %d pulls", h.state(idOf(v2, "c0")), h.rt.Calls().Pull-pulls)
		}
	})
}

// TestReconcilerImageGCFloor: below the disk floor, the images kept for
// an undo go too, oldest revision first, until free space is back above
// the floor.
func TestReconcilerImageGCFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		for _, img := range []string{"app:1", "app:2", "api:1", "api:2"} {
			h.rt.SetImageSize(img, 1<<30)
		}
		h.start()
		defer h.stop()
		web1 := pod("web", schema.RestartAlways, "app:1")
		web2 := pod("web", schema.RestartAlways, "app:2")
		api1 := pod("api", schema.RestartAlways, "api:1")
		api2 := pod("api", schema.RestartAlways, "api:2")
		h.offer(1, web1)
		h.advance(DefaultSteadyAfter)
		h.offer(2, web1, api1)
		h.advance(DefaultSteadyAfter) // web1 older than api1
		h.offer(3, web2, api2)
		h.advance(DefaultSteadyAfter)
		if got := h.removedImages(); len(got) != 0 {
			t.Fatalf("deleted %v above the floor", got)
		}
		// 9.5 GiB free of 100: below 10 %; one image brings it above.
		h.rt.SetDiskSpace(100<<30, 19<<29)
		h.advance(DefaultImageGCInterval)
		if got := h.removedImages(); !slices.Equal(got, []string{"docker.io/library/app:1"}) {
			t.Fatalf("deleted %v, want the oldest previous revision's app:1 only", got)
		}
		if !h.rt.HasImage("api:1") {
			t.Fatal("api:1 deleted though free space was back above the floor")
		}
		if h.countEvents("ImageGC") != 1 {
			t.Errorf("events %v", h.events)
		}
		// Far below: every previous image goes, and the agent says it
		// cannot do more.
		h.rt.SetDiskSpace(100<<30, 1<<30)
		h.advance(DefaultImageGCInterval)
		if got := h.removedImages(); !slices.Equal(got, []string{"docker.io/library/app:1", "docker.io/library/api:1"}) {
			t.Fatalf("deleted %v", got)
		}
		if !h.rt.HasImage("app:2") || !h.rt.HasImage("api:2") {
			t.Fatal("an image in use was deleted")
		}
		if h.countEvents("ImageGC") != 3 {
			t.Errorf("events %v, want a third ImageGC saying space is still short", h.events)
		}
	})
}

// TestReconcilerImageGCWaitsForConvergence: an image no longer needed is
// deleted only once the device has converged, not while a pull is in
// flight.
func TestReconcilerImageGCWaitsForConvergence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "", nil, nil)
		g := &gatedRuntime{Fake: h.rt, image: "new:1", release: make(chan struct{})}
		h.run = g
		h.start()
		defer h.stop()
		h.offer(1, pod("old", schema.RestartAlways, "old:1"))
		h.offer(2, pod("new", schema.RestartAlways, "new:1"))
		h.advance(DefaultImageGCInterval)
		if _, ok := h.rt.Get(idOf(pod("old", schema.RestartAlways, "old:1"), "c0")); ok {
			t.Fatal("old pod not removed")
		}
		if !h.rt.HasImage("old:1") {
			t.Fatal("image deleted while a pull was in flight")
		}
		close(g.release)
		synctest.Wait()
		if h.rt.HasImage("old:1") || !h.rt.HasImage("new:1") {
			t.Fatalf("after convergence: removed %v", h.removedImages())
		}
	})
}
