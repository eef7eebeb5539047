package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// EventType says what happened to an object.
type EventType string

// Event types. ERROR ends a watch; BOOKMARK only moves it forward.
const (
	EventAdded    EventType = "ADDED"
	EventModified EventType = "MODIFIED"
	EventDeleted  EventType = "DELETED"
	EventBookmark EventType = "BOOKMARK"
	EventError    EventType = "ERROR"

	// eventProgress marks a revision that carried no event (a token write);
	// watchers only move their progress.
	eventProgress EventType = "progress"
)

// Event is one change seen by a watcher. Object and Prev are shared between
// watchers: never modify them.
type Event struct {
	Type EventType
	// Kind and Name of the object (Kind is schema.KindDevice…).
	Kind string
	Name string
	// Revision of the write; for a BOOKMARK, every change up to it has been
	// delivered; resume a watch from it.
	Revision uint64
	// Object is the JSON of the object after the change; for DELETED, the
	// object as it was, with the deletion's resourceVersion.
	Object []byte
	// Prev is the JSON of the object before the change (nil for ADDED).
	Prev []byte
	// Err is set for ERROR: ErrWatcherTooSlow.
	Err error
}

// WatchOption tunes one watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	bookmark time.Duration
}

// WithBookmarks makes the watch send a BOOKMARK event carrying its current
// revision whenever it has been idle for interval.
func WithBookmarks(interval time.Duration) WatchOption {
	return func(c *watchConfig) { c.bookmark = interval }
}

// Watch returns every change of kind ("" for every kind) after revision
// fromRev, in revision order: first the ones the event ring still holds,
// then new ones as they commit. It fails with ErrExpired when the ring no
// longer reaches back to fromRev (list again, and watch from the list's
// revision). The channel is closed when ctx is done or the store closes; a
// watcher that falls too far behind gets one ERROR event with
// ErrWatcherTooSlow and then the channel closes. Writers never wait for
// watchers.
func (s *Store) Watch(ctx context.Context, kind string, fromRev uint64, opts ...WatchOption) (<-chan Event, error) {
	if kind != "" {
		if _, ok := ResourceForKind(kind); !ok {
			return nil, fmt.Errorf("watch %s: unknown kind: %w", kind, ErrNotFound)
		}
	}
	var cfg watchConfig
	for _, o := range opts {
		o(&cfg)
	}
	err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer s.release()
	maxRev := s.maxRev.Load()
	if fromRev > maxRev && s.follow != nil {
		// Another hub's commit, read from etcd here, may be ahead of this
		// hub's feed: what etcd holds is not from the future.
		if maxRev, err = s.engineRevision(ctx); err != nil {
			return nil, fmt.Errorf("watch from revision %d: %w", fromRev, err)
		}
	}
	w, err := s.feed.subscribe(kind, fromRev, maxRev)
	if err != nil {
		return nil, err
	}
	go w.run(ctx, s.feed, fromRev, cfg.bookmark)
	return w.out, nil
}

// feed is the in-memory ring of recent events and the set of watchers.
type feed struct {
	mu   sync.Mutex
	ring []Event
	head int // index of the oldest event
	size int
	// complete: every event with a revision above it is in the ring.
	complete uint64
	queueMax int
	watchers map[*watcher]struct{}
	closed   bool
	// last is the newest revision published; published is closed (and
	// replaced) whenever it moves, for waitFor.
	last      uint64
	published chan struct{}
}

func newFeed(rev uint64, ringSize, queueMax int) *feed {
	return &feed{
		ring:      make([]Event, ringSize),
		complete:  rev,
		queueMax:  queueMax,
		watchers:  map[*watcher]struct{}{},
		last:      rev,
		published: make(chan struct{}),
	}
}

// publish records the events of one committed revision and hands them to
// every watcher without blocking.
func (f *feed) publish(rev uint64, evs []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(rev)
	if len(evs) == 0 {
		f.send(Event{Type: eventProgress, Revision: rev})
		return
	}
	for _, ev := range evs {
		ev.Revision = rev
		f.record(ev)
		f.send(ev)
	}
}

// advance moves last to rev and wakes waitFor; called with mu held.
func (f *feed) advance(rev uint64) {
	if rev <= f.last || f.closed {
		return
	}
	f.last = rev
	close(f.published)
	f.published = make(chan struct{})
}

