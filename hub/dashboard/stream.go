package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fleetmq/fleet/hub/api"
)

// Events of the live stream (GET /v1/dashboard/stream), in the
// server-sent events format. Each data line is one JSON object.
const (
	// EventHello opens the stream: {"seq":N,"counts":{…}}. A page
	// (re)loads what it shows when it gets it, so nothing that happened
	// while it was disconnected is missed.
	EventHello = "hello"
	// EventChange is a Change.
	EventChange = "change"
	// EventUnauthorized ends the stream when its token is no longer
	// accepted (revoked, or the admin token rotated): {"message":…}.
	EventUnauthorized = "unauthorized"
	// EventShutdown ends the stream when the hub shuts down; the page
	// reconnects.
	EventShutdown = "shutdown"
)

// serveStream streams changes until the page goes away, its token stops
// working or the hub shuts down.
func (d *Dashboard) serveStream(w http.ResponseWriter, r *http.Request) {
	select {
	case <-d.stopping:
		api.WriteError(w, r, d.log, errStopping)
		return
	default:
	}
	token := bearer(r.Header.Get("Authorization"))
	sub, err := d.tracker.subscribe(r.Context())
	if err != nil {
		api.WriteError(w, r, d.log, err)
		return
	}
	if sub == nil {
		api.WriteError(w, r, d.log, errStopping)
		return
	}
	defer d.tracker.unsubscribe(sub)

	rc := http.NewResponseController(w)
	// The stream outlives the server's read and write timeouts; each
	// write gets its own deadline.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sse{w: w, rc: rc, timeout: d.opts.WriteTimeout}

	hello := sub.take()
	if st.event(EventHello, map[string]any{"seq": hello.Seq, "counts": hello.Counts}) != nil {
		return
	}
	heartbeat := time.NewTicker(d.opts.Heartbeat)
	defer heartbeat.Stop()
	authCheck := time.NewTicker(d.opts.AuthCheck)
	defer authCheck.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-d.stopping:
			_ = st.event(EventShutdown, map[string]string{"message": "the hub is shutting down"})
			return
		case <-sub.wake:
			err = st.event(EventChange, sub.take())
		case <-heartbeat.C:
			err = st.comment("ping")
		case <-authCheck.C:
			if _, ok := d.opts.Store.Authenticate(token); !ok {
				_ = st.event(EventUnauthorized, map[string]string{
					"message": "the hub no longer accepts this token: it was revoked, or replaced by a new one",
				})
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// sse writes server-sent events and flushes each.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *sse) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	return s.write(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, b))
}

func (s *sse) comment(text string) error {
	return s.write([]byte(": " + text + "\n\n"))
}

func (s *sse) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
