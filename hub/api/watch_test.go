package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func TestWatchStream(t *testing.T) {
	h := newTestHub(t, Options{BookmarkInterval: 20 * time.Millisecond})
	for _, body := range []string{deviceYAML("pi-1", "site", "a"), deviceYAML("pi-2", "site", "b")} {
		if r := h.admin(t, "POST", "/v1/devices", body); r.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.Code, r.Body)
		}
	}
	all := h.watch(t, "/v1/devices?watch=true")
	siteA := h.watch(t, "/v1/devices?watch=true&labelSelector=site%3Da")
	notA := h.watch(t, "/v1/devices?watch=true&labelSelector="+url.QueryEscape("site!=a"))

	type want struct{ typ, name string }
	expect := func(ws *watchStream, wants ...want) string {
		t.Helper()
		var rv string
		for _, w := range wants {
			ev, ok := ws.next(t, false)
			if !ok {
				t.Fatalf("stream ended, want %s %s", w.typ, w.name)
			}
			var name string
			name, rv = objectName(t, ev.Object)
			if ev.Type != w.typ || name != w.name {
				t.Fatalf("got %s %s, want %s %s", ev.Type, name, w.typ, w.name)
			}
		}
		return rv
	}
	expect(all, want{"ADDED", "pi-1"}, want{"ADDED", "pi-2"})
	expect(siteA, want{"ADDED", "pi-1"})
	expect(notA, want{"ADDED", "pi-2"})

	// pi-2 moves into site a, pi-1 out of it, then pi-1 is deleted.
	for _, body := range []string{deviceYAML("pi-2", "site", "a"), deviceYAML("pi-1", "site", "c")} {
		if r := h.admin(t, "POST", "/v1/apply", body); r.Code != http.StatusOK {
			t.Fatalf("apply: %d %s", r.Code, r.Body)
		}
	}
	if r := h.admin(t, "DELETE", "/v1/devices/pi-1", ""); r.Code != http.StatusOK {
		t.Fatalf("delete: %d", r.Code)
	}
	expect(all, want{"MODIFIED", "pi-2"}, want{"MODIFIED", "pi-1"})
	rvDelete := expect(all, want{"DELETED", "pi-1"})
	expect(siteA, want{"ADDED", "pi-2"}, want{"DELETED", "pi-1"})
	// A set-based selector: pi-2 stops matching, pi-1 starts, then goes.
	expect(notA, want{"DELETED", "pi-2"}, want{"ADDED", "pi-1"}, want{"DELETED", "pi-1"})

	// Bookmarks arrive on an idle stream and carry the latest revision.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, ok := all.next(t, true)
		if !ok {
			t.Fatal("stream ended")
		}
		if ev.Type != schema.WatchBookmark {
			t.Fatalf("unexpected %s", ev.Type)
		}
		var bm schema.Device
		if err := json.Unmarshal(ev.Object, &bm); err != nil || bm.Kind != schema.KindDevice {
			t.Fatalf("bookmark %s: %v", ev.Object, err)
		}
		if bm.Metadata.ResourceVersion == rvDelete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bookmark at %s, want %s", bm.Metadata.ResourceVersion, rvDelete)
		}
	}

	// Resume from a revision: only later changes.
	resumed := h.watch(t, "/v1/devices?watch=true&resourceVersion="+rvDelete)
	if r := h.admin(t, "POST", "/v1/devices", deviceYAML("pi-3")); r.Code != http.StatusCreated {
		t.Fatal(r.Code)
	}
	expect(resumed, want{"ADDED", "pi-3"})

	// Shutting the server down ends every stream.
	h.API.StopStreams()
	for _, ws := range []*watchStream{all, siteA, resumed} {
		for {
			if _, ok := ws.next(t, true); !ok {
				break
			}
		}
	}
}

func TestWatchEndsWhenTheStoreCloses(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHubOn(t, st, Options{})
	ws := h.watch(t, "/v1/devices?watch=true")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := ws.next(t, true); !ok {
			break
		}
	}
	if r := h.admin(t, "GET", "/v1/devices", ""); r.Code != http.StatusServiceUnavailable {
		t.Errorf("list on a closed store: %d %s", r.Code, r.Body)
	}
}

func TestWatchTooOld(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), WatchRing: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newTestHubOn(t, st, Options{})
	for i := range 5 {
		if r := h.admin(t, "POST", "/v1/devices", deviceYAML("pi-"+strconv.Itoa(i))); r.Code != http.StatusCreated {
			t.Fatal(r.Code)
		}
	}
	for _, rv := range []string{"1", "999999"} {
		ws := h.watch(t, "/v1/devices?watch=true&resourceVersion="+rv)
		ev, ok := ws.next(t, true)
		if !ok || ev.Type != schema.WatchError {
			t.Fatalf("rv %s: got %v %s, want ERROR", rv, ok, ev.Type)
		}
		var st schema.Status
		if err := json.Unmarshal(ev.Object, &st); err != nil || st.Code != http.StatusGone || st.Reason != ReasonExpired {
			t.Errorf("rv %s: error event %s", rv, ev.Object)
		}
		if _, ok := ws.next(t, true); ok {
			t.Errorf("rv %s: events after ERROR", rv)
		}
	}
}
