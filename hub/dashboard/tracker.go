package dashboard

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Change is what one scan found changed: the data of a "change" event of
// the live stream. The page refetches what it shows if it is concerned.
type Change struct {
	// Seq numbers the scans that found a change.
	Seq uint64 `json:"seq"`
	// Devices names the devices that changed (registered, deleted,
	// relabelled, or anything in their status), unless AllDevices.
	Devices []string `json:"devices,omitempty"`
	// AllDevices: more than MaxNamed devices changed.
	AllDevices bool `json:"allDevices,omitempty"`
	// Deployments names the deployments that changed (spec or status).
	Deployments []string `json:"deployments,omitempty"`
	// Counts are the fleet's counts after the change.
	Counts Counts `json:"counts"`
}

// MaxNamed bounds Change.Devices; more make AllDevices true.
const MaxNamed = 256

// deploymentLister lists the deployments' stored JSON by name.
type deploymentLister func(ctx context.Context, fn func(name string, raw []byte) error) error

// tracker keeps the latest snapshot of the fleet and, while anyone
// listens, takes a new one every interval and tells the listeners what
// changed. Level-based: a scan compares whole states, never events, so
// nothing is missed whatever happened in between.
type tracker struct {
	m        modelReader
	deps     deploymentLister
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex
	snap    *snapshot
	depSums map[string]uint64
	seq     uint64
	subs    map[*subscriber]struct{}
	cancel  context.CancelFunc // of the running scan loop, nil if none
	done    chan struct{}      // closed when that loop ends
	stopped bool
}

// subscriber is one live stream's mailbox: the changes not yet sent,
// merged, and a wake-up.
type subscriber struct {
	wake chan struct{}

	mu          sync.Mutex
	devices     map[string]struct{}
	all         bool
	deployments map[string]struct{}
	seq         uint64
	counts      Counts
}

func newTracker(m modelReader, deps deploymentLister, interval time.Duration, now func() time.Time, log *slog.Logger) *tracker {
	return &tracker{m: m, deps: deps, interval: interval, now: now, log: log, subs: map[*subscriber]struct{}{}}
}

// current returns the latest snapshot: the scan loop's (at most one
// interval old) while it runs, else a new one.
func (t *tracker) current() (*snapshot, error) {
	t.mu.Lock()
	if t.cancel != nil && t.snap != nil {
		s := t.snap
		t.mu.Unlock()
		return s, nil
	}
	prev, seq := t.snap, t.seq
	t.mu.Unlock()
	s, err := takeSnapshot(t.m, prev, seq, t.now())
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.cancel == nil {
		t.snap = s
	}
	t.mu.Unlock()
	return s, nil
}

// subscribe adds a listener, starting the scan loop if it is the first;
// the baseline is taken before subscribe returns, so every change after
// it is reported. It returns nil once the tracker is stopped.
func (t *tracker) subscribe(ctx context.Context) (*subscriber, error) {
	sub := &subscriber{wake: make(chan struct{}, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil, nil
	}
	t.subs[sub] = struct{}{}
	if t.cancel != nil {
		sub.seq, sub.counts = t.seq, t.snap.counts
		return sub, nil
	}
	// The first listener: a fresh baseline, then the loop.
	s, err := takeSnapshot(t.m, t.snap, t.seq, t.now())
	if err == nil {
		var sums map[string]uint64
		if sums, err = t.deploymentSums(ctx); err == nil {
			t.snap, t.depSums = s, sums
		}
	}
	if err != nil {
		delete(t.subs, sub)
		return nil, err
	}
	sub.seq, sub.counts = t.seq, s.counts
	loopCtx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	go t.loop(loopCtx, t.done)
	return sub, nil
}

// unsubscribe removes a listener; the loop stops with the last one.
func (t *tracker) unsubscribe(sub *subscriber) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, sub)
	if len(t.subs) == 0 && t.cancel != nil {
		t.cancel()
		t.cancel = nil
	}
}

// stop ends the scan loop for good and waits for it.
func (t *tracker) stop() {
	t.mu.Lock()
	t.stopped = true
	cancel, done := t.cancel, t.done
	t.cancel = nil
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (t *tracker) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := t.scan(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("dashboard: scan failed", "err", err)
		}
	}
}

