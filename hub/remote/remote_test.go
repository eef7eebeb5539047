package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestLogsStreamWithAcks: a device that honours the window streams a log
// much larger than the window through a slow client; the hub holds at
// most Window chunks, acks as the client consumes, and ends the body when
// the device says Done.
func TestLogsStreamWithAcks(t *testing.T) {
	f := newFixture(t, nil)
	base := goroutineBase()
	dev := f.device("pi-1")

	const chunks = 100
	var want strings.Builder
	for i := range chunks {
		fmt.Fprintf(&want, "line %03d %s\n", i, strings.Repeat("x", 1000))
	}
	lines := strings.SplitAfter(want.String(), "\n")
	var acks int
	var deviceErr error
	deviceDone := make(chan struct{})
	go func() { // the device honours the window: Seq ≤ ack + window
		defer close(deviceDone)
		req := <-dev.reqs
		if req.Op != schema.OpLogs || req.Logs.Pod != "web" || req.Logs.Container != "app" || !req.Logs.Follow || *req.Logs.TailLines != 10 {
			deviceErr = fmt.Errorf("request %+v", req)
			return
		}
		window := int64(req.Window)
		var ack int64
		for seq := int64(1); seq <= chunks; seq++ {
			for seq > ack+window {
				select {
				case r := <-dev.reqs:
					if r.Op != schema.OpAck || r.ID != req.ID {
						deviceErr = fmt.Errorf("while streaming: %s request", r.Op)
						return
					}
					acks++
					ack = max(ack, r.Ack)
				case <-time.After(waitFor):
					deviceErr = fmt.Errorf("no ack after seq %d (ack %d)", seq-1, ack)
					return
				}
			}
			dev.respond(req.ID, seq, data(schema.StreamLog, lines[seq-1]))
		}
		dev.respond(req.ID, chunks+1, done)
	}()
	// The client is slow: the hub must wait for it, not buffer.
	var peak int
	f.m.beforeTake = func() {
		time.Sleep(time.Millisecond)
		for _, o := range f.m.opsOf("pi-1") {
			peak = max(peak, o.peakQueued())
		}
	}
	resp, body := f.get("/v1/devices/pi-1/pods/web/log?container=app&follow=true&tailLines=10", adminToken)
	<-deviceDone
	if deviceErr != nil {
		t.Fatal(deviceErr)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get(schema.HeaderLogSource) != schema.LogSourceDevice ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	if body != want.String() {
		t.Errorf("body: %d bytes, want %d", len(body), want.Len())
	}
	if e := resp.Trailer.Get(schema.TrailerError); e != "" {
		t.Errorf("Fleet-Error trailer %q on a clean end", e)
	}
	if peak > schema.DefaultRequestWindow+1 || peak == 0 { // the window, and the final Done
		t.Errorf("the hub held up to %d responses, window %d", peak, schema.DefaultRequestWindow)
	}
	if acks < chunks/schema.DefaultRequestWindow {
		t.Errorf("%d acks for %d chunks: not acked as consumed", acks, chunks)
	}
	f.awaitNoOps()
	if v := counterValue(t, f.met.RemoteRequests.WithLabelValues(schema.OpLogs, "ok")); v != 1 {
		t.Errorf("requests ok: %v", v)
	}
	if v := counterValue(t, f.met.RemoteBytes.WithLabelValues(schema.OpLogs)); v != float64(want.Len()) {
		t.Errorf("bytes relayed: %v, want %d", v, want.Len())
	}
	// The audit event.
	evs := f.model.Events("pi-1", "")
	if len(evs) != 1 || evs[0].Reason != EventLogsRequested || !strings.Contains(evs[0].Message, "admin (admin) from 127.0.0.1:") ||
		!strings.Contains(evs[0].Message, "read logs of web/app (follow=true, previous=false)") {
		t.Errorf("audit events %+v", evs)
	}
	dev.close()
	awaitGoroutines(t, base)
}

// TestLogsWindowExceededCutsOff: a device that sends more than its window
// is cut off: the stream ends with a Fleet-Error naming the device, the
// device is told to cancel, and the hub never held more than the window.
func TestLogsWindowExceededCutsOff(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	gate := make(chan struct{})
	f.m.beforeTake = func() { <-gate } // a client that stalls
	errc := make(chan error, 1)
	go func() {
		resp, body := f.get("/v1/devices/pi-1/pods/web/log?follow=true", adminToken)
		// The cut-off may come before the answer's header was written
		// (a 502 saying why) or after (a trailer saying why).
		if resp.StatusCode == http.StatusBadGateway {
			if !strings.Contains(body, "device pi-1") || !strings.Contains(body, "window") {
				errc <- fmt.Errorf("answer 502 %q: want it to name the device and the window", body)
				return
			}
			errc <- nil
			return
		}
		if resp.StatusCode != http.StatusOK || body != "" {
			errc <- fmt.Errorf("answer %d %q", resp.StatusCode, body)
			return
		}
		if e := resp.Trailer.Get(schema.TrailerError); !strings.Contains(e, "device pi-1") || !strings.Contains(e, "window") {
			errc <- fmt.Errorf("Fleet-Error trailer %q", e)
			return
		}
		errc <- nil
	}()
	req := dev.expect(schema.OpLogs)
	for seq := int64(1); seq <= int64(3*req.Window); seq++ {
		dev.respond(req.ID, seq, data(schema.StreamLog, strings.Repeat("y", schema.MaxChunkBytes)))
	}
	eventually(t, "the cut-off", func() bool { return f.dropped(dropWindow) >= 1 })
	var peak int
	for _, o := range f.m.opsOf("pi-1") {
		peak = o.peakQueued()
	}
	close(gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if peak > req.Window {
		t.Errorf("the hub held %d responses, window %d", peak, req.Window)
	}
	if c := dev.expect(schema.OpCancel); c.ID != req.ID {
		t.Errorf("cancel for %s, want %s", c.ID, req.ID)
	}
	f.awaitNoOps()
	if v := counterValue(t, f.met.RemoteRequests.WithLabelValues(schema.OpLogs, "cutoff")); v != 1 {
		t.Errorf("requests cut off: %v", v)
	}
}

// TestLogsFollowCancelledWhenClientLeaves: the device hears a cancel when
// the follower goes away, and nothing stays open.
func TestLogsFollowCancelledWhenClientLeaves(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Keepalive = 50 * time.Millisecond })
	base := goroutineBase()
	dev := f.device("pi-1")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	respc := make(chan *http.Response, 1)
	go func() {
		respc <- f.request(ctx, http.MethodGet, "/v1/devices/pi-1/pods/web/log?follow=true", adminToken)
	}()
	req := dev.expect(schema.OpLogs)
	dev.respond(req.ID, 1, data(schema.StreamLog, "first line\n"))
	resp := <-respc
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "first line\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	// The keepalive repeats the ack while the stream is open.
	if a := dev.expect(schema.OpAck); a.ID != req.ID || a.Ack != 1 {
		t.Errorf("keepalive ack %+v", a)
	}
	cancel()
	resp.Body.Close()
	if c := dev.expect(schema.OpCancel); c.ID != req.ID {
		t.Errorf("cancel of %s, want %s", c.ID, req.ID)
	}
	f.awaitNoOps()
	// A late response is dropped.
	dev.respond(req.ID, 2, data(schema.StreamLog, "late\n"))
	eventually(t, "the late response dropped", func() bool { return f.dropped(dropUnknownID) >= 1 })
	dev.close()
	awaitGoroutines(t, base)
}

