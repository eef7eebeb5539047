package runtime

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Fake is an in-memory Runtime for unit tests and hollow agents. It keeps
// containers in a map and runs no goroutine per container: exits happen
// only when a test calls Exit or Kill (or an image is set to crash), so
// thousands of Fakes fit in one process.
type Fake struct {
	now     func() time.Time
	latency func() time.Duration

	mu         sync.Mutex
	containers map[string]*fakeContainer
	images     map[string]bool      // by imageKey
	pulled     map[string]time.Time // by imageKey: images EnsureImage pulled
	imageSize  map[string]uint64    // by imageKey
	disk       DiskSpace
	imageErr   map[string]error
	pullCreds  map[string]map[string]Credential // by imageKey: the last pull's
	stopGrace  map[string]time.Duration         // by ID: the last Stop's timeout
	crash      map[string]int32
	listErr    error
	subs       map[*fakeSub]struct{}
	created    []ContainerSpec
	ops        []string
	calls      FakeCalls
	exec       ExecHandler // see fake_exec.go
	execStream ExecStreamHandler
	stats      map[string]ContainerStats // by ID; see SetStats
}

// fakeLogMax bounds the Created and Ops logs: they return the last
// fakeLogMax entries.
const fakeLogMax = 4096

// appendBounded appends v to a log that keeps its last fakeLogMax
// entries. It lets the log grow to twice that and then drops the older
// half at once: trimming one entry per append would copy the whole log
// every time, which made a long-running Fake (a hollow agent,
// BenchmarkAgentChange) spend most of its time moving its own log.
func appendBounded[T any](log []T, v T) []T {
	if len(log) >= 2*fakeLogMax {
		n := copy(log, log[len(log)-fakeLogMax+1:])
		clear(log[n:])
		log = log[:n]
	}
	return append(log, v)
}

// lastEntries returns a copy of the last fakeLogMax entries of a log.
func lastEntries[T any](log []T) []T {
	return slices.Clone(log[max(0, len(log)-fakeLogMax):])
}

var _ Runtime = (*Fake)(nil)

// FakeOptions configures a Fake. The zero value works: real time, no
// start latency.
type FakeOptions struct {
	// Now returns the time stamped on starts and exits (default time.Now).
	Now func() time.Time
	// StartLatency returns how long each Start takes (default 0). See
	// FixedLatency and LogNormalLatency.
	StartLatency func() time.Duration
}

// FakeCalls counts the calls made to a Fake.
type FakeCalls struct {
	EnsureImage, Pull, Create, Start, Stop, Remove, List, RemoveImage int
	Exec, ExecStream, Stats                                           int
}

type fakeContainer struct {
	spec       ContainerSpec
	labels     map[string]string
	state      State
	exitCode   int32
	startedAt  time.Time
	finishedAt time.Time
}

type fakeSub struct {
	ch      chan ExitEvent
	dropped int
}

// NewFake returns an empty Fake.
func NewFake(o FakeOptions) *Fake {
	f := &Fake{
		now:        o.Now,
		latency:    o.StartLatency,
		containers: map[string]*fakeContainer{},
		images:     map[string]bool{},
		pulled:     map[string]time.Time{},
		imageSize:  map[string]uint64{},
		disk:       DiskSpace{Path: "/fake", Total: 64 << 30, Free: 32 << 30},
		imageErr:   map[string]error{},
		pullCreds:  map[string]map[string]Credential{},
		stopGrace:  map[string]time.Duration{},
		crash:      map[string]int32{},
		subs:       map[*fakeSub]struct{}{},
	}
	if f.now == nil {
		f.now = time.Now
	}
	return f
}

// FixedLatency returns a StartLatency that is always d.
func FixedLatency(d time.Duration) func() time.Duration {
	return func() time.Duration { return d }
}

// LogNormalLatency returns a StartLatency drawn from a log-normal
// distribution with the given median and shape sigma (0.5 gives a
// realistic long tail), from a generator seeded with seed. It is safe for
// concurrent use.
func LogNormalLatency(median time.Duration, sigma float64, seed uint64) func() time.Duration {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed+1))
	return func() time.Duration {
		mu.Lock()
		n := r.NormFloat64()
		mu.Unlock()
		return time.Duration(float64(median) * math.Exp(sigma*n))
	}
}

// SetImageError makes EnsureImage of image fail with err (wrapped in
// ErrImage) until it is called again with a nil err.
func (f *Fake) SetImageError(image string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.imageErr, image)
		return
	}
	f.imageErr[image] = err
}

// AddImage makes image present, as if it had been imported: not pulled
// by EnsureImage, so PulledImages does not list it.
func (f *Fake) AddImage(image string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[imageKey(image)] = true
}

// LastPullCredentials returns the credentials (WithPullCredentials) the
// last pull of image carried, and whether it was pulled at all.
func (f *Fake) LastPullCredentials(image string) (map[string]Credential, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.pullCreds[imageKey(image)]
	return maps.Clone(c), ok
}

