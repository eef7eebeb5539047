package runtime

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func spec(id, image string) ContainerSpec {
	return ContainerSpec{ID: id, Pod: "p", Name: "c", PodHash: "h", Image: image, Labels: map[string]string{"x": "y"}}
}

func TestFakeLifecycle(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{})
	if err := f.Create(ctx, spec("a", "img")); !errors.Is(err, ErrImage) {
		t.Fatalf("create without image: %v", err)
	}
	if err := f.EnsureImage(ctx, "img", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if err := f.EnsureImage(ctx, "img", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if c := f.Calls(); c.Pull != 1 || c.EnsureImage != 2 {
		t.Fatalf("IfNotPresent pulled again: %+v", c)
	}
	if err := f.EnsureImage(ctx, "img", schema.PullAlways); err != nil || f.Calls().Pull != 2 {
		t.Fatalf("Always did not pull: %v %+v", err, f.Calls())
	}
	exits, err := f.Exits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, spec("a", "img")); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, spec("a", "img")); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	l, _ := f.List(ctx)
	if len(l) != 1 || l[0].State != StateCreated || l[0].Labels[LabelManaged] != "true" || l[0].Labels[LabelPodHash] != "h" || l[0].Labels["x"] != "y" {
		t.Fatalf("list = %+v", l)
	}
	if err := f.Start(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, "a"); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("start of running: %v", err)
	}
	if err := f.Exit("a", 3); err != nil {
		t.Fatal(err)
	}
	if ev := <-exits; ev.ID != "a" || ev.ExitCode != 3 {
		t.Fatalf("exit event = %+v", ev)
	}
	if c, _ := f.Get("a"); c.State != StateExited || c.ExitCode != 3 || c.FinishedAt.IsZero() {
		t.Fatalf("after exit: %+v", c)
	}
	if err := f.Exit("a", 1); err == nil {
		t.Fatal("exit of an exited container succeeded")
	}
	if err := f.Start(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(ctx, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := <-exits; ev.ExitCode != 143 {
		t.Fatalf("stop exit = %+v", ev)
	}
	if err := f.Stop(ctx, "a", time.Second); err != nil {
		t.Fatalf("stopping a stopped container: %v", err)
	}
	if err := f.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove missing: %v", err)
	}
	if err := f.Start(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("start missing: %v", err)
	}
	c := f.Calls()
	if c.Create != 3 || c.Start != 4 || c.Stop != 2 || c.Remove != 2 {
		t.Fatalf("calls = %+v", c)
	}
	want := []string{"create a", "start a", "exit a 3", "start a", "stop a", "exit a 143", "stop a", "remove a"}
	if got := f.Ops(); !slices.Equal(got, want) {
		t.Fatalf("ops = %v, want %v", got, want)
	}
}

func TestFakeImageErrorsAndCrash(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{})
	boom := errors.New("manifest unknown")
	f.SetImageError("bad", boom)
	if err := f.EnsureImage(ctx, "bad", schema.PullIfNotPresent); !errors.Is(err, ErrImage) || !errors.Is(err, boom) {
		t.Fatalf("EnsureImage = %v", err)
	}
	f.SetImageError("bad", nil)
	if err := f.EnsureImage(ctx, "bad", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	f.SetCrash("bad", 2)
	exits, _ := f.Exits(ctx)
	if err := f.Create(ctx, spec("x", "bad")); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if ev := <-exits; ev.ID != "x" || ev.ExitCode != 2 {
		t.Fatalf("crash exit = %+v", ev)
	}
	if err := f.Kill("x"); err == nil {
		t.Fatal("kill of exited container succeeded")
	}
	f.SetListError(errors.New("down"))
	if _, err := f.List(ctx); err == nil {
		t.Fatal("List error not returned")
	}
}

func TestFakeExitsCloseWithContext(t *testing.T) {
	f := NewFake(FakeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := f.Exits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("event on a cancelled stream")
	}
	if f.Subscribers() != 0 {
		t.Fatal("subscriber not removed")
	}
}

