// Package runtimetest is the conformance suite every runtime.Runtime must
// pass: the containerd implementation and the in-memory Fake alike. It only
// uses the runtime.Runtime interface, so it says nothing about what runs
// inside a container beyond "it runs until it is stopped".
//
// The contract it pins down, beyond the interface's comments:
//   - Create of a taken ID, and Start of a running container, fail with
//     ErrAlreadyExists and change nothing;
//   - Start, Stop and Remove of an unknown ID fail with ErrNotFound; Stop of
//     a stopped or never-started container succeeds;
//   - after Stop the container is listed as exited with FinishedAt set, a
//     never-started one as created with zero times;
//   - Stop produces an ExitEvent; cancelling the Exits context closes the
//     channel;
//   - List carries the Label* labels and the spec's extra labels;
//   - an unavailable image fails EnsureImage (both policies) and Create with
//     ErrImage, and a failed Create leaves no container;
//   - PulledImages lists canonical names; RemoveImage of an image that is
//     not listed (never pulled, or present before EnsureImage) fails with
//     ErrNotFound and leaves it usable, of a listed one deletes it;
//     DiskSpace reports a filesystem with Free <= Total;
//   - Exec in an unknown container fails with ErrNotFound, in one that
//     does not run (never started, or stopped) with ErrNotRunning.
//
// Use:
//
//	func TestConformance(t *testing.T) {
//		runtimetest.Run(t, func(t *testing.T) runtime.Runtime {
//			return newEmptyRuntime(t) // cleanup registered on t
//		}, "fleet.test/app:v1")
//	}
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// DefaultUnavailableImage is an image no runtime can get: its registry is
// 127.0.0.1 port 1, where nothing listens.
const DefaultUnavailableImage = "127.0.0.1:1/fleet-runtimetest/unavailable:v1"

// Config parameterises the suite.
type Config struct {
	// NewRuntime returns a fresh runtime with no managed containers; it
	// registers its own cleanup on t. Each subtest calls it once.
	NewRuntime func(t *testing.T) runtime.Runtime
	// Image is available with PullIfNotPresent, and a container created
	// from it with no command runs until it is stopped, exiting within a
	// few seconds of SIGTERM.
	Image string
	// UnavailableImage cannot be obtained: EnsureImage and Create must fail
	// with an error wrapping runtime.ErrImage. Empty leaves that out.
	UnavailableImage string
	// StopTimeout is passed to Stop. Default 10s.
	StopTimeout time.Duration
	// Wait bounds every wait for an asynchronous outcome. Default 30s.
	Wait time.Duration
}

// Run runs the suite with DefaultUnavailableImage.
func Run(t *testing.T, newRuntime func(t *testing.T) runtime.Runtime, image string) {
	RunConfig(t, Config{NewRuntime: newRuntime, Image: image, UnavailableImage: DefaultUnavailableImage})
}

// RunConfig runs the suite as cfg says.
func RunConfig(t *testing.T, cfg Config) {
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	s := &suite{cfg: cfg}
	tests := []struct {
		name string
		fn   func(t *testing.T, rt runtime.Runtime)
	}{
		{"EnsureImage", s.testEnsureImage},
		{"CreateAndList", s.testCreateAndList},
		{"CreateDuplicate", s.testCreateDuplicate},
		{"StartStopStart", s.testStartStopStart},
		{"StopNeverStarted", s.testStopNeverStarted},
		{"Remove", s.testRemove},
		{"NotFound", s.testNotFound},
		{"ExitsOnStop", s.testExitsOnStop},
		{"ExitsClosedOnCancel", s.testExitsClosedOnCancel},
		{"Concurrent", s.testConcurrent},
		{"Images", s.testImages},
		{"ExecNotRunning", s.testExecNotRunning},
	}
	if cfg.UnavailableImage != "" {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, rt runtime.Runtime)
		}{"UnavailableImage", s.testUnavailableImage})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := cfg.NewRuntime(t)
			tc.fn(t, rt)
		})
	}
}

type suite struct{ cfg Config }

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.Wait)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) spec(id string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		ID:         id,
		Pod:        "pod-" + id,
		Name:       "main",
		PodHash:    "hash-" + id,
		Image:      s.cfg.Image,
		PullPolicy: schema.PullIfNotPresent,
		Labels:     map[string]string{"example.com/extra": "yes"},
	}
}