// LastStopTimeout returns the timeout (SIGTERM to SIGKILL) of the last
// Stop of container id, and whether it was stopped at all.
func (f *Fake) LastStopTimeout(id string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.stopGrace[id]
	return d, ok
}

// HasImage reports whether image is present.
func (f *Fake) HasImage(image string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.images[imageKey(image)]
}

// SetImageSize sets the bytes image takes on disk: a pull takes them from
// the free space, RemoveImage gives them back.
func (f *Fake) SetImageSize(image string, bytes uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.imageSize[imageKey(image)] = bytes
}

// SetDiskSpace sets what DiskSpace reports (default 64 GiB, 32 GiB free).
func (f *Fake) SetDiskSpace(total, free uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disk.Total, f.disk.Free = total, free
}

// imageKey is the Fake's key for an image: its canonical name, or the
// reference itself when it does not parse.
func imageKey(image string) string {
	if n, err := ImageName(image); err == nil {
		return n
	}
	return image
}

// SetCrash makes every container of image exit with code right after it
// starts (code < 0 clears the setting): a crash-looping workload.
func (f *Fake) SetCrash(image string, code int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code < 0 {
		delete(f.crash, image)
		return
	}
	f.crash[image] = code
}

// SetListError makes List fail with err (nil clears).
func (f *Fake) SetListError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr = err
}

// Calls returns how many times each method was called.
func (f *Fake) Calls() FakeCalls {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Created returns every spec passed to a successful Create, in order (the
// last 4096).
func (f *Fake) Created() []ContainerSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lastEntries(f.created)
}

// Ops returns the successful mutating calls in order, as "create ID",
// "start ID", "stop ID", "remove ID", "exit ID CODE", "rmi IMAGE"
// (by canonical name; the last 4096).
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lastEntries(f.ops)
}

func (f *Fake) opLocked(format string, args ...any) {
	f.ops = appendBounded(f.ops, fmt.Sprintf(format, args...))
}

// Get returns one container.
func (f *Fake) Get(id string) (Container, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return Container{}, false
	}
	return c.view(id), true
}

// Exit makes a running container's task exit with code, as if its process
// ended, and emits an ExitEvent.
func (f *Fake) Exit(id string, code int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("fake exit %s: %w", id, ErrNotFound)
	}
	if c.state != StateRunning {
		return fmt.Errorf("fake exit %s: task is %s, not running", id, c.state)
	}
	f.exitLocked(id, c, code)
	return nil
}

// Kill is Exit with 137, the code of a SIGKILLed process (an OOM kill, say).
func (f *Fake) Kill(id string) error { return f.Exit(id, 137) }

func (f *Fake) exitLocked(id string, c *fakeContainer, code int32) {
	c.state = StateExited
	c.exitCode = code
	c.finishedAt = f.now()
	f.opLocked("exit %s %d", id, code)
	ev := ExitEvent{ID: id, ExitCode: code, At: c.finishedAt}
	for s := range f.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped++ // consumers re-List periodically; never block the caller
		}
	}
}

func (c *fakeContainer) view(id string) Container {
	return Container{
		ID:         id,
		Pod:        c.spec.Pod,
		Name:       c.spec.Name,
		PodHash:    c.spec.PodHash,
		Image:      c.spec.Image,
		Labels:     maps.Clone(c.labels),
		State:      c.state,
		ExitCode:   c.exitCode,
		StartedAt:  c.startedAt,
		FinishedAt: c.finishedAt,
	}
}

// EnsureImage implements Runtime.
func (f *Fake) EnsureImage(ctx context.Context, image string, policy schema.PullPolicy) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ensure image %s: %w", image, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.EnsureImage++
	k := imageKey(image)
	present := f.images[k]
	if present && policy != schema.PullAlways {
		return nil
	}
	f.calls.Pull++
	f.pullCreds[k] = maps.Clone(PullCredentials(ctx))
	if err, ok := f.imageErr[image]; ok {
		return fmt.Errorf("pull %s: %w: %w", image, ErrImage, err)
	}
	_, wasPulled := f.pulled[k]
	if !present {
		f.images[k] = true
		f.disk.Free -= min(f.disk.Free, f.imageSize[k])
	}
	if !present || wasPulled {
		f.pulled[k] = f.now()
	}
	return nil
}

