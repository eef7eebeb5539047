package store

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// AuditAggregator folds events that anyone can cause in bulk (refused
// requests, failed logins, token uses) into few entries, so that no one
// can push other entries out of the trail by causing them: per actor,
// source, action and result, the first event of a window (a minute) is
// recorded at once with Count 1, and the others of that window as one
// entry, with their Count and time range (Time to Until), when the window
// ends. At most two entries per key and window, however many events.
//
// It keeps no entry itself: Add and Flush return the entries to record,
// in order. It is safe for concurrent use.
type AuditAggregator struct {
	// Window is how long events of one key are folded; default a minute.
	Window time.Duration
	// Now is the clock; default time.Now. Set before first use.
	Now func() time.Time
	// MaxKeys bounds the open windows (memory under a flood from many
	// sources): past it, every window is closed; default 10,000.
	MaxKeys int

	mu   sync.Mutex
	open map[auditAggKey]*auditWindow
	// opened numbers the windows, so that summaries of events at the same
	// time come out in the order their windows opened.
	opened uint64
}

// DefaultAuditWindow is the default of AuditAggregator.Window.
const DefaultAuditWindow = time.Minute

type auditAggKey struct{ actor, source, action, result string }

type auditWindow struct {
	start time.Time
	n     uint64
	// The events after the first: how many, when, and the last of them.
	count       int
	first, last time.Time
	entry       schema.AuditEntry
	objects     []string
}

// maxAggObjects is how many distinct objects a summary names.
const maxAggObjects = 8

func (g *AuditAggregator) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

func (g *AuditAggregator) window() time.Duration {
	if g.Window <= 0 {
		return DefaultAuditWindow
	}
	return g.Window
}

// Add counts e and returns what to record now: the summary of its key's
// window if that has ended, and e itself (Count 1, Time now) if it opens
// a new window.
func (g *AuditAggregator) Add(e schema.AuditEntry) []schema.AuditEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	k := auditAggKey{e.Actor, e.Source, e.Action, e.Result}
	if g.open == nil {
		g.open = map[auditAggKey]*auditWindow{}
	}
	var out []schema.AuditEntry
	w, ok := g.open[k]
	if ok && now.Sub(w.start) < g.window() {
		if w.count == 0 {
			w.first = now
		}
		w.count++
		w.last = now
		w.entry = e
		if !slices.Contains(w.objects, e.Object) && len(w.objects) <= maxAggObjects {
			w.objects = append(w.objects, e.Object)
		}
		return nil
	}
	if ok {
		out = appendSummary(out, w)
		delete(g.open, k)
	}
	maxKeys := g.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 10000
	}
	if len(g.open) >= maxKeys {
		out = append(out, g.closeLocked(now, true)...)
	}
	g.opened++
	g.open[k] = &auditWindow{start: now, n: g.opened}
	e.Time, e.Count = now, 1
	return append(out, e)
}

// Flush closes the windows that have ended (all of them, if all: before
// the trail is read, and on shutdown) and returns their summaries.
func (g *AuditAggregator) Flush(all bool) []schema.AuditEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeLocked(g.now(), all)
}

func (g *AuditAggregator) closeLocked(now time.Time, all bool) []schema.AuditEntry {
	var closed []*auditWindow
	for k, w := range g.open {
		if all || now.Sub(w.start) >= g.window() {
			closed = append(closed, w)
			delete(g.open, k)
		}
	}
	// Oldest first, as they happened.
	slices.SortFunc(closed, func(a, b *auditWindow) int {
		if c := a.first.Compare(b.first); c != 0 {
			return c
		}
		return cmp.Compare(a.n, b.n)
	})
	var out []schema.AuditEntry
	for _, w := range closed {
		out = appendSummary(out, w)
	}
	return out
}

// appendSummary adds the entry of a window's events after its first, if
// there were any.
func appendSummary(out []schema.AuditEntry, w *auditWindow) []schema.AuditEntry {
	if w.count == 0 {
		return out
	}
	e := w.entry
	e.Time, e.Until, e.Count = w.first, w.last, w.count
	if len(w.objects) > 1 {
		names := w.objects
		more := ""
		if len(names) > maxAggObjects {
			names, more = names[:maxAggObjects], ", …"
		}
		e.Object = ""
		e.Detail = fmt.Sprintf("%s (objects: %s%s)", e.Detail, strings.Join(names, ", "), more)
	}
	return append(out, e)
}
