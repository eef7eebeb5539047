package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(schema.Status{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"}, Code: code, Reason: reason, Message: msg})
}

func newRemote(t *testing.T, h http.HandlerFunc, opts ...client.Option) *client.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLogsStreamsWithHeaders(t *testing.T) {
	release := make(chan struct{})
	c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/devices/pi-1/pods/web/log" || r.Header.Get("Authorization") != "Bearer "+token {
			writeStatus(w, 404, "NotFound", "wrong path "+r.URL.Path)
			return
		}
		if got, want := r.URL.RawQuery, "container=app&follow=true&limitBytes=100&sinceSeconds=600&tailLines=5&timestamps=true"; got != want {
			writeStatus(w, 400, "BadRequest", "query "+got+", want "+want)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set(schema.HeaderLogSource, schema.LogSourceDevice)
		w.Header().Set(schema.HeaderWarning, "a warning")
		io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
		select { // the client must see line 1 before line 2 is written
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "line 2\n")
	})
	tail := int64(5)
	s, err := c.Logs(ctxT(t), "pi-1", "web", schema.LogOptions{Container: "app", TailLines: &tail, SinceSeconds: 600, Timestamps: true, Follow: true, LimitBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Source() != schema.LogSourceDevice || s.Warning() != "a warning" {
		t.Errorf("source %q warning %q", s.Source(), s.Warning())
	}
	br := bufio.NewReader(s)
	if l, err := br.ReadString('\n'); l != "line 1\n" || err != nil {
		t.Fatalf("first line %q, %v", l, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if string(rest) != "line 2\n" || err != nil {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}
}

func TestLogsTrailerError(t *testing.T) {
	c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", schema.TrailerError)
		io.WriteString(w, "some\n")
		w.(http.Flusher).Flush()
		w.Header().Set(schema.TrailerError, "device pi-1 went offline while streaming web/app")
	})
	s, err := c.Logs(ctxT(t), "pi-1", "web", schema.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Err() != nil {
		t.Error("Err before EOF must be nil")
	}
	b, err := io.ReadAll(s)
	if string(b) != "some\n" || err != nil {
		t.Fatalf("body %q, %v", b, err)
	}
	var se *client.StreamError
	if err := s.Err(); !errors.As(err, &se) || se.Message != "device pi-1 went offline while streaming web/app" {
		t.Errorf("Err = %v", err)
	}
}

func TestLogsStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		code   int
		reason string
		check  func(error) bool
	}{
		{404, "NotFound", client.IsNotFound},
		{400, "BadRequest", client.IsInvalid},
		{403, "Forbidden", client.IsForbidden},
		{503, "ServiceUnavailable", func(err error) bool {
			var ae *client.APIError
			return errors.As(err, &ae) && ae.Status.Code == 503
		}},
	} {
		c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, tc.code, tc.reason, "pod web on device pi-1: "+tc.reason)
		})
		_, err := c.Logs(ctxT(t), "pi-1", "web", schema.LogOptions{})
		if err == nil || !tc.check(err) || !strings.Contains(err.Error(), "pod web on device pi-1") {
			t.Errorf("%d: %v", tc.code, err)
		}
	}
	c := newRemote(t, func(http.ResponseWriter, *http.Request) { t.Error("request with a bad name sent") })
	if _, err := c.Logs(ctxT(t), "pi-1", "Bad/Pod", schema.LogOptions{}); err == nil {
		t.Error("bad pod name accepted")
	}
}

// The client's timeout bounds the wait for the hub's answer, not a
// followed stream.
func TestLogsTimeoutBoundsOnlyTheAnswer(t *testing.T) {
	c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" {
			<-r.Context().Done() // never answers
			return
		}
		io.WriteString(w, "a\n")
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond) // longer than the client's timeout
		io.WriteString(w, "b\n")
	}, client.WithTimeout(100*time.Millisecond))
	if _, err := c.Logs(ctxT(t), "pi-1", "web", schema.LogOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent hub: %v, want DeadlineExceeded", err)
	}
	s, err := c.Logs(ctxT(t), "pi-1", "web", schema.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if b, err := io.ReadAll(s); string(b) != "a\nb\n" || err != nil {
		t.Errorf("followed stream: %q, %v", b, err)
	}
}

// execHub upgrades exec requests and runs serve on the connection.
func execHub(t *testing.T, serve func(conn net.Conn, br *bufio.Reader, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Upgrade") != schema.ExecUpgradeProtocol || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			writeStatus(w, 400, "BadRequest", "not an exec upgrade")
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeStatus(w, 401, "Unauthorized", "token")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", schema.ExecUpgradeProtocol)
		brw.Flush()
		serve(conn, brw.Reader, r)
	}
}

func exitFrame(w io.Writer, x schema.ExecExit) {
	b, _ := json.Marshal(x)
	schema.WriteFrame(w, schema.FrameExit, b)
}