// PulledImages implements Runtime; images come sorted by name.
func (f *Fake) PulledImages(ctx context.Context) ([]Image, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, fmt.Errorf("list images: %w", f.listErr)
	}
	out := make([]Image, 0, len(f.pulled))
	for name, at := range f.pulled {
		out = append(out, Image{Name: name, PulledAt: at})
	}
	slices.SortFunc(out, func(a, b Image) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveImage implements Runtime. The Fake does not check that no
// container uses the image (containerd does not either).
func (f *Fake) RemoveImage(ctx context.Context, image string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove image %s: %w", image, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.RemoveImage++
	k := imageKey(image)
	if _, ok := f.pulled[k]; !ok {
		return fmt.Errorf("remove image %s: %w", image, ErrNotFound)
	}
	delete(f.pulled, k)
	delete(f.images, k)
	f.disk.Free = min(f.disk.Total, f.disk.Free+f.imageSize[k])
	f.opLocked("rmi %s", k)
	return nil
}

// DiskSpace implements Runtime (see SetDiskSpace).
func (f *Fake) DiskSpace(ctx context.Context) (DiskSpace, error) {
	if err := ctx.Err(); err != nil {
		return DiskSpace{}, fmt.Errorf("disk space: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.disk, nil
}

// Create implements Runtime.
func (f *Fake) Create(ctx context.Context, spec ContainerSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create container %s: %w", spec.ID, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Create++
	if spec.ID == "" {
		return fmt.Errorf("create container: empty id")
	}
	if _, ok := f.containers[spec.ID]; ok {
		return fmt.Errorf("create container %s: %w", spec.ID, ErrAlreadyExists)
	}
	if !f.images[imageKey(spec.Image)] {
		return fmt.Errorf("create container %s: image %s is not present: %w", spec.ID, spec.Image, ErrImage)
	}
	spec = cloneSpec(spec)
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManaged] = "true"
	labels[LabelPod] = spec.Pod
	labels[LabelContainer] = spec.Name
	labels[LabelPodHash] = spec.PodHash
	f.containers[spec.ID] = &fakeContainer{spec: spec, labels: labels, state: StateCreated}
	f.created = appendBounded(f.created, spec)
	f.opLocked("create %s", spec.ID)
	return nil
}

func cloneSpec(s ContainerSpec) ContainerSpec {
	s.Command = slices.Clone(s.Command)
	s.Args = slices.Clone(s.Args)
	s.Env = slices.Clone(s.Env)
	s.Mounts = slices.Clone(s.Mounts)
	s.Labels = maps.Clone(s.Labels)
	s.Devices = slices.Clone(s.Devices)
	s.CapAdd = slices.Clone(s.CapAdd)
	s.CapDrop = slices.Clone(s.CapDrop)
	if s.RunAsUser != nil {
		u := *s.RunAsUser
		s.RunAsUser = &u
	}
	if s.RunAsGroup != nil {
		g := *s.RunAsGroup
		s.RunAsGroup = &g
	}
	return s
}

// Start implements Runtime. It waits StartLatency (or until ctx is done)
// in the caller's goroutine.
func (f *Fake) Start(ctx context.Context, id string) error {
	if f.latency != nil {
		if d := f.latency(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("start container %s: %w", id, ctx.Err())
			case <-t.C:
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Start++
	c, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("start container %s: %w", id, ErrNotFound)
	}
	if c.state == StateRunning {
		return fmt.Errorf("start container %s: task %w", id, ErrAlreadyExists)
	}
	c.state = StateRunning
	c.exitCode = 0
	c.startedAt = f.now()
	c.finishedAt = time.Time{}
	f.opLocked("start %s", id)
	if code, ok := f.crash[c.spec.Image]; ok {
		f.exitLocked(id, c, code)
	}
	return nil
}

// Stop implements Runtime: a running task exits with 143 (SIGTERM).
func (f *Fake) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Stop++
	c, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("stop container %s: %w", id, ErrNotFound)
	}
	f.opLocked("stop %s", id)
	f.stopGrace[id] = timeout
	if c.state == StateRunning {
		f.exitLocked(id, c, 143)
	}
	return nil
}

// Remove implements Runtime: a running task is killed (137) first.
func (f *Fake) Remove(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Remove++
	c, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("remove container %s: %w", id, ErrNotFound)
	}
	f.opLocked("remove %s", id)
	if c.state == StateRunning {
		f.exitLocked(id, c, 137)
	}
	delete(f.containers, id)
	return nil
}

// List implements Runtime; containers come sorted by ID.
func (f *Fake) List(ctx context.Context) ([]Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.List++
	if f.listErr != nil {
		return nil, fmt.Errorf("list containers: %w", f.listErr)
	}
	out := make([]Container, 0, len(f.containers))
	for id, c := range f.containers {
		out = append(out, c.view(id))
	}
	slices.SortFunc(out, func(a, b Container) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// Exits implements Runtime. Events are delivered without blocking the
// caller of Exit: a subscriber that falls more than 256 events behind
// loses events (and must re-List, as with the real runtime).
func (f *Fake) Exits(ctx context.Context) (<-chan ExitEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("subscribe to exits: %w", err)
	}
	s := &fakeSub{ch: make(chan ExitEvent, 256)}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, s)
		close(s.ch)
	})
	return s.ch, nil
}

// Subscribers returns how many Exits streams are open.
func (f *Fake) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}