// TestForgedAndDuplicateResponses: a response with an unknown ID, one
// with the right ID on another device's topic, one naming another device
// and a repeated Seq are dropped; the stream carries only the real data.
func TestForgedAndDuplicateResponses(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	type answer struct {
		code int
		body string
	}
	ans := make(chan answer, 1)
	go func() {
		resp, body := f.get("/v1/devices/pi-1/pods/web/log", adminToken)
		ans <- answer{resp.StatusCode, body}
	}()
	req := dev.expect(schema.OpLogs)
	forge := func(topicDevice, payloadDevice, id string) {
		b, _ := json.Marshal(schema.Response{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse},
			ID:       id, Device: payloadDevice, Seq: 1, Stream: schema.StreamLog, Data: []byte("FORGED\n"), Done: true,
		})
		// With the hub's identity: the ACL would stop a device.
		if err := f.hubC.Publish(t.Context(), f.topics.Device(topicDevice, schema.TopicResponses), b, false); err != nil {
			t.Fatal(err)
		}
	}
	forge("pi-2", "pi-2", req.ID)                                                            // right ID, another device's topic
	forge("pi-2", "pi-1", req.ID)                                                            // payload names pi-1, topic pi-2
	forge("pi-1", "pi-1", strings.Repeat("ab", 16))                                          // unknown ID
	f.m.Handle(f.topics.Device("pi-1", schema.TopicResponses), []byte(`{"kind":"Response"`)) // garbage
	eventually(t, "forged responses dropped", func() bool {
		return f.dropped(dropMismatch) == 2 && f.dropped(dropUnknownID) == 1 && f.dropped(dropMalformed) == 1
	})
	dev.respond(req.ID, 1, data(schema.StreamLog, "a\n"))
	dev.respond(req.ID, 1, data(schema.StreamLog, "a\n")) // re-delivered
	dev.respond(req.ID, 2, data(schema.StreamLog, "b\n"))
	dev.respond(req.ID, 3, done)
	a := <-ans
	if a.code != http.StatusOK || a.body != "a\nb\n" {
		t.Errorf("answer %d %q", a.code, a.body)
	}
	if v := f.dropped(dropDuplicate); v != 1 {
		t.Errorf("duplicates dropped: %v", v)
	}
	f.awaitNoOps()
}