func TestFakeStartLatencyHonoursContext(t *testing.T) {
	f := NewFake(FakeOptions{StartLatency: FixedLatency(time.Hour)})
	f.AddImage("img")
	if err := f.Create(context.Background(), spec("a", "img")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Start(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v", err)
	}
}

func TestLogNormalLatency(t *testing.T) {
	l := LogNormalLatency(65*time.Millisecond, 0.5, 42)
	var below int
	for i := 0; i < 1000; i++ {
		d := l()
		if d <= 0 {
			t.Fatalf("latency %s", d)
		}
		if d < 65*time.Millisecond {
			below++
		}
	}
	if below < 400 || below > 600 {
		t.Fatalf("%d of 1000 below the median", below)
	}
	a, b := LogNormalLatency(time.Second, 0.5, 7), LogNormalLatency(time.Second, 0.5, 7)
	if a() != b() {
		t.Fatal("same seed, different latency")
	}
}

func TestFakeConcurrentUse(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{StartLatency: FixedLatency(0)})
	f.AddImage("img")
	exits, _ := f.Exits(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		id := string(rune('a' + i))
		wg.Go(func() {
			for j := 0; j < 20; j++ {
				if err := f.Create(ctx, spec(id, "img")); err != nil {
					t.Error(err)
					return
				}
				_ = f.Start(ctx, id)
				_ = f.Exit(id, 1)
				_, _ = f.List(ctx)
				if err := f.Remove(ctx, id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(exits); n == 0 {
		t.Fatal("no exit events buffered")
	}
}

// TestFakeLogsKeepTheLast: however long a Fake runs, Created and Ops
// return the last fakeLogMax entries, in order.
func TestFakeLogsKeepTheLast(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{})
	if err := f.EnsureImage(ctx, "img", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	const n = 3*fakeLogMax + 5
	for i := range n {
		id := strconv.Itoa(i)
		if err := f.Create(ctx, spec(id, "img")); err != nil {
			t.Fatal(err)
		}
		if err := f.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	created := f.Created()
	if len(created) != fakeLogMax || created[0].ID != strconv.Itoa(n-fakeLogMax) || created[len(created)-1].ID != strconv.Itoa(n-1) {
		t.Fatalf("Created: %d specs, %s … %s; want the last %d, %d … %d", len(created), created[0].ID, created[len(created)-1].ID, fakeLogMax, n-fakeLogMax, n-1)
	}
	ops := f.Ops()
	want0, wantLast := "create "+strconv.Itoa(n-fakeLogMax/2), "remove "+strconv.Itoa(n-1)
	if len(ops) != fakeLogMax || ops[0] != want0 || ops[len(ops)-1] != wantLast {
		t.Fatalf("Ops: %d entries, %q … %q; want %d, %q … %q", len(ops), ops[0], ops[len(ops)-1], fakeLogMax, want0, wantLast)
	}
}

// TestFakeImages: only images EnsureImage pulled are listed and
// removable; sizes move between the images and the free space.
func TestFakeImages(t *testing.T) {
	ctx := context.Background()
	f := NewFake(FakeOptions{})
	f.SetDiskSpace(10<<30, 5<<30)
	f.SetImageSize("app:1", 1<<30)
	f.AddImage("base:1")
	if err := f.EnsureImage(ctx, "app:1", schema.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if err := f.EnsureImage(ctx, "base:1", schema.PullAlways); err != nil {
		t.Fatal(err)
	}
	l, err := f.PulledImages(ctx)
	if err != nil || len(l) != 1 || l[0].Name != "docker.io/library/app:1" {
		t.Fatalf("PulledImages = %+v, %v", l, err)
	}
	if d, _ := f.DiskSpace(ctx); d.Free != 4<<30 {
		t.Fatalf("free after a 1 GiB pull = %d", d.Free)
	}
	if err := f.RemoveImage(ctx, "base:1"); !errors.Is(err, ErrNotFound) || !f.HasImage("base:1") {
		t.Fatalf("RemoveImage of an imported image: %v", err)
	}
	if err := f.RemoveImage(ctx, "docker.io/library/app:1"); err != nil || f.HasImage("app:1") {
		t.Fatalf("RemoveImage: %v", err)
	}
	if d, _ := f.DiskSpace(ctx); d.Free != 5<<30 {
		t.Fatalf("free after removing it = %d", d.Free)
	}
	if ops := f.Ops(); !slices.Equal(ops, []string{"rmi docker.io/library/app:1"}) {
		t.Fatalf("ops = %v", ops)
	}
}