// create ensures the image and creates a container with spec(id).
func (s *suite) create(t *testing.T, rt runtime.Runtime, id string) {
	t.Helper()
	ctx := s.ctx(t)
	if err := rt.EnsureImage(ctx, s.cfg.Image, schema.PullIfNotPresent); err != nil {
		t.Fatalf("EnsureImage(%s): %v", s.cfg.Image, err)
	}
	if err := rt.Create(ctx, s.spec(id)); err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
}

// Find returns the container id as rt lists it; ok false if it is not
// listed. A failing List fails the test.
func Find(t *testing.T, rt runtime.Runtime, id string) (runtime.Container, bool) {
	t.Helper()
	cs, err := rt.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c, true
		}
	}
	return runtime.Container{}, false
}

// mustGet is get that fails t when id is not listed.
func mustGet(t *testing.T, rt runtime.Runtime, id string) runtime.Container {
	t.Helper()
	c, ok := Find(t, rt, id)
	if !ok {
		t.Fatalf("container %s not listed", id)
	}
	return c
}

// awaitState polls List until id is in state want.
func (s *suite) awaitState(t *testing.T, rt runtime.Runtime, id string, want runtime.State) runtime.Container {
	t.Helper()
	deadline := time.Now().Add(s.cfg.Wait)
	for {
		c := mustGet(t, rt, id)
		if c.State == want {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: state %s after %v, want %s", id, c.State, s.cfg.Wait, want)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (s *suite) testEnsureImage(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	for i := 0; i < 2; i++ {
		if err := rt.EnsureImage(ctx, s.cfg.Image, schema.PullIfNotPresent); err != nil {
			t.Fatalf("EnsureImage #%d: %v", i+1, err)
		}
	}
}

func (s *suite) testImages(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	if err := rt.EnsureImage(ctx, s.cfg.Image, schema.PullIfNotPresent); err != nil {
		t.Fatalf("EnsureImage: %v", err)
	}
	name, err := runtime.ImageName(s.cfg.Image)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := rt.PulledImages(ctx)
	if err != nil {
		t.Fatalf("PulledImages: %v", err)
	}
	listed := false
	for _, img := range pulled {
		if n, err := runtime.ImageName(img.Name); err != nil || n != img.Name {
			t.Errorf("PulledImages lists %q: not a canonical name", img.Name)
		}
		listed = listed || img.Name == name
	}
	if err := rt.RemoveImage(ctx, "fleet.test/never-pulled:v0"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("RemoveImage of an absent image: %v, want ErrNotFound", err)
	}
	if listed {
		if err := rt.RemoveImage(ctx, s.cfg.Image); err != nil {
			t.Fatalf("RemoveImage of a pulled image: %v", err)
		}
		after, err := rt.PulledImages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range after {
			if img.Name == name {
				t.Errorf("%s still listed after RemoveImage", name)
			}
		}
	} else {
		// Present before EnsureImage: not the agent's to delete.
		if err := rt.RemoveImage(ctx, s.cfg.Image); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("RemoveImage of an image EnsureImage did not pull: %v, want ErrNotFound", err)
		}
		if err := rt.Create(ctx, s.spec("img")); err != nil {
			t.Errorf("Create after a refused RemoveImage: %v", err)
		}
	}
	ds, err := rt.DiskSpace(ctx)
	if err != nil {
		t.Fatalf("DiskSpace: %v", err)
	}
	if ds.Total == 0 || ds.Free > ds.Total {
		t.Errorf("DiskSpace = %+v", ds)
	}
}

func (s *suite) testCreateAndList(t *testing.T, rt runtime.Runtime) {
	if cs, err := rt.List(s.ctx(t)); err != nil || len(cs) != 0 {
		t.Fatalf("List on a new runtime = %v, %v; want empty", cs, err)
	}
	s.create(t, rt, "c1")
	c := mustGet(t, rt, "c1")
	want := s.spec("c1")
	if c.Pod != want.Pod || c.Name != want.Name || c.PodHash != want.PodHash || c.Image != want.Image {
		t.Errorf("listed %+v, want pod %q name %q hash %q image %q", c, want.Pod, want.Name, want.PodHash, want.Image)
	}
	if c.State != runtime.StateCreated {
		t.Errorf("state %s, want %s", c.State, runtime.StateCreated)
	}
	if !c.StartedAt.IsZero() || !c.FinishedAt.IsZero() {
		t.Errorf("never started, yet StartedAt %v FinishedAt %v", c.StartedAt, c.FinishedAt)
	}
	wantLabels := map[string]string{
		runtime.LabelManaged:   "true",
		runtime.LabelPod:       want.Pod,
		runtime.LabelContainer: want.Name,
		runtime.LabelPodHash:   want.PodHash,
		"example.com/extra":    "yes",
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, c.Labels[k], v, c.Labels)
		}
	}
}