// TestLogsErrors: what the client hears before any byte.
func TestLogsErrors(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.FirstResponseTimeout = 300 * time.Millisecond })
	base := goroutineBase()
	dev := f.device("pi-1")
	check := func(path, token string, code int, contains string) {
		t.Helper()
		resp, body := f.get(path, token)
		if resp.StatusCode != code || !strings.Contains(body, contains) {
			t.Errorf("GET %s: %d %s, want %d with %q", path, resp.StatusCode, body, code, contains)
		}
	}
	check("/v1/devices/nope/pods/web/log", adminToken, http.StatusNotFound, `device \"nope\" not found`)
	check("/v1/devices/pi-1/pods/web/log?tailLines=-1", adminToken, http.StatusBadRequest, "tailLines")
	check("/v1/devices/pi-1/pods/web/log?follow=maybe", adminToken, http.StatusBadRequest, "follow")
	check("/v1/devices/pi-1/pods/web/log?container=Bad_Name", adminToken, http.StatusBadRequest, "container")
	check("/v1/devices/pi-1/pods/web/log", monitorToken, http.StatusForbidden, "admin only")
	check("/v1/devices/pi-1/crashreports", monitorToken, http.StatusForbidden, "admin only")
	check("/v1/devices/pi-3/pods/web/log", adminToken, http.StatusServiceUnavailable, "device pi-3 is offline (never seen)")
	f.setOnline("pi-2", false)
	check("/v1/devices/pi-2/pods/web/log", adminToken, http.StatusServiceUnavailable, "device pi-2 is offline (last seen 3m ago)")

	// No answer in time: 504, and the device is told to cancel.
	check("/v1/devices/pi-1/pods/web/log", adminToken, http.StatusGatewayTimeout, "did not answer")
	req := dev.expect(schema.OpLogs)
	if c := dev.expect(schema.OpCancel); c.ID != req.ID {
		t.Errorf("cancel of %s, want %s", c.ID, req.ID)
	}
	// The device's errors.
	for _, tc := range []struct {
		code   string
		status int
	}{
		{schema.CodeNotFound, http.StatusNotFound},
		{schema.CodeTooManyRequests, http.StatusTooManyRequests},
		{schema.CodeBadRequest, http.StatusBadRequest},
	} {
		dev.script(func() {
			req := dev.expect(schema.OpLogs)
			dev.respond(req.ID, 1, failed(tc.code, "pod web has no container app"))
		})
		check("/v1/devices/pi-1/pods/web/log?container=app", adminToken, tc.status, "device pi-1: pod web has no container app")
	}
	f.awaitNoOps()
	if v := counterValue(t, f.met.RemoteRequests.WithLabelValues(schema.OpLogs, "timeout")); v != 1 {
		t.Errorf("timeouts counted: %v", v)
	}
	dev.close()
	awaitGoroutines(t, base)
}

