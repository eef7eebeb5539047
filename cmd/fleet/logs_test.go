package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestLogsOne(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	var query string
	rh.logs = func(w http.ResponseWriter, r *http.Request, device, pod string) {
		query = r.URL.RawQuery
		switch {
		case r.URL.Query().Get("previous") == "true":
			w.Header().Set(schema.HeaderLogSource, schema.LogSourceCrashReport)
			w.Header().Set(schema.HeaderWarning, "device offline since 12:00; showing the last lines the device reported when web/web exited with code 1 at 12:00")
			io.WriteString(w, "panic: boom\n")
		case r.URL.Query().Get("container") == "broken":
			w.Header().Set("Trailer", schema.TrailerError)
			io.WriteString(w, "half of it\n")
			w.(http.Flusher).Flush()
			w.Header().Set(schema.TrailerError, "device pi-1 went offline while sending the log of web/broken")
		case r.URL.Query().Get("container") == "gone":
			statusJSON(w, 503, "ServiceUnavailable", "device pi-1 is offline (last seen 3m ago)")
		default:
			io.WriteString(w, device+" "+pod+" line 1\nline 2\n")
		}
	}
	r := e.run("", "logs", "pi-1/web", "-c", "web", "--tail", "5", "--since", "90s", "--timestamps", "--limit-bytes", "1000")
	if r.code != 0 || r.stdout != "pi-1 web line 1\nline 2\n" || r.stderr != "" {
		t.Fatalf("logs: %+v", r)
	}
	if query != "container=web&limitBytes=1000&sinceSeconds=90&tailLines=5&timestamps=true" {
		t.Errorf("query %q", query)
	}
	// kubectl's positional container, alone or agreeing with -c.
	for _, args := range [][]string{{"logs", "pi-1/web", "web"}, {"logs", "pi-1/web", "web", "-c", "web"}} {
		query = ""
		if r := e.run("", args...); r.code != 0 || r.stdout != "pi-1 web line 1\nline 2\n" || query != "container=web" {
			t.Errorf("%v: %+v, query %q", args, r, query)
		}
	}
	if r := e.run("", "logs", "pi-1/web", "web", "-c", "other"); r.code != 1 || !strings.Contains(r.stderr, "only one of -c or an inline CONTAINER argument") {
		t.Errorf("-c and another positional container: %+v", r)
	}
	r = e.run("", "logs", "pod/pi-1/web", "-p")
	if r.code != 0 || r.stdout != "panic: boom\n" || !strings.HasPrefix(r.stderr, "Warning: device offline since 12:00; showing") {
		t.Errorf("--previous from a crash report: %+v", r)
	}
	r = e.run("", "logs", "pi-1/web", "-c", "broken")
	if r.code != 1 || r.stdout != "half of it\n" || r.stderr != "error: device pi-1 went offline while sending the log of web/broken\n" {
		t.Errorf("trailer error: %+v", r)
	}
	r = e.run("", "logs", "pi-1/web", "-c", "gone")
	if r.code != 1 || r.stderr != "Error from server (ServiceUnavailable): device pi-1 is offline (last seen 3m ago)\n" {
		t.Errorf("offline: %+v", r)
	}
	for _, bad := range [][]string{
		{"logs", "pi-1"},
		{"logs", "pi-1/web", "--tail", "-2"},
		{"logs", "pi-1/web", "web", "extra"},
		{"logs", "pi-1/web", "-l", "site=lab"},
		{"logs", "pi-1/Web"},
		{"logs", "deployment/web", "-l", "site=="},
	} {
		if r := e.run("", bad...); r.code != 1 || !strings.HasPrefix(r.stderr, "error: ") {
			t.Errorf("%v: %+v", bad, r)
		}
	}
}

// notifyBuffer is an io.Writer tests can read while the CLI writes it.
type notifyBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	hit chan struct{}
	// want closes hit once the output contains it.
	want string
}

func (s *notifyBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := s.b.Write(p)
	if s.want != "" && strings.Contains(s.b.String(), s.want) {
		s.want = ""
		close(s.hit)
	}
	return n, nil
}