func (s *suite) testCreateDuplicate(t *testing.T, rt runtime.Runtime) {
	s.create(t, rt, "dup")
	err := rt.Create(s.ctx(t), s.spec("dup"))
	if !errors.Is(err, runtime.ErrAlreadyExists) {
		t.Fatalf("second Create = %v, want ErrAlreadyExists", err)
	}
	if cs, err := rt.List(s.ctx(t)); err != nil || len(cs) != 1 {
		t.Fatalf("List = %d containers, %v; want 1", len(cs), err)
	}
}

func (s *suite) testStartStopStart(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	s.create(t, rt, "web")
	if err := rt.Start(ctx, "web"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	first := s.awaitState(t, rt, "web", runtime.StateRunning)
	if first.StartedAt.IsZero() {
		t.Error("running container has no StartedAt")
	}

	// Starting a running container changes nothing and says so.
	if err := rt.Start(ctx, "web"); !errors.Is(err, runtime.ErrAlreadyExists) {
		t.Fatalf("Start of a running container = %v, want ErrAlreadyExists", err)
	}
	if c := mustGet(t, rt, "web"); c.State != runtime.StateRunning || !c.StartedAt.Equal(first.StartedAt) {
		t.Errorf("after second Start: state %s StartedAt %v, want running since %v", c.State, c.StartedAt, first.StartedAt)
	}

	if err := rt.Stop(ctx, "web", s.cfg.StopTimeout); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped := mustGet(t, rt, "web")
	if stopped.State != runtime.StateExited {
		t.Fatalf("after Stop: state %s, want %s", stopped.State, runtime.StateExited)
	}
	if stopped.FinishedAt.IsZero() || stopped.FinishedAt.Before(first.StartedAt) {
		t.Errorf("after Stop: FinishedAt %v, started %v", stopped.FinishedAt, first.StartedAt)
	}
	if err := rt.Stop(ctx, "web", s.cfg.StopTimeout); err != nil {
		t.Errorf("Stop of a stopped container: %v", err)
	}

	if err := rt.Start(ctx, "web"); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	again := s.awaitState(t, rt, "web", runtime.StateRunning)
	if again.StartedAt.Before(stopped.FinishedAt) {
		t.Errorf("restarted at %v, before the previous run finished at %v", again.StartedAt, stopped.FinishedAt)
	}
	if err := rt.Stop(ctx, "web", s.cfg.StopTimeout); err != nil {
		t.Fatalf("final Stop: %v", err)
	}
}

func (s *suite) testStopNeverStarted(t *testing.T, rt runtime.Runtime) {
	s.create(t, rt, "idle")
	if err := rt.Stop(s.ctx(t), "idle", s.cfg.StopTimeout); err != nil {
		t.Fatalf("Stop of a never-started container: %v", err)
	}
	if c := mustGet(t, rt, "idle"); c.State != runtime.StateCreated {
		t.Errorf("state %s, want %s", c.State, runtime.StateCreated)
	}
}

func (s *suite) testRemove(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	s.create(t, rt, "gone")
	s.create(t, rt, "kept")
	if err := rt.Start(ctx, "gone"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.awaitState(t, rt, "gone", runtime.StateRunning)
	if err := rt.Remove(ctx, "gone"); err != nil {
		t.Fatalf("Remove of a running container: %v", err)
	}
	if _, ok := Find(t, rt, "gone"); ok {
		t.Fatal("removed container still listed")
	}
	if _, ok := Find(t, rt, "kept"); !ok {
		t.Fatal("Remove took another container with it")
	}
	if err := rt.Remove(ctx, "gone"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}
	// The ID is free again.
	s.create(t, rt, "gone")
	if err := rt.Remove(ctx, "kept"); err != nil {
		t.Fatalf("Remove of a never-started container: %v", err)
	}
}

func (s *suite) testNotFound(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	for name, op := range map[string]func() error{
		"Start":  func() error { return rt.Start(ctx, "nope") },
		"Stop":   func() error { return rt.Stop(ctx, "nope", s.cfg.StopTimeout) },
		"Remove": func() error { return rt.Remove(ctx, "nope") },
	} {
		if err := op(); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("%s of an unknown container = %v, want ErrNotFound", name, err)
		}
	}
}

func (s *suite) testExitsOnStop(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	s.create(t, rt, "ev")
	exits, err := rt.Exits(ctx)
	if err != nil {
		t.Fatalf("Exits: %v", err)
	}
	if err := rt.Start(ctx, "ev"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	before := time.Now()
	if err := rt.Stop(ctx, "ev", s.cfg.StopTimeout); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	timeout := time.After(s.cfg.Wait)
	for {
		select {
		case ev, ok := <-exits:
			if !ok {
				t.Fatal("exit channel closed before the exit")
			}
			if ev.ID != "ev" {
				continue
			}
			if ev.At.IsZero() {
				t.Error("exit event without a time")
			} else if ev.At.Before(before.Add(-time.Minute)) {
				t.Errorf("exit event at %v, stopped at %v", ev.At, before)
			}
			return
		case <-timeout:
			t.Fatalf("no exit event within %v of Stop", s.cfg.Wait)
		}
	}
}

func (s *suite) testExitsClosedOnCancel(t *testing.T, rt runtime.Runtime) {
	ctx, cancel := context.WithCancel(s.ctx(t))
	exits, err := rt.Exits(ctx)
	if err != nil {
		t.Fatalf("Exits: %v", err)
	}
	cancel()
	timeout := time.After(s.cfg.Wait)
	for {
		select {
		case _, ok := <-exits:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("exit channel still open %v after cancel", s.cfg.Wait)
		}
	}
}

func (s *suite) testConcurrent(t *testing.T, rt runtime.Runtime) {
	const n = 6
	ctx := s.ctx(t)
	if err := rt.EnsureImage(ctx, s.cfg.Image, schema.PullIfNotPresent); err != nil {
		t.Fatalf("EnsureImage: %v", err)
	}
	parallel := func(op string, f func(id string) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = f(fmt.Sprintf("par-%d", i))
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent %s: %v", op, err)
		}
	}
	parallel("Create", func(id string) error { return rt.Create(ctx, s.spec(id)) })
	parallel("Start", func(id string) error { return rt.Start(ctx, id) })
	for i := range n {
		s.awaitState(t, rt, fmt.Sprintf("par-%d", i), runtime.StateRunning)
	}
	// Same ID from many goroutines: exactly one Create wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rt.Create(ctx, s.spec("race"))
			if err != nil && !errors.Is(err, runtime.ErrAlreadyExists) {
				t.Errorf("racing Create: %v", err)
			}
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d racing Creates of one ID succeeded, want 1", wins)
	}
	parallel("Remove", func(id string) error { return rt.Remove(ctx, id) })
	cs, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(cs) != 1 || cs[0].ID != "race" {
		t.Fatalf("after removing: %v, want only race", cs)
	}
}