// echoExec answers stdin with stdout "out:<input>", reports the resize it
// got on stderr, and exits 3 at EOF.
func echoExec(t *testing.T) func(net.Conn, *bufio.Reader, *http.Request) {
	return func(conn net.Conn, br *bufio.Reader, r *http.Request) {
		q := r.URL.Query()
		if got := strings.Join(q["command"], " "); got != "sh -c cat" || q.Get("container") != "app" || q.Get("tty") != "true" || q.Get("stdin") != "true" || q.Get("cols") != "80" || q.Get("rows") != "24" {
			exitFrame(conn, schema.ExecExit{ExitCode: 1, Code: "BadRequest", Error: "query " + r.URL.RawQuery})
			return
		}
		var in bytes.Buffer
		for {
			typ, data, err := schema.ReadFrame(br, nil)
			if err != nil {
				t.Errorf("hub read: %v", err)
				return
			}
			switch typ {
			case schema.FrameStdin:
				in.Write(data)
			case schema.FrameResize:
				schema.WriteFrame(conn, schema.FrameStderr, append([]byte("resize:"), data...))
			case schema.FrameStdinEOF:
				schema.WriteFrame(conn, schema.FrameStdout, append([]byte("out:"), in.Bytes()...))
				exitFrame(conn, schema.ExecExit{ExitCode: 3})
				return
			}
		}
	}
}

func TestExecFramesAndExitCode(t *testing.T) {
	c := newRemote(t, execHub(t, echoExec(t)))
	testExec(t, c)
}

// Over TLS the client dials with its transport's TLS config and speaks
// HTTP/1.1 even when the hub offers HTTP/2.
func TestExecTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(execHub(t, echoExec(t)))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, token, client.WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	testExec(t, c)
	// Without the hub's CA, the handshake fails.
	c2, _ := client.New(srv.URL, token)
	if _, err := c2.Exec(ctxT(t), "pi-1", "web", schema.ExecOptions{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted hub: %v", err)
	}
}

func testExec(t *testing.T, c *client.Client) {
	t.Helper()
	s, err := c.Exec(ctxT(t), "pi-1", "web", schema.ExecOptions{Container: "app", Command: []string{"sh", "-c", "cat"}, TTY: true, Stdin: true, Size: &schema.TermSize{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Resize(schema.TermSize{Cols: 100, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stdin([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	x, err := s.Copy(&out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if x.ExitCode != 3 || x.Error != "" || out.String() != "out:hello" || errOut.String() != `resize:{"cols":100,"rows":40}` {
		t.Errorf("exit %+v stdout %q stderr %q", x, out.String(), errOut.String())
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Errorf("Recv after exit: %v, want io.EOF", err)
	}
}

func TestExecRefusedBeforeUpgrade(t *testing.T) {
	c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusConflict, "Conflict", "container web/app on device pi-1 is not running")
	})
	_, err := c.Exec(ctxT(t), "pi-1", "web", schema.ExecOptions{Command: []string{"ls"}})
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "container web/app on device pi-1 is not running") {
		t.Errorf("err = %v", err)
	}
}

// A connection that ends without an exit frame is an error, and
// cancelling the context cancels the command (the hub sees it close).
func TestExecCancelAndCutConnection(t *testing.T) {
	closed := make(chan struct{})
	c := newRemote(t, execHub(t, func(conn net.Conn, br *bufio.Reader, r *http.Request) {
		if r.URL.Query().Get("command") == "cut" {
			schema.WriteFrame(conn, schema.FrameStdout, []byte("partial"))
			return
		}
		if _, _, err := schema.ReadFrame(br, nil); err == nil {
			t.Error("unexpected frame")
		}
		close(closed)
	}))
	s, err := c.Exec(ctxT(t), "pi-1", "web", schema.ExecOptions{Command: []string{"cut"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := s.Copy(&out, io.Discard); err == nil || out.String() != "partial" {
		t.Errorf("cut connection: %v, output %q", err, out.String())
	}
	s.Close()

	ctx, cancel := context.WithCancel(ctxT(t))
	s, err = c.Exec(ctx, "pi-1", "web", schema.ExecOptions{Command: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cancel()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not see the connection close after cancel")
	}
}

func TestTopAndCrashReports(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	code := int32(1)
	c := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/devices/pi-1/top":
			json.NewEncoder(w).Encode(schema.TopReport{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"}, Device: "pi-1", Time: at, Node: schema.NodeMetrics{Load1: 0.5}})
		case "/v1/top":
			if r.URL.Query().Get("labelSelector") != "site=lab" {
				writeStatus(w, 400, "BadRequest", "selector "+r.URL.RawQuery)
				return
			}
			json.NewEncoder(w).Encode(schema.TopReportList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.TopReportList"}, Items: []schema.TopReport{{Device: "pi-1", Stale: true}, {Device: "pi-2"}}})
		case "/v1/devices/pi-1/crashreports":
			json.NewEncoder(w).Encode(schema.CrashReportList{Items: []schema.CrashReport{{Device: "pi-1", Pod: "web", Container: "app", Time: at, ExitCode: &code, LogTail: "boom\n"}}})
		default:
			writeStatus(w, 404, "NotFound", "device \"nope\" not found")
		}
	})
	ctx := ctxT(t)
	rep, err := c.Top(ctx, "pi-1")
	if err != nil || rep.Device != "pi-1" || rep.Node.Load1 != 0.5 || !rep.Time.Equal(at) {
		t.Errorf("Top: %+v, %v", rep, err)
	}
	l, err := c.TopList(ctx, "site=lab")
	if err != nil || len(l) != 2 || !l[0].Stale || l[1].Device != "pi-2" {
		t.Errorf("TopList: %+v, %v", l, err)
	}
	crs, err := c.CrashReports(ctx, "pi-1")
	if err != nil || len(crs) != 1 || crs[0].LogTail != "boom\n" || *crs[0].ExitCode != 1 {
		t.Errorf("CrashReports: %+v, %v", crs, err)
	}
	if _, err := c.Top(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("Top of unknown device: %v", err)
	}
}