func (f *feed) record(ev Event) {
	n := len(f.ring)
	if f.size < n {
		f.ring[(f.head+f.size)%n] = ev
		f.size++
		return
	}
	f.complete = f.ring[f.head].Revision
	f.ring[f.head] = ev
	f.head = (f.head + 1) % n
}

func (f *feed) send(ev Event) {
	for w := range f.watchers {
		if !w.enqueue(ev, f.queueMax) {
			delete(f.watchers, w)
		}
	}
}

// subscribe registers a watcher that starts with the ring's events after
// fromRev; maxRev is the newest revision a client can have seen.
func (f *feed) subscribe(kind string, fromRev, maxRev uint64) (*watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if fromRev < f.complete {
		return nil, fmt.Errorf("watch from revision %d: the oldest revision still held is %d: %w", fromRev, f.complete, ErrExpired)
	}
	if fromRev > maxRev {
		return nil, fmt.Errorf("watch from revision %d: newer than the store's %d: %w", fromRev, maxRev, ErrExpired)
	}
	w := &watcher{
		kind: kind,
		from: fromRev,
		wake: make(chan struct{}, 1),
		out:  make(chan Event, 64),
	}
	n := len(f.ring)
	for i := range f.size {
		if ev := f.ring[(f.head+i)%n]; ev.Revision > fromRev {
			w.queue = append(w.queue, ev)
		}
	}
	f.watchers[w] = struct{}{}
	return w, nil
}

func (f *feed) remove(w *watcher) {
	f.mu.Lock()
	delete(f.watchers, w)
	f.mu.Unlock()
}

// waitFor returns once revision rev has been published (true), or false
// when ctx ends or the feed closes first.
func (f *feed) waitFor(ctx context.Context, rev uint64) bool {
	for {
		f.mu.Lock()
		last, ch, closed := f.last, f.published, f.closed
		f.mu.Unlock()
		if last >= rev {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// restart forgets every event: the feed goes on from revision rev, and
// every watcher ends with err (ErrExpired: events between what they saw
// and rev are lost to this process, so they list again).
func (f *feed) restart(rev uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers {
		w.stop(err)
	}
	clear(f.watchers)
	clear(f.ring)
	f.head, f.size, f.complete = 0, 0, rev
	f.advance(rev)
}

func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		close(f.published)
	}
	f.closed = true
	for w := range f.watchers {
		w.stop(ErrClosed)
	}
	clear(f.watchers)
}

// watcher is one subscription: an unbounded-but-capped queue filled by
// publish and drained by run into out.
type watcher struct {
	kind string
	// from: events at or before it are not sent. A reader that listed at
	// revision R may subscribe before R's own events are published.
	from  uint64
	mu    sync.Mutex
	queue []Event
	err   error // set once: ErrWatcherTooSlow or ErrClosed
	wake  chan struct{}
	out   chan Event
}

// enqueue adds ev; it reports false (and fails the watcher) when the queue
// is full.
func (w *watcher) enqueue(ev Event, max int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return false
	}
	if ev.Revision <= w.from {
		return true
	}
	if len(w.queue) >= max {
		w.queue = nil
		w.err = ErrWatcherTooSlow
		w.signal()
		return false
	}
	w.queue = append(w.queue, ev)
	w.signal()
	return true
}

func (w *watcher) stop(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run forwards queued events to out until ctx is done, the store closes or
// the watcher fails. progress is the revision up to which every matching
// event has been handed out, which is what a BOOKMARK carries.
func (w *watcher) run(ctx context.Context, f *feed, progress uint64, bookmark time.Duration) {
	defer close(w.out)
	defer f.remove(w)
	var tick <-chan time.Time
	if bookmark > 0 {
		t := time.NewTicker(bookmark)
		defer t.Stop()
		tick = t.C
	}
	send := func(ev Event) bool {
		select {
		case w.out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		w.mu.Lock()
		q, err := w.queue, w.err
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range q {
			if ev.Type != eventProgress && (w.kind == "" || ev.Kind == w.kind) {
				if !send(ev) {
					return
				}
			}
			progress = ev.Revision
		}
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				send(Event{Type: EventError, Kind: w.kind, Revision: progress, Err: err})
			}
			return
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		case <-tick:
			if !send(Event{Type: EventBookmark, Kind: w.kind, Revision: progress}) {
				return
			}
		}
	}
}
