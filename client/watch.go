package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Event is one change of a watch stream.
type Event struct {
	// Type is schema.WatchAdded, WatchModified, WatchDeleted or
	// WatchBookmark. (An ERROR event ends the stream and comes back as an
	// *APIError from Next.)
	Type string
	// Object is the *schema.Deployment or *schema.Device the event is
	// about, as it is after the change (before, for DELETED). For a
	// BOOKMARK only its metadata.resourceVersion is set.
	Object schema.Object
}

// ResourceVersion is the store revision the event brings the watcher to.
func (e Event) ResourceVersion() string {
	if e.Object == nil {
		return ""
	}
	return e.Object.GetMetadata().ResourceVersion
}

// Watcher reads one watch stream. Close it when done.
type Watcher struct {
	kind   Kind
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
	err    error
}

// Watch opens a watch of kind. With resourceVersion "" the hub first sends
// ADDED for every existing object; otherwise it sends every change after
// that version, or an Expired error (IsExpired) when the version is too old.
// selector ("k=v,k2=v2") restricts the stream to matching objects.
//
// The watch lasts until ctx is done, Close is called or the hub ends it;
// the client's timeout (WithTimeout) does not apply.
func (c *Client) Watch(ctx context.Context, kind Kind, resourceVersion, selector string) (*Watcher, error) {
	if err := kind.valid(); err != nil {
		return nil, err
	}
	q := selectorQuery(selector)
	q.Set("watch", "true")
	if resourceVersion != "" {
		q.Set("resourceVersion", resourceVersion)
	}
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.request(ctx, http.MethodGet, "/v1/"+string(kind), q, nil, "")
	if err != nil {
		cancel()
		return nil, err
	}
	return &Watcher{kind: kind, body: resp.Body, dec: json.NewDecoder(resp.Body), cancel: cancel}, nil
}

// Next returns the next event. It returns io.EOF when the hub ended the
// stream cleanly (watch again from the last resourceVersion), an *APIError
// for an ERROR event, and ctx's error once the watch is cancelled.
func (w *Watcher) Next() (Event, error) {
	if w.err != nil {
		return Event{}, w.err
	}
	ev, err := w.next()
	if err != nil {
		w.err = err
	}
	return ev, err
}

func (w *Watcher) next() (Event, error) {
	var raw schema.WatchEvent
	if err := w.dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("watch %s: %w", w.kind, err)
	}
	switch raw.Type {
	case schema.WatchError:
		var st schema.Status
		if err := json.Unmarshal(raw.Object, &st); err != nil {
			return Event{}, fmt.Errorf("watch %s: decode ERROR event: %w", w.kind, err)
		}
		if st.Code == 0 {
			st.Code = http.StatusInternalServerError
		}
		return Event{}, &APIError{Status: st}
	case schema.WatchAdded, schema.WatchModified, schema.WatchDeleted, schema.WatchBookmark:
	default:
		return Event{}, fmt.Errorf("watch %s: unknown event type %q", w.kind, raw.Type)
	}
	obj := schema.NewObject(w.kind.Object())
	if err := json.Unmarshal(raw.Object, obj); err != nil {
		return Event{}, fmt.Errorf("watch %s: decode %s event: %w", w.kind, raw.Type, err)
	}
	return Event{Type: raw.Type, Object: obj}, nil
}

// Events iterates over the stream until it ends. A clean end of stream
// (io.EOF) ends the loop without an error; any other error is yielded once,
// last.
func (w *Watcher) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := w.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Close ends the watch.
func (w *Watcher) Close() error {
	w.cancel()
	return w.body.Close()
}

// FollowHandler receives what Follow sees.
type FollowHandler struct {
	// List is called with every object first, and again after the hub
	// said the watch fell too far behind (every object, afresh).
	List func(objs []schema.Object) error
	// Event is called for each change after the list. Bookmarks are not
	// passed on.
	Event func(Event) error
}

// Follow lists kind, then watches from the list's resourceVersion until ctx
// is done or a handler fails. It resumes a stream the hub ended from the last
// version seen, and lists again when the hub says that version is too old.
// A hub that stays unreachable ends it with an error after a few jittered
// retries. The client's timeout (WithTimeout) does not apply: the lists and
// watches of Follow run until ctx is done.
func (c *Client) Follow(ctx context.Context, kind Kind, selector string, h FollowHandler) error {
	ctx = context.WithValue(ctx, streamKey{}, true)
	const maxFailures = 5
	rv, relist, failures := "", true, 0
	for {
		if relist {
			objs, listRV, err := c.List(ctx, kind, selector)
			if err != nil {
				return err
			}
			if h.List != nil {
				if err := h.List(objs); err != nil {
					return err
				}
			}
			// A list without a version (not expected from the hub)
			// means watching from "now plus every object again".
			rv, relist = listRV, false
		}
		w, err := c.Watch(ctx, kind, rv, selector)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if IsExpired(err) {
				relist = true
				continue
			}
			var ae *APIError
			if errors.As(err, &ae) || failures >= maxFailures {
				return err
			}
			failures++
			if err := sleepCtx(ctx, backoff(failures)); err != nil {
				return err
			}
			continue
		}
		got := false
		for ev, err := range w.Events() {
			if err != nil {
				break
			}
			got = true
			rv = newer(rv, ev.ResourceVersion())
			if ev.Type == schema.WatchBookmark || h.Event == nil {
				continue
			}
			if err := h.Event(ev); err != nil {
				w.Close()
				return err
			}
		}
		err = w.err
		w.Close()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case IsExpired(err):
			relist = true
			continue
		case err != nil && !errors.Is(err, io.EOF):
			var ae *APIError
			if errors.As(err, &ae) {
				return err
			}
		}
		// The stream ended: watch again from rv, at once if it was
		// useful, else after a pause (a hub going down, or one that
		// ends every stream at once).
		if got {
			failures = 0
			continue
		}
		failures++
		if failures > maxFailures {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("watch %s: the hub keeps ending the stream", kind)
			}
			return err
		}
		if err := sleepCtx(ctx, backoff(failures)); err != nil {
			return err
		}
	}
}

// newer returns the larger of two decimal resourceVersions; a value that is
// not a number never wins.
func newer(cur, cand string) string {
	c, err := strconv.ParseUint(cand, 10, 64)
	if err != nil {
		return cur
	}
	if n, err := strconv.ParseUint(cur, 10, 64); err == nil && n >= c {
		return cur
	}
	return cand
}

// backoff is a capped exponential delay with full jitter, so CLIs watching
// one hub do not all reconnect in the same instant after it restarts.
func backoff(attempt int) time.Duration {
	d := 250 * time.Millisecond << min(attempt, 5)
	return d/2 + rand.N(d/2)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