// TestCrashReportFallback: an offline device's logs, and an online
// device's missing previous log, come from the crash report the hub
// holds, with headers that say so.
func TestCrashReportFallback(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	code := int32(137)
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, d := range []string{"pi-1", "pi-2"} {
		f.model.AddEvent(d, "uid-"+d, schema.Event{
			ID: "ev-" + d, Device: d, Time: at, Type: schema.EventWarning, Reason: "BackOff",
			Pod: "web", Container: "app", ExitCode: &code, LogTail: "panic: out of memory\n",
		}, 32)
	}
	f.setOnline("pi-2", false)
	resp, body := f.get("/v1/devices/pi-2/pods/web/log?container=app", adminToken)
	warn := resp.Header.Get(schema.HeaderWarning)
	if resp.StatusCode != http.StatusOK || body != "panic: out of memory\n" || resp.Header.Get(schema.HeaderLogSource) != schema.LogSourceCrashReport ||
		!strings.Contains(warn, "device pi-2 is offline since") || !strings.Contains(warn, "web/app exited with code 137 at 2024-05-01T12:00:00Z") {
		t.Errorf("offline: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	dev.script(func() {
		req := dev.expect(schema.OpLogs)
		if !req.Logs.Previous {
			t.Errorf("request %+v: want previous", req.Logs)
		}
		dev.respond(req.ID, 1, failed(schema.CodeNotFound, "no previous log of web/app"))
	})
	resp, body = f.get("/v1/devices/pi-1/pods/web/log?previous=true", adminToken)
	if resp.StatusCode != http.StatusOK || body != "panic: out of memory\n" || resp.Header.Get(schema.HeaderLogSource) != schema.LogSourceCrashReport ||
		!strings.Contains(resp.Header.Get(schema.HeaderWarning), "device pi-1 has no previous log of web/app") {
		t.Errorf("previous: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = f.get("/v1/devices/pi-2/crashreports", adminToken)
	var list schema.CrashReportList
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != http.StatusOK || list.Kind != "schema.CrashReportList" ||
		len(list.Items) != 1 || list.Items[0].LogTail != "panic: out of memory\n" || *list.Items[0].ExitCode != 137 {
		t.Errorf("crash reports: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.get("/v1/devices/nope/crashreports", adminToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("crash reports of an unknown device: %d", resp.StatusCode)
	}
	f.awaitNoOps()
}

// TestExec: the upgrade, frames both ways, the exit code, the audit.
func TestExec(t *testing.T) {
	f := newFixture(t, nil)
	base := goroutineBase()
	dev := f.device("pi-1")
	devErr := make(chan error, 1)
	go func() {
		devErr <- func() error {
			req := dev.expect(schema.OpExec)
			e := req.Exec
			if e.Pod != "web" || e.Container != "app" || strings.Join(e.Command, " ") != "sh -c cat; exit 3" || !e.TTY || !e.Stdin || e.Size == nil || e.Size.Cols != 80 {
				return fmt.Errorf("exec request %+v", e)
			}
			dev.respond(req.ID, 1, nil) // started
			if in := dev.expect(schema.OpStdin); string(in.Data) != "hello\n" {
				return fmt.Errorf("stdin %q", in.Data)
			}
			if rs := dev.expect(schema.OpResize); rs.Size == nil || rs.Size.Cols != 120 || rs.Size.Rows != 40 {
				return fmt.Errorf("resize %+v", rs.Size)
			}
			if eof := dev.expect(schema.OpStdin); !eof.EOF {
				return fmt.Errorf("want stdin EOF, got %+v", eof)
			}
			dev.respond(req.ID, 2, data(schema.StreamStdout, "hello\n"))
			dev.respond(req.ID, 3, data(schema.StreamStderr, "oops\n"))
			three := 3
			dev.respond(req.ID, 4, func(r *schema.Response) { r.Done, r.ExitCode = true, &three })
			return nil
		}()
	}()
	resp, c := f.dialExec("pi-1", "web", "container=app&command=sh&command=-c&command=cat%3B+exit+3&tty=true&stdin=true&cols=80&rows=24", adminToken, true)
	if c == nil || resp.Header.Get("Upgrade") != schema.ExecUpgradeProtocol {
		t.Fatalf("exec: %d %v", resp.StatusCode, resp.Header)
	}
	_ = schema.WriteFrame(c.conn, schema.FrameStdin, []byte("hello\n"))
	_ = schema.WriteFrame(c.conn, schema.FrameResize, []byte(`{"cols":120,"rows":40}`))
	_ = schema.WriteFrame(c.conn, schema.FrameStdinEOF, nil)
	var got []string
	for {
		typ, p := c.frame(t)
		got = append(got, fmt.Sprintf("%d:%s", typ, p))
		if typ == schema.FrameExit {
			break
		}
	}
	if err := <-devErr; err != nil {
		t.Fatal(err)
	}
	want := []string{"1:hello\n", "2:oops\n", `3:{"exitCode":3}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q, want %q", got, want)
	}
	if _, _, err := schemaReadAfterExit(c); !errors.Is(err, io.EOF) {
		t.Errorf("after the exit frame: %v, want the connection closed", err)
	}
	f.awaitNoOps()
	evs := f.model.Events("pi-1", "")
	if len(evs) != 2 || evs[0].Reason != EventExec || !strings.Contains(evs[0].Message, `admin (admin) from 127.0.0.1:`) ||
		!strings.Contains(evs[0].Message, `ran ["sh" "-c" "cat; exit 3"] in web/app (tty=true)`) ||
		evs[1].Reason != EventExecExited || !strings.Contains(evs[1].Message, "exit code 3") {
		t.Errorf("audit events %+v", evs)
	}
	c.conn.Close()
	dev.close()
	awaitGoroutines(t, base)
}

func schemaReadAfterExit(c *execClient) (byte, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(waitFor))
	return schema.ReadFrame(c.br, nil)
}

// TestExecErrors: errors before the upgrade, and a client that leaves.
func TestExecErrors(t *testing.T) {
	f := newFixture(t, nil)
	base := goroutineBase()
	dev := f.device("pi-1")
	check := func(device, query, token string, upgrade bool, code int, contains string) {
		t.Helper()
		resp, c := f.dialExec(device, "web", query, token, upgrade)
		body, _ := io.ReadAll(resp.Body)
		if c != nil || resp.StatusCode != code || !strings.Contains(string(body), contains) {
			t.Errorf("exec on %s?%s: %d %s, want %d with %q", device, query, resp.StatusCode, body, code, contains)
		}
	}
	check("pi-1", "command=ls", adminToken, false, http.StatusBadRequest, "Upgrade")
	check("pi-1", "command=ls", monitorToken, true, http.StatusForbidden, "may only read")
	check("pi-1", "", adminToken, true, http.StatusBadRequest, "command")
	check("nope", "command=ls", adminToken, true, http.StatusNotFound, "not found")
	check("pi-3", "command=ls", adminToken, true, http.StatusServiceUnavailable, "offline")
	dev.script(func() {
		req := dev.expect(schema.OpExec)
		dev.respond(req.ID, 1, failed(schema.CodeNotRunning, "container web/app is not running"))
	})
	check("pi-1", "command=ls", adminToken, true, http.StatusConflict, "container web/app is not running")

	// The client goes away: the device is told to cancel.
	dev.script(func() {
		req := dev.expect(schema.OpExec)
		dev.respond(req.ID, 1, nil)
	})
	_, c := f.dialExec("pi-1", "web", "command=sleep&command=1000", adminToken, true)
	if c == nil {
		t.Fatal("no upgrade")
	}
	c.conn.Close()
	dev.expect(schema.OpCancel)
	f.awaitNoOps()
	if evs := f.model.Events("pi-1", ""); evs[len(evs)-1].Reason != EventExecExited || !strings.Contains(evs[len(evs)-1].Message, "client went away") {
		t.Errorf("last audit event %+v", evs[len(evs)-1])
	}
	dev.close()
	awaitGoroutines(t, base)
}

// TestExecNoAnswer: a device that does not answer an exec in time gets
// a 504 for the client, a cancel, a timeout in the metrics and an audit
// entry saying the command did not start.
func TestExecNoAnswer(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.FirstResponseTimeout = 300 * time.Millisecond })
	base := goroutineBase()
	dev := f.device("pi-1")
	resp, c := f.dialExec("pi-1", "web", "command=ls", adminToken, true)
	body, _ := io.ReadAll(resp.Body)
	if c != nil || resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "did not answer") {
		t.Errorf("exec: %d %s, want 504 saying the device did not answer", resp.StatusCode, body)
	}
	req := dev.expect(schema.OpExec)
	if cancel := dev.expect(schema.OpCancel); cancel.ID != req.ID {
		t.Errorf("cancel of %s, want %s", cancel.ID, req.ID)
	}
	f.awaitNoOps()
	if v := counterValue(t, f.met.RemoteRequests.WithLabelValues(schema.OpExec, "timeout")); v != 1 {
		t.Errorf("exec timeouts counted: %v", v)
	}
	evs := f.model.Events("pi-1", "")
	if last := evs[len(evs)-1]; last.Reason != EventExecExited || !strings.Contains(last.Message, "did not start") || !strings.Contains(last.Message, "did not answer") {
		t.Errorf("last audit event %+v: want the exec recorded as not started", last)
	}
	dev.close()
	awaitGoroutines(t, base)
}

// TestStopEndsStreams: the hub's shutdown ends a follow and an exec.
func TestStopEndsStreams(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	logc := make(chan *http.Response, 1)
	go func() {
		resp, _ := f.get("/v1/devices/pi-1/pods/web/log?follow=true", adminToken)
		logc <- resp
	}()
	req := dev.expect(schema.OpLogs)
	dev.respond(req.ID, 1, data(schema.StreamLog, "x\n"))
	dev.script(func() {
		req := dev.expect(schema.OpExec)
		dev.respond(req.ID, 1, nil)
	})
	_, c := f.dialExec("pi-1", "web", "command=sh", adminToken, true)
	if c == nil {
		t.Fatal("no upgrade")
	}
	eventually(t, "two streams", func() bool { return f.m.openOps() == 2 })
	f.m.Stop()
	if resp := <-logc; resp.Trailer.Get(schema.TrailerError) != errStopping.Error() {
		t.Errorf("logs trailer %q", resp.Trailer.Get(schema.TrailerError))
	}
	if typ, p := c.frame(t); typ != schema.FrameExit || !strings.Contains(string(p), "shutting down") {
		t.Errorf("exec frame %d %s", typ, p)
	}
	f.awaitNoOps()
	if resp, _ := f.get("/v1/devices/pi-1/pods/web/log", adminToken); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("logs after Stop: %d", resp.StatusCode)
	}
}

// TestTop: a device's report, kept and exported on /metrics, stale when
// the device is offline; the list; any credential may read it.
func TestTop(t *testing.T) {
	f := newFixture(t, nil)
	base := goroutineBase()
	dev := f.device("pi-1")
	temp := 61.5
	dev.script(func() {
		req := dev.expect(schema.OpTop)
		dev.respond(req.ID, 1, func(r *schema.Response) {
			r.Done = true
			r.Top = &schema.TopReport{Device: "pi-1", Time: time.Now().UTC(), Node: schema.NodeMetrics{
				Load1: 1.25, MemoryTotalBytes: 4 << 30, MemoryAvailableBytes: 1 << 30, TemperatureCelsius: &temp,
				StateDisk: &schema.DiskMetrics{Path: "/var/lib/fleet", TotalBytes: 100, FreeBytes: 40},
				Throttled: "0x50005", ThrottledFlags: []string{"under-voltage-now", "throttled-occurred"},
			}, Containers: []schema.ContainerMetrics{{Pod: "web", Container: "app", CPUUsageNanos: 2_500_000_000, MemoryWorkingSetBytes: 12 << 20, MemoryLimitBytes: 64 << 20}}}
		})
	})
	resp, body := f.get("/v1/devices/pi-1/top", monitorToken)
	var top schema.TopReport
	if err := json.Unmarshal([]byte(body), &top); err != nil || resp.StatusCode != http.StatusOK || top.Kind != "TopReport" || top.Stale || top.Node.Load1 != 1.25 {
		t.Fatalf("top: %d %s", resp.StatusCode, body)
	}
	_, metricsText := f.get("/metrics", monitorToken)
	for _, want := range []string{
		`fleet_device_load1{device="pi-1"} 1.25`,
		`fleet_device_memory_total_bytes{device="pi-1"} 4.294967296e+09`,
		`fleet_device_disk_free_bytes{device="pi-1",disk="state"} 40`,
		`fleet_device_temperature_celsius{device="pi-1"} 61.5`,
		`fleet_device_throttled{device="pi-1"} 1`,
		`fleet_container_cpu_usage_seconds_total{container="app",device="pi-1",pod="web"} 2.5`,
		`fleet_container_memory_limit_bytes{container="app",device="pi-1",pod="web"} 6.7108864e+07`,
	} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Offline: the last report, stale.
	f.setOnline("pi-1", false)
	_, body = f.get("/v1/devices/pi-1/top", monitorToken)
	if err := json.Unmarshal([]byte(body), &top); err != nil || !top.Stale || top.Node.Load1 != 1.25 {
		t.Errorf("stale top: %s", body)
	}
	if resp, body := f.get("/v1/devices/pi-3/top", monitorToken); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "offline") {
		t.Errorf("top of a device never seen: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.get("/v1/devices/nope/top", monitorToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("top of an unknown device: %d", resp.StatusCode)
	}
	// The list: pi-2 is online but silent (stale none: left out), pi-1 stale.
	resp, body = f.get("/v1/top", adminToken)
	var list schema.TopReportList
	if err := json.Unmarshal([]byte(body), &list); err != nil || resp.StatusCode != http.StatusOK || list.Kind != "schema.TopReportList" ||
		len(list.Items) != 1 || list.Items[0].Device != "pi-1" || !list.Items[0].Stale {
		t.Errorf("top list: %d %s", resp.StatusCode, body)
	}
	// A deleted device's series vanish.
	f.model.Writer().SetDesired(1, func(int) (string, *schema.DesiredState) { return "pi-1", nil })
	f.model.Writer().DeleteDevice("pi-1")
	if _, text := f.get("/metrics", monitorToken); strings.Contains(text, `device="pi-1"`) {
		t.Error("/metrics keeps a deleted device's series")
	}
	f.awaitNoOps()
	dev.close()
	awaitGoroutines(t, base)
}

// TestDeviceOnlineRepeatsAck: a device that comes back online hears the
// open stream's ack at once.
func TestDeviceOnlineRepeatsAck(t *testing.T) {
	f := newFixture(t, nil)
	dev := f.device("pi-1")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	respc := make(chan *http.Response, 1)
	go func() {
		respc <- f.request(ctx, http.MethodGet, "/v1/devices/pi-1/pods/web/log?follow=true", adminToken)
	}()
	req := dev.expect(schema.OpLogs)
	dev.respond(req.ID, 1, data(schema.StreamLog, "a\n"))
	resp := <-respc
	defer resp.Body.Close()
	buf := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, buf[:2]); err != nil {
		t.Fatal(err)
	}
	f.m.DeviceOnline("pi-1")
	if a := dev.expect(schema.OpAck); a.ID != req.ID || a.Ack != 1 {
		t.Errorf("ack %+v", a)
	}
	cancel()
	dev.expect(schema.OpCancel)
	f.awaitNoOps()
}