// scan takes a new snapshot, compares it with the last one and tells the
// listeners what changed.
func (t *tracker) scan(ctx context.Context) error {
	t.mu.Lock()
	prev, prevDeps := t.snap, t.depSums
	t.mu.Unlock()
	next, err := takeSnapshot(t.m, prev, 0, t.now())
	if err != nil {
		return err
	}
	depSums, err := t.deploymentSums(ctx)
	if err != nil {
		return err
	}
	ch := diff(prev, next, prevDeps, depSums)

	t.mu.Lock()
	defer t.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	changed := prev == nil || ch.AllDevices || len(ch.Devices) > 0 || len(ch.Deployments) > 0 || next.counts != prev.counts
	if changed {
		t.seq++
	}
	next.seq = t.seq
	t.snap, t.depSums = next, depSums
	if !changed {
		return nil
	}
	ch.Seq, ch.Counts = t.seq, next.counts
	for sub := range t.subs {
		sub.add(ch)
	}
	return nil
}

// diff names what differs between two snapshots.
func diff(prev, next *snapshot, prevDeps, nextDeps map[string]uint64) Change {
	var ch Change
	named := func(name string) {
		if ch.AllDevices {
			return
		}
		if len(ch.Devices) == MaxNamed {
			ch.AllDevices, ch.Devices = true, nil
			return
		}
		ch.Devices = append(ch.Devices, name)
	}
	for i := range next.devices {
		d := &next.devices[i]
		if p := prev.lookup(d.name); p == nil || p.sum != d.sum || !sameDesired(p, d) {
			named(d.name)
		}
	}
	for i := range prev.devices {
		if next.lookup(prev.devices[i].name) == nil {
			named(prev.devices[i].name)
		}
	}
	for name, sum := range nextDeps {
		if old, ok := prevDeps[name]; !ok || old != sum {
			ch.Deployments = append(ch.Deployments, name)
		}
	}
	for name := range prevDeps {
		if _, ok := nextDeps[name]; !ok {
			ch.Deployments = append(ch.Deployments, name)
		}
	}
	slices.Sort(ch.Devices)
	slices.Sort(ch.Deployments)
	return ch
}

func sameDesired(a, b *device) bool {
	if len(a.desired) != len(b.desired) {
		return false
	}
	for k, v := range a.desired {
		if w, ok := b.desired[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// deploymentSums hashes each deployment's stored JSON with its status.
func (t *tracker) deploymentSums(ctx context.Context) (map[string]uint64, error) {
	sums := map[string]uint64{}
	var h maphash.Hash
	h.SetSeed(seed)
	err := t.deps(ctx, func(name string, raw []byte) error {
		h.Reset()
		h.Write(raw)
		if st, ok := t.m.DeploymentStatus(name); ok {
			b, err := json.Marshal(st)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		sums[name] = h.Sum64()
		return nil
	})
	return sums, err
}

// add merges a change into the mailbox and wakes the stream.
func (s *subscriber) add(ch Change) {
	s.mu.Lock()
	if ch.AllDevices {
		s.all, s.devices = true, nil
	} else if !s.all {
		if s.devices == nil {
			s.devices = map[string]struct{}{}
		}
		for _, d := range ch.Devices {
			s.devices[d] = struct{}{}
		}
		if len(s.devices) > MaxNamed {
			s.all, s.devices = true, nil
		}
	}
	if len(ch.Deployments) > 0 && s.deployments == nil {
		s.deployments = map[string]struct{}{}
	}
	for _, d := range ch.Deployments {
		s.deployments[d] = struct{}{}
	}
	s.seq, s.counts = ch.Seq, ch.Counts
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take empties the mailbox.
func (s *subscriber) take() Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := Change{Seq: s.seq, AllDevices: s.all, Counts: s.counts}
	for d := range s.devices {
		ch.Devices = append(ch.Devices, d)
	}
	for d := range s.deployments {
		ch.Deployments = append(ch.Deployments, d)
	}
	slices.Sort(ch.Devices)
	slices.Sort(ch.Deployments)
	s.devices, s.deployments, s.all = nil, nil, false
	return ch
}