func (s *suite) testUnavailableImage(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	for _, p := range []schema.PullPolicy{schema.PullIfNotPresent, schema.PullAlways} {
		start := time.Now()
		err := rt.EnsureImage(ctx, s.cfg.UnavailableImage, p)
		if !errors.Is(err, runtime.ErrImage) {
			t.Errorf("EnsureImage(%s, %s) = %v, want ErrImage", s.cfg.UnavailableImage, p, err)
		}
		if d := time.Since(start); d > s.cfg.Wait {
			t.Errorf("EnsureImage(%s) took %v", p, d)
		}
	}
	spec := s.spec("noimage")
	spec.Image = s.cfg.UnavailableImage
	if err := rt.Create(ctx, spec); !errors.Is(err, runtime.ErrImage) {
		t.Errorf("Create with an unavailable image = %v, want ErrImage", err)
	}
	if _, ok := Find(t, rt, "noimage"); ok {
		t.Error("failed Create left a container")
	}
}

func (s *suite) testExecNotRunning(t *testing.T, rt runtime.Runtime) {
	ctx := s.ctx(t)
	if _, _, err := rt.Exec(ctx, "nope", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exec in an unknown container = %v, want ErrNotFound", err)
	}
	s.create(t, rt, "noexec")
	if _, _, err := rt.Exec(ctx, "noexec", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("Exec in a never-started container = %v, want ErrNotRunning", err)
	}
	if err := rt.Start(ctx, "noexec"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.awaitState(t, rt, "noexec", runtime.StateRunning)
	if err := rt.Stop(ctx, "noexec", s.cfg.StopTimeout); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, _, err := rt.Exec(ctx, "noexec", []string{"/app"}, time.Second); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("Exec in a stopped container = %v, want ErrNotRunning", err)
	}
}
