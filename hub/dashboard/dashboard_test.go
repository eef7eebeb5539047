package dashboard

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/store"
)

// hubFixture is the API of a hub (a real store) with the dashboard's
// routes, over a fleet model the test fills.
type hubFixture struct {
	srv     *httptest.Server
	dash    *Dashboard
	st      *store.Store
	model   *fleetmodel.Model
	admin   string
	monitor string
}

func newHub(t *testing.T, devices ...string) *hubFixture {
	t.Helper()
	st, err := store.Open(store.Options{Dir: filepath.Join(t.TempDir(), "store"), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	f := &hubFixture{st: st}
	if f.admin, err = store.NewToken(); err != nil {
		t.Fatal(err)
	}
	if err := st.PutCredential(ctx, store.AdminCredential, store.RoleAdmin, f.admin); err != nil {
		t.Fatal(err)
	}
	if f.monitor, err = st.CreateCredential(ctx, "grafana", store.RoleMonitor); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.model = fleet(t, &now, devices...)
	a, err := api.New(api.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	f.dash, err = New(Options{Model: f.model, Store: st, Version: "v9.9.9", ScanInterval: 10 * time.Millisecond, AuthCheck: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.dash.Register(a)
	f.srv = httptest.NewServer(a)
	t.Cleanup(func() {
		f.dash.Stop()
		f.srv.Close()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *hubFixture) get(t *testing.T, path, token string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestPageAndAssets(t *testing.T) {
	f := newHub(t)
	resp, body := f.get(t, "/", "")
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`<script src="/ui/app.js" defer>`)) {
		t.Fatalf("GET /: %d\n%s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != ContentSecurityPolicy || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, p := range []string{"/ui/app.js", "/ui/app.css", "/ui/icon.svg"} {
		resp, body := f.get(t, p, "", "Accept-Encoding", "gzip")
		if resp.StatusCode != http.StatusOK || len(body) == 0 || resp.Header.Get("ETag") == "" {
			t.Errorf("GET %s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
		if resp.Header.Get("Content-Encoding") == "gzip" {
			if _, err := gzip.NewReader(bytes.NewReader(body)); err != nil {
				t.Errorf("GET %s: gzip: %v", p, err)
			}
		}
		resp, _ = f.get(t, p, "", "If-None-Match", resp.Header.Get("ETag"))
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", p, resp.StatusCode)
		}
	}
	if resp, _ := f.get(t, "/ui/nothing.js", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nothing.js: %d", resp.StatusCode)
	}
	// Other paths stay the API's: 401 before 404.
	if resp, _ := f.get(t, "/index.html", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /index.html without a token: %d, want 401", resp.StatusCode)
	}
}

// TestAssetsSelfContained: nothing is loaded from elsewhere, nothing is
// parsed as HTML, and the first view stays light.
func TestAssetsSelfContained(t *testing.T) {
	a, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(`)
	forbidden := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|localStorage`)
	total := 0
	err = fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		text := string(b)
		if strings.HasPrefix(path.Base(p), "uplot") {
			// The vendored library names its home in its licence banner,
			// the only place it may (TestVendoredUPlot).
			text = strings.Replace(text, uplotBanner, "", 1)
		}
		if strings.HasSuffix(p, ".svg") {
			text = strings.ReplaceAll(text, "http://www.w3.org/2000/svg", "")
		}
		if m := external.FindString(text); m != "" {
			t.Errorf("%s refers to something outside the hub: %q", p, m)
		}
		if strings.HasSuffix(p, ".js") {
			if m := forbidden.FindString(text); m != "" {
				t.Errorf("%s uses %s", p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, as := range append([]*asset{a.index}, a.files["app.js"], a.files["app.css"], a.files["icon.svg"]) {
		n := len(as.raw)
		if as.gz != nil {
			n = len(as.gz)
		}
		total += n
	}
	// The budget of the first view is 200 KB transferred, data included.
	if total > 60<<10 {
		t.Errorf("the page's files are %d bytes gzipped; keep them under 60 KB", total)
	}
	t.Logf("page, script, style sheet and icon: %d bytes gzipped", total)
}

func TestSessionSummaryDevices(t *testing.T) {
	f := newHub(t, "pi-1 online site=north", "pi-2 offline site=south")
	resp, body := f.get(t, "/v1/dashboard/session", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("session without a token: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.get(t, "/v1/dashboard/session", "wrong"); resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte("wrong bearer token")) {
		t.Fatalf("session with a wrong token: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		token, want string
	}{
		{f.monitor, `{"name":"grafana","role":"monitor","readOnly":true,"version":"v9.9.9","staleAfter":60}`},
		{f.admin, `{"name":"admin","role":"admin","readOnly":false,"version":"v9.9.9","staleAfter":60}`},
	} {
		if _, body := f.get(t, "/v1/dashboard/session", c.token); strings.TrimSpace(string(body)) != c.want {
			t.Errorf("session: %s, want %s", body, c.want)
		}
	}
	var sum Summary
	_, body = f.get(t, "/v1/dashboard/summary", f.monitor)
	if err := json.Unmarshal(body, &sum); err != nil || sum.Counts.Devices != 2 || sum.Counts.Online != 1 || sum.Counts.Offline != 1 {
		t.Errorf("summary: %v %s", err, body)
	}
	var page Page
	_, body = f.get(t, "/v1/dashboard/devices?labelSelector=site%3Dsouth", f.monitor)
	if err := json.Unmarshal(body, &page); err != nil || page.Matched != 1 || page.Items[0].Name != "pi-2" || page.Items[0].State != StateOffline {
		t.Errorf("devices: %v %s", err, body)
	}
	for _, q := range []string{"state=nope", "labelSelector=a%3D%3D%3D", "limit=99999"} {
		resp, body := f.get(t, "/v1/dashboard/devices?"+q, f.monitor)
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte(`"field":"`+strings.Split(q, "=")[0]+`"`)) {
			t.Errorf("devices?%s: %d %s, want 400 naming the parameter", q, resp.StatusCode, body)
		}
	}
}

// stream is an open GET /v1/dashboard/stream.
type stream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
}

func (f *hubFixture) openStream(t *testing.T, token string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/v1/dashboard/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &stream{t: t, resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event (skipping comments).
func (s *stream) next() (string, string) {
	s.t.Helper()
	var name, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("stream ended before an event: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

func (s *stream) ended() bool {
	_, err := s.r.ReadString('\n')
	return errors.Is(err, io.EOF)
}

func TestStream(t *testing.T) {
	f := newHub(t, "pi-1 online", "pi-2 online")
	s := f.openStream(t, f.monitor)
	if name, data := s.next(); name != EventHello || !strings.Contains(data, `"devices":2`) {
		t.Fatalf("first event %s %s", name, data)
	}
	uid, _, _ := f.model.Device("pi-2")
	f.model.UpdateReport("pi-2", uid, func(r *fleetmodel.Report, _ bool) bool { r.Online = false; return true })
	name, data := s.next()
	var ch Change
	if err := json.Unmarshal([]byte(data), &ch); name != EventChange || err != nil ||
		strings.Join(ch.Devices, ",") != "pi-2" || ch.Counts.Online != 1 || ch.Counts.Offline != 1 {
		t.Fatalf("after pi-2 went offline: %s %s (%v)", name, data, err)
	}

	// A second page sees the same; the first one's token is revoked.
	s2 := f.openStream(t, f.admin)
	if name, _ := s2.next(); name != EventHello {
		t.Fatalf("second stream: %s", name)
	}
	if err := f.st.DeleteCredential(t.Context(), "grafana"); err != nil {
		t.Fatal(err)
	}
	if name, data := s.next(); name != EventUnauthorized || !strings.Contains(data, "no longer accepts this token") {
		t.Fatalf("after the credential was deleted: %s %s", name, data)
	}
	if !s.ended() {
		t.Error("the stream of a revoked token goes on")
	}

	// Shutdown ends the others; new streams are refused.
	ln := f.dash.StopOnClose(&nopListener{})
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if name, _ := s2.next(); name != EventShutdown {
		t.Fatalf("after Stop: %s", name)
	}
	if resp, body := f.get(t, "/v1/dashboard/stream", f.admin); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a stream after Stop: %d %s, want 503", resp.StatusCode, body)
	}
}

type nopListener struct{ net.Listener }

func (nopListener) Close() error { return nil }

func TestNewNeedsModelAndStore(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a model and a store succeeded")
	}
}

// TestShutdownEndsStreams: an http.Server serving the dashboard through
// StopOnClose shuts down at once with a stream open, as the hub does.
func TestShutdownEndsStreams(t *testing.T) {
	f := newHub(t, "pi-1 online")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.srv.Config.Handler}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(f.dash.StopOnClose(ln)) }()
	f.srv.URL = "http://" + ln.Addr().String()
	s := f.openStream(t, f.admin)
	if name, _ := s.next(); name != EventHello {
		t.Fatalf("first event %s", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stream open: %v after %v", err, time.Since(start))
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve: %v", err)
	}
	if name, _ := s.next(); name != EventShutdown {
		t.Errorf("the stream's last event: %s, want %s", name, EventShutdown)
	}
}
