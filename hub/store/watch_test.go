package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestWatchResume(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	start := revision(t, s)
	for i := range 5 {
		if _, _, err := s.Apply(ctx, newDeployment("d"+strconv.Itoa(i), "nginx:1"), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Apply(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, newDeployment("d1", "nginx:2"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindDeployment, "d2", "", false); err != nil {
		t.Fatal(err)
	}
	type want struct {
		typ  EventType
		name string
		rev  uint64
	}
	all := []want{
		{EventAdded, "d0", start + 1}, {EventAdded, "d1", start + 2}, {EventAdded, "d2", start + 3},
		{EventAdded, "d3", start + 4}, {EventAdded, "d4", start + 5},
		{EventModified, "d1", start + 7}, {EventDeleted, "d2", start + 8},
	}
	tests := []struct {
		from uint64
		want []want
	}{
		{start, all},
		{start + 3, all[3:]},
		{start + 6, all[5:]},
		{start + 8, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("from", tt.from), func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch, err := s.Watch(wctx, schema.KindDeployment, tt.from)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				ev, ok := recv(t, ch)
				if !ok || ev.Type != w.typ || ev.Name != w.name || ev.Revision != w.rev {
					t.Fatalf("got %v %s %s@%d, want %s %s@%d", ok, ev.Type, ev.Name, ev.Revision, w.typ, w.name, w.rev)
				}
			}
			// A new write arrives after the replay.
			name := "new" + strconv.FormatUint(tt.from, 10)
			if _, _, err := s.Apply(ctx, newDeployment(name, "nginx:1"), false); err != nil {
				t.Fatal(err)
			}
			// Skip the objects earlier subtests created.
			ev, _ := recv(t, ch)
			for ev.Name != name && strings.HasPrefix(ev.Name, "new") {
				ev, _ = recv(t, ch)
			}
			if ev.Type != EventAdded || ev.Name != name {
				t.Fatalf("live event %s %s, want ADDED %s", ev.Type, ev.Name, name)
			}
			var d schema.Deployment
			if err := json.Unmarshal(ev.Object, &d); err != nil || d.Metadata.ResourceVersion != strconv.FormatUint(ev.Revision, 10) {
				t.Errorf("event object %s: %v", ev.Object, err)
			}
			cancel()
			for range ch {
			}
		})
	}
}

func TestWatchDeletedCarriesPrevAndRevision(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	if _, _, err := s.Apply(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	rev := revision(t, s)
	ch, err := s.Watch(ctx, "", rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	ev, _ := recv(t, ch)
	var d schema.Device
	if err := json.Unmarshal(ev.Object, &d); err != nil {
		t.Fatal(err)
	}
	if ev.Type != EventDeleted || ev.Prev == nil || d.Metadata.ResourceVersion != strconv.FormatUint(rev+1, 10) {
		t.Errorf("delete event %s rv %s prev %s", ev.Type, d.Metadata.ResourceVersion, ev.Prev)
	}
}

func TestWatchExpired(t *testing.T) {
	s := openTest(t, Options{WatchRing: 4})
	ctx := ctxT(t)
	for i := range 10 {
		if _, _, err := s.Apply(ctx, newDeployment("d"+strconv.Itoa(i), "nginx:1"), false); err != nil {
			t.Fatal(err)
		}
	}
	cur := revision(t, s)
	tests := []struct {
		from    uint64
		expired bool
	}{
		{0, true},
		{cur - 5, true},
		{cur - 4, false},
		{cur, false},
		{cur + 1000, true}, // from the future: not this store's history
	}
	for _, tt := range tests {
		wctx, cancel := context.WithCancel(ctx)
		_, err := s.Watch(wctx, "", tt.from)
		if got := errors.Is(err, ErrExpired); got != tt.expired {
			t.Errorf("from %d (current %d): err %v, want expired=%v", tt.from, cur, err, tt.expired)
		}
		cancel()
	}
}

func TestWatchAfterReopenStartsAtCurrentRevision(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(t.Context(), newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Options{Dir: dir})
	ctx := ctxT(t)
	if _, err := s.Watch(ctx, "", 0); !errors.Is(err, ErrExpired) {
		t.Errorf("watch from 0 after reopen: %v, want expired", err)
	}
	if _, err := s.Watch(ctx, "", revision(t, s)); err != nil {
		t.Errorf("watch from the current revision: %v", err)
	}
}

func TestSlowWatcherIsDroppedWritersDoNotWait(t *testing.T) {
	s := openTest(t, Options{WatchQueue: 8})
	ctx := ctxT(t)
	slow, err := s.Watch(ctx, "", revision(t, s))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads slow while 200 writes commit; they must all finish.
	for i := range 200 {
		if _, _, err := s.Apply(ctx, newDeployment("d"+strconv.Itoa(i), "nginx:1"), false); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for {
		ev, ok := recv(t, slow)
		if !ok {
			t.Fatal("channel closed without an ERROR event")
		}
		if ev.Type == EventError {
			if !errors.Is(ev.Err, ErrWatcherTooSlow) {
				t.Errorf("error event %v", ev.Err)
			}
			break
		}
		n++
	}
	if _, ok := recv(t, slow); ok {
		t.Error("events after the ERROR event")
	}
	if n >= 200 {
		t.Errorf("slow watcher got all %d events", n)
	}
}

func TestWatchBookmarksAndKindFilter(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	ch, err := s.Watch(ctx, schema.KindDevice, revision(t, s), WithBookmarks(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctx, newDeployment("web", "nginx:1"), false); err != nil {
		t.Fatal(err)
	}
	want := revision(t, s)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, ok := recv(t, ch)
		if !ok {
			t.Fatal("closed")
		}
		if ev.Type != EventBookmark {
			t.Fatalf("a Device watch got %s %s %s", ev.Type, ev.Kind, ev.Name)
		}
		if ev.Revision == want {
			break // progress moved past the Deployment write
		}
		if time.Now().After(deadline) {
			t.Fatalf("bookmarks stuck at %d, want %d", ev.Revision, want)
		}
	}
}

func TestWatchEnds(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	byCtx, err := s.Watch(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	byClose, err := s.Watch(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := recv(t, byCtx); ok {
		t.Error("watch outlived its context")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := recv(t, byClose); ok {
		t.Error("watch outlived the store")
	}
	if _, err := s.Watch(t.Context(), "", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("watch on a closed store: %v", err)
	}
}

// TestWatchSkipsEventsAtOrBeforeFrom covers a reader that listed at
// revision R and subscribed before R's events were published.
func TestWatchSkipsEventsAtOrBeforeFrom(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	cur := revision(t, s)
	// Subscribe "from the future" by one, as if a list had seen cur+1.
	s.maxRev.Store(cur + 1)
	ch, err := s.Watch(ctx, "", cur+1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"seen-by-list", "after"} {
		if _, _, err := s.Apply(ctx, newDevice(n, nil), false); err != nil {
			t.Fatal(err)
		}
	}
	ev, _ := recv(t, ch)
	if ev.Name != "after" || ev.Revision != cur+2 {
		t.Errorf("first event %s@%d, want after@%d", ev.Name, ev.Revision, cur+2)
	}
}
