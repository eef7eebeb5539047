package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/fakehubtest"
	"github.com/fleetmq/fleet/schema"
)

func TestWatch(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, []byte(webManifest), false); err != nil {
		t.Fatal(err)
	}
	// Without a version: ADDED for what exists, then the changes.
	w, err := c.Watch(ctx, client.Devices, "", "site=lab")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev := next(t, w)
	if ev.Type != schema.WatchAdded || ev.Object.GetMetadata().Name != "pi-1" {
		t.Fatalf("first event: %+v", ev)
	}
	if err := h.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, w)
	dev, ok := ev.Object.(*schema.Device)
	if ev.Type != schema.WatchModified || !ok || dev.Status == nil || !dev.Status.Online {
		t.Fatalf("status event: %+v", ev)
	}
	h.Bookmark()
	if ev := next(t, w); ev.Type != schema.WatchBookmark || ev.ResourceVersion() != dev.Metadata.ResourceVersion {
		t.Fatalf("bookmark: %+v", ev)
	}
	if _, err := c.DeleteDevice(ctx, "pi-1", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != schema.WatchDeleted {
		t.Fatalf("delete event: %+v", ev)
	}

	// From a compacted version: Expired.
	h.Compact()
	w2, err := c.Watch(ctx, client.Devices, "1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, err := w2.Next(); !client.IsExpired(err) {
		t.Fatalf("watch from a compacted version: %v, want Expired", err)
	}
}

func next(t *testing.T, w *client.Watcher) client.Event {
	t.Helper()
	ev, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestWatchEndsWithContext(t *testing.T) {
	_, c := newHub(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	w, err := c.Watch(ctx, client.Deployments, "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cancel()
	for _, err := range w.Events() {
		if err == nil {
			t.Fatal("event after cancel")
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	}
}

// TestFollowRelistsWhenExpired runs Follow against a hub whose watches
// all end at once or expire, and checks that it lists again and carries on.
func TestFollowRelistsWhenExpired(t *testing.T) {
	h := fakehubtest.New(token)
	var mu sync.Mutex
	watches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			mu.Lock()
			watches++
			n := watches
			mu.Unlock()
			if n == 1 {
				// The first watch expires at once.
				w.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}` + "\n"))
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, token)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	if _, err := c.Apply(ctx, []byte(webManifest), false); err != nil {
		t.Fatal(err)
	}
	lists := make(chan []string, 10)
	events := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, client.Deployments, "", client.FollowHandler{
			List: func(objs []schema.Object) error {
				var names []string
				for _, o := range objs {
					names = append(names, o.GetMetadata().Name)
				}
				lists <- names
				return nil
			},
			Event: func(ev client.Event) error {
				events <- ev.Type + " " + ev.Object.GetMetadata().Name
				return nil
			},
		})
	}()
	for i := range 2 {
		select {
		case l := <-lists:
			if strings.Join(l, ",") != "web" {
				t.Fatalf("list %d: %v", i, l)
			}
		case err := <-done:
			t.Fatalf("Follow ended: %v", err)
		}
	}
	if _, err := c.Apply(ctx, []byte(strings.Replace(webManifest, "1.25", "1.26", 1)), false); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != "MODIFIED web" {
			t.Fatalf("event %q", ev)
		}
	case err := <-done:
		t.Fatalf("Follow ended: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow returned %v after cancel", err)
	}
}

func TestFollowStopsOnHandlerError(t *testing.T) {
	_, c := newHub(t)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, []byte(webManifest), false); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	err := c.Follow(ctx, client.Devices, "", client.FollowHandler{
		List: func([]schema.Object) error { return stop },
	})
	if !errors.Is(err, stop) {
		t.Fatalf("got %v", err)
	}
}