func (s *notifyBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Ctrl-C (the end of the command's context) ends -f cleanly: exit 0.
func TestLogsFollowEndsCleanlyOnInterrupt(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	hubSawEnd := make(chan struct{})
	rh.logs = func(w http.ResponseWriter, r *http.Request, device, pod string) {
		if r.URL.Query().Get("follow") != "true" {
			statusJSON(w, 400, "BadRequest", "want follow")
			return
		}
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(hubSawEnd)
	}
	for _, prefix := range []bool{false, true} {
		hubSawEnd = make(chan struct{})
		out := &notifyBuffer{hit: make(chan struct{}), want: "first\n"}
		var errb bytes.Buffer
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		args := []string{"logs", "-f", "pi-1/web"}
		if prefix {
			args = append(args, "--prefix")
		}
		go func() {
			done <- run(ctx, args, stdio{in: strings.NewReader(""), out: out, err: &errb, getenv: func(k string) string { return e.vars[k] }, workDir: e.dir})
		}()
		select {
		case <-out.hit:
		case <-time.After(10 * time.Second):
			t.Fatal("the first line did not arrive")
		}
		cancel()
		select {
		case err := <-done:
			if exitCode(err) != 0 || errb.Len() != 0 {
				t.Errorf("interrupted -f: %v, stderr %q", err, errb.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("fleet logs -f did not end after the interrupt")
		}
		select {
		case <-hubSawEnd:
		case <-time.After(10 * time.Second):
			t.Fatal("the hub's stream was not closed")
		}
		want := "first\n"
		if prefix {
			want = "[pi-1/web] first\n"
		}
		if out.String() != want {
			t.Errorf("output %q, want %q", out.String(), want)
		}
	}
}

// deployment/NAME reads every device that runs the pod; every line is
// whole and prefixed even when the devices send partial lines at once.
func TestLogsDeploymentPrefixesWholeLines(t *testing.T) {
	e, rh := newRemoteEnv(t)
	threeDevices(e)
	var mu sync.Mutex
	var asked []string
	// Every healthy stream sends a partial line, then waits for the
	// others to have sent theirs, so that partial lines are pending
	// together.
	var partial sync.WaitGroup
	partial.Add(2)
	allPartial := make(chan struct{})
	go func() { partial.Wait(); close(allPartial) }()
	rh.logs = func(w http.ResponseWriter, r *http.Request, device, pod string) {
		mu.Lock()
		asked = append(asked, device+"/"+pod+"/"+r.URL.Query().Get("container"))
		mu.Unlock()
		if device == "pi-2" {
			statusJSON(w, 504, "GatewayTimeout", "device pi-2 did not answer within 10s")
			return
		}
		io.WriteString(w, "hel")
		w.(http.Flusher).Flush()
		partial.Done()
		select {
		case <-allPartial:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "lo from "+device+"\nsecond")
		w.(http.Flusher).Flush()
		io.WriteString(w, " line\nno newline at the end")
	}
	r := e.run("", "logs", "deployment/web")
	if r.code != 1 {
		t.Fatalf("a failed device must give exit 1: %+v", r)
	}
	slices.Sort(asked)
	if strings.Join(asked, " ") != "pi-1/web/web pi-2/web/web pi-3/web/web" {
		t.Errorf("asked %v", asked)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	slices.Sort(lines)
	want := []string{
		"[pi-1/web/web] hello from pi-1",
		"[pi-1/web/web] no newline at the end",
		"[pi-1/web/web] second line",
		"[pi-3/web/web] hello from pi-3",
		"[pi-3/web/web] no newline at the end",
		"[pi-3/web/web] second line",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	// The lines of one device keep their order.
	if i, j := strings.Index(r.stdout, "[pi-1/web/web] hello"), strings.Index(r.stdout, "[pi-1/web/web] second"); i < 0 || j < i {
		t.Errorf("order of pi-1's lines:\n%s", r.stdout)
	}
	if r.stderr != "[pi-2/web/web] Error from server (GatewayTimeout): device pi-2 did not answer within 10s\n" {
		t.Errorf("stderr %q", r.stderr)
	}

	// -l narrows the devices: pi-3 (site=shop) is left out, and -c names
	// the container.
	partial = sync.WaitGroup{}
	partial.Add(1)
	allPartial = make(chan struct{})
	go func() { partial.Wait(); close(allPartial) }()
	asked = nil
	rh.logs = func(w http.ResponseWriter, r *http.Request, device, pod string) {
		mu.Lock()
		asked = append(asked, device+"/"+pod+"/"+r.URL.Query().Get("container"))
		mu.Unlock()
		io.WriteString(w, "x\n")
	}
	r = e.run("", "logs", "deploy/web", "-l", "site=lab", "-c", "web", "--max-log-requests", "1")
	slices.Sort(asked)
	if r.code != 0 || r.stdout != "[pi-1/web/web] x\n[pi-2/web/web] x\n" && r.stdout != "[pi-2/web/web] x\n[pi-1/web/web] x\n" || strings.Join(asked, " ") != "pi-1/web/web pi-2/web/web" {
		t.Errorf("-l site=lab: %+v, asked %v", r, asked)
	}
	// Following more logs than --max-log-requests is refused up front.
	r = e.run("", "logs", "deployment/web", "-f", "--max-log-requests", "2")
	if r.code != 1 || !strings.Contains(r.stderr, "follow 3 logs, but --max-log-requests is 2") {
		t.Errorf("too many to follow: %+v", r)
	}
	r = e.run("", "logs", "deployment/nope")
	if r.code != 1 || !strings.Contains(r.stderr, "no device runs deployment nope") {
		t.Errorf("unknown deployment: %+v", r)
	}
}
