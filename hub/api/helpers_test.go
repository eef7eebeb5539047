package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

type testHub struct {
	URL     string
	Admin   string
	Monitor string
	Store   *store.Store
	API     *Server
	Logs    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newTestHub(t testing.TB, opts Options) *testHub {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return newTestHubOn(t, st, opts)
}

// newTestHubOn serves the API on st; the caller closes st.
func newTestHubOn(t testing.TB, st *store.Store, opts Options) *testHub {
	t.Helper()
	admin, err := st.IssueCredential(t.Context(), store.AdminCredential, store.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	mon, err := st.IssueCredential(t.Context(), "grafana", store.RoleMonitor)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opts.Store = st
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.Config.RegisterOnShutdown(srv.StopStreams)
	ts.Start()
	t.Cleanup(func() {
		srv.StopStreams()
		ts.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return &testHub{URL: ts.URL, Admin: admin, Monitor: mon, Store: st, API: srv, Logs: logs}
}

type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

func (r response) status(t testing.TB) schema.Status {
	t.Helper()
	var st schema.Status
	if err := json.Unmarshal(r.Body, &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, r.Body)
	}
	return st
}

func (h *testHub) do(t testing.TB, method, path, token string, body []byte) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return response{Code: resp.StatusCode, Header: resp.Header, Body: b}
}

func (h *testHub) admin(t testing.TB, method, path, body string) response {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return h.do(t, method, path, h.Admin, b)
}

// watchStream reads newline-delimited events with a deadline per event.
type watchStream struct {
	events chan schema.WatchEvent
	resp   *http.Response
}

func (h *testHub) watch(t *testing.T, query string) *watchStream {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.URL+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", query, resp.StatusCode, b)
	}
	ws := &watchStream{events: make(chan schema.WatchEvent, 100), resp: resp}
	go func() {
		defer close(ws.events)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev schema.WatchEvent
			if dec.Decode(&ev) != nil {
				return
			}
			ws.events <- ev
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return ws
}

// next returns the next event that is not a BOOKMARK (unless wanted).
func (ws *watchStream) next(t *testing.T, bookmarks bool) (schema.WatchEvent, bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ws.events:
			if ok && ev.Type == schema.WatchBookmark && !bookmarks {
				continue
			}
			return ev, ok
		case <-timeout:
			t.Fatal("no watch event within 10s")
		}
	}
}

func objectName(t *testing.T, raw json.RawMessage) (name, rv string) {
	t.Helper()
	var o struct {
		Metadata schema.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("event object: %v: %s", err, raw)
	}
	return o.Metadata.Name, o.Metadata.ResourceVersion
}

func deploymentYAML(name, image string, labels ...string) string {
	var l strings.Builder
	if len(labels) > 0 {
		l.WriteString("\n  labels:")
		for i := 0; i+1 < len(labels); i += 2 {
			l.WriteString("\n    " + labels[i] + ": " + labels[i+1])
		}
	}
	return `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: ` + name + l.String() + `
spec:
  selector:
    matchLabels:
      site: a
  template:
    spec:
      containers:
      - name: app
        image: ` + image + `
`
}

func deviceYAML(name string, labels ...string) string {
	var l strings.Builder
	for i := 0; i+1 < len(labels); i += 2 {
		l.WriteString("\n    " + labels[i] + ": " + labels[i+1])
	}
	if l.Len() > 0 {
		return "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: " + name + "\n  labels:" + l.String() + "\n"
	}
	return "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: " + name + "\n"
}
