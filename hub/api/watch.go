package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// watch streams newline-delimited schema.WatchEvents until the client goes
// away, the server shuts down or the store ends the watch.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, kind string, sel schema.LabelSelector) {
	from, hasRV, err := parseRV(r)
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	// Without a resourceVersion the stream starts with every object.
	var initial []schema.Object
	if !hasRV {
		if initial, from, err = s.store.List(ctx, kind, sel.MatchLabels); err != nil {
			WriteError(w, r, s.log, err)
			return
		}
		// The store filters by matchLabels only.
		initial = slices.DeleteFunc(initial, func(o schema.Object) bool { return !sel.Matches(o.GetMetadata().Labels) })
	}
	events, err := s.store.Watch(ctx, kind, from, store.WithBookmarks(s.opts.BookmarkInterval))
	if err != nil && !errors.Is(err, store.ErrExpired) {
		WriteError(w, r, s.log, err)
		return
	}

	rc := http.NewResponseController(w)
	// The stream outlives the server's read timeout.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st := &stream{w: w, rc: rc, timeout: s.opts.WatchWriteTimeout, redact: monitorView(r, kind)}

	if err != nil { // expired
		st.status(StatusFor(err))
		return
	}
	if err := st.flush(); err != nil {
		return
	}
	for _, o := range initial {
		raw, err := json.Marshal(o)
		if err != nil || st.send(schema.WatchAdded, st.shown(s.withStatus(kind, o.GetMetadata().Name, raw))) != nil {
			return
		}
	}
	for {
		var ev store.Event
		var ok bool
		select {
		case ev, ok = <-events:
		case <-ctx.Done():
			return
		}
		if !ok {
			return
		}
		if err := s.forward(st, kind, sel, ev); err != nil {
			return
		}
	}
}

// forward writes one store event, translated for the label selector: an
// object that starts matching is ADDED, one that stops matching DELETED.
// It returns an error when the stream must end.
func (s *Server) forward(st *stream, kind string, sel schema.LabelSelector, ev store.Event) error {
	switch ev.Type {
	case store.EventBookmark:
		raw, err := json.Marshal(bookmark{
			APIVersion: schema.APIVersion, Kind: kind,
			Metadata: bookmarkMeta{ResourceVersion: strconv.FormatUint(ev.Revision, 10)},
		})
		if err != nil {
			return err
		}
		return st.send(schema.WatchBookmark, raw)
	case store.EventError:
		st.status(StatusFor(ev.Err))
		return errors.New("watch ended by the store")
	}
	typ := string(ev.Type)
	if !sel.Empty() {
		now, was := matches(ev.Object, sel), ev.Prev != nil && matches(ev.Prev, sel)
		switch {
		case ev.Type == store.EventDeleted:
			if !now {
				return nil
			}
		case now && was:
		case now:
			typ = schema.WatchAdded
		case was:
			typ = schema.WatchDeleted
		default:
			return nil
		}
	}
	obj := ev.Object
	if typ != schema.WatchDeleted {
		obj = s.withStatus(ev.Kind, ev.Name, obj)
	}
	return st.send(typ, st.shown(obj))
}

// withStatus returns the object's JSON with its current status.
func (s *Server) withStatus(kind, name string, raw []byte) []byte {
	status := s.statusJSON(kind, name)
	if status == nil {
		return raw
	}
	var b bytes.Buffer
	b.Grow(len(raw) + len(status) + 16)
	writeWithStatus(&b, raw, status)
	return b.Bytes()
}

type bookmark struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   bookmarkMeta `json:"metadata"`
}

type bookmarkMeta struct {
	ResourceVersion string `json:"resourceVersion"`
}

// matches reports whether the labels of a stored object's JSON satisfy
// sel.
func matches(raw []byte, sel schema.LabelSelector) bool {
	var o struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return false
	}
	return sel.Matches(o.Metadata.Labels)
}

// stream writes and flushes watch events one by one.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	// redact: the stream goes to a monitor, who sees Deployments
	// without their pod template (redactDeployment).
	redact bool
}

// shown is an object's JSON as the stream's reader may see it.
func (st *stream) shown(obj []byte) []byte {
	if st.redact {
		return redactDeployment(obj)
	}
	return obj
}

func (st *stream) send(typ string, obj json.RawMessage) error {
	b, err := json.Marshal(schema.WatchEvent{Type: typ, Object: obj})
	if err != nil {
		return fmt.Errorf("encode watch event: %w", err)
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	if _, err := st.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return st.flush()
}

func (st *stream) flush() error {
	if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// status sends a final ERROR event.
func (st *stream) status(s schema.Status) {
	raw, err := json.Marshal(s)
	if err == nil {
		_ = st.send(schema.WatchError, raw)
	}
}
