package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

func TestLogsTailLimitPreviousAndErrors(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.container("multi", "a")
	e.container("multi", "b")
	e.ackAll()
	p := e.logPath("web", "app")
	e.writeLog(p+".1", "r1\nr2\n", false)
	e.writeLog(p, "l1\nl2\nl3", false) // the last line has no newline yet
	e.writeLog(p+".previous", "old1\nold2\n", false)

	for _, tc := range []struct {
		name string
		lo   schema.LogOptions
		want string
	}{
		{"all", schema.LogOptions{Pod: "web"}, "r1\nr2\nl1\nl2\nl3"},
		{"tail 2", schema.LogOptions{Pod: "web", Container: "app", TailLines: ptr[int64](2)}, "l2\nl3"},
		{"tail into .1", schema.LogOptions{Pod: "web", TailLines: ptr[int64](4)}, "r2\nl1\nl2\nl3"},
		{"tail 0", schema.LogOptions{Pod: "web", TailLines: ptr[int64](0)}, ""},
		{"limit", schema.LogOptions{Pod: "web", LimitBytes: 5}, "r1\nr2"},
		{"previous", schema.LogOptions{Pod: "web", Previous: true}, "old1\nold2\n"},
		{"previous tail", schema.LogOptions{Pod: "web", Previous: true, TailLines: ptr[int64](1)}, "old2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID()
			e.logs(id, tc.lo)
			rs := e.pub.done(id)
			if got := text(t, rs); got != tc.want {
				t.Errorf("logs = %q, want %q", got, tc.want)
			}
			if d := rs[len(rs)-1]; d.Code != "" {
				t.Errorf("done = %+v", d)
			}
		})
	}

	for _, tc := range []struct {
		name     string
		lo       schema.LogOptions
		code     string
		contains string
	}{
		{"unknown pod", schema.LogOptions{Pod: "nope"}, schema.CodeNotFound, "pod nope not found on device pi-1"},
		{"unknown container", schema.LogOptions{Pod: "multi", Container: "x"}, schema.CodeNotFound, "pod multi has no container x; it has: a, b"},
		{"ambiguous", schema.LogOptions{Pod: "multi"}, schema.CodeBadRequest, "pod multi has 2 containers (a, b): name one"},
		{"no previous", schema.LogOptions{Pod: "multi", Container: "a", Previous: true}, schema.CodeNotFound, "no previous log of multi/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID()
			e.logs(id, tc.lo)
			rs := e.pub.done(id)
			d := rs[len(rs)-1]
			if len(rs) != 1 || d.Code != tc.code || !strings.Contains(d.Error, tc.contains) {
				t.Errorf("done = %s, want %s %q", dump(rs), tc.code, tc.contains)
			}
		})
	}
}

func TestLogsSinceAndTimestamps(t *testing.T) {
	var mu = make(chan time.Time, 1)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mu <- t0
	now := func() time.Time { v := <-mu; mu <- v; return v }
	set := func(v time.Time) { <-mu; mu <- v }
	e := newEnv(t, func(o *Options) { o.Now = now })
	e.container("web", "app")
	e.ackAll()
	p := e.logPath("web", "app")
	e.writeLog(p, "old\n", false)
	e.srv.index.Sample(p, t0) // the agent's sampler saw "old" at t0
	e.writeLog(p, "new1\nnew2\n", true)
	set(t0.Add(10 * time.Minute)) // and the rest when the request came

	id := newID()
	e.logs(id, schema.LogOptions{Pod: "web", SinceSeconds: 60, Timestamps: true})
	got := text(t, e.pub.done(id))
	ts := t0.Add(10 * time.Minute).Format(time.RFC3339Nano)
	if want := ts + " new1\n" + ts + " new2\n"; got != want {
		t.Errorf("since 60 s = %q, want %q", got, want)
	}
	id = newID()
	e.logs(id, schema.LogOptions{Pod: "web", Timestamps: true, TailLines: ptr[int64](3)})
	got = text(t, e.pub.done(id))
	if want := t0.Format(time.RFC3339Nano) + " old\n" + ts + " new1\n" + ts + " new2\n"; got != want {
		t.Errorf("timestamps = %q, want %q", got, want)
	}
}

func TestLogsFollowRotationAndRestart(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.ackAll()
	p := e.logPath("web", "app")
	e.writeLog(p, "a\n", false)
	id := newID()
	e.logs(id, schema.LogOptions{Pod: "web", Follow: true})
	joined := func(rs []*schema.Response) string {
		var b strings.Builder
		for _, r := range rs {
			b.Write(r.Data)
		}
		return b.String()
	}
	wait := func(want string) {
		t.Helper()
		e.pub.await("follow "+want, id, func(rs []*schema.Response) bool { return joined(rs) == want })
	}
	wait("a\n")
	e.writeLog(p, "b\n", true)
	wait("a\nb\n")
	// Copy-truncate rotation, with a line written between the read and
	// the copy: it is read from PATH.1.
	e.writeLog(p, "c\n", true)
	data, _ := os.ReadFile(p)
	e.writeLog(p+".1", string(data), false)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	e.writeLog(p, "d\n", true)
	e.pub.await("after rotation", id, func(rs []*schema.Response) bool {
		s := joined(rs)
		return strings.HasPrefix(s, "a\nb\n") && strings.HasSuffix(s, "d\n") && strings.Count(s, "c\n") == 1
	})
	// A restart: the runtime moves the log aside and the shim starts a
	// new file; following goes on.
	before := joined(e.pub.of(id))
	e.writeLog(p, "e\n", true)
	if err := os.Rename(p, p+".previous"); err != nil {
		t.Fatal(err)
	}
	e.writeLog(p, "f\n", false)
	wait(before + "e\nf\n")
	e.send(schema.Request{ID: id, Op: schema.OpCancel})
	rs := e.pub.done(id)
	if d := rs[len(rs)-1]; d.Code != "" {
		t.Errorf("done after cancel = %+v", d)
	}
	text(t, rs)
}

func TestLogsWindowAndLease(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Lease = 500 * time.Millisecond })
	e.container("web", "app")
	p := e.logPath("web", "app")
	line := strings.Repeat("x", 1023) + "\n"
	e.writeLog(p, strings.Repeat(line, 20*16), false) // 20 chunks of 16 KiB
	id := newID()
	e.send(schema.Request{ID: id, Op: schema.OpLogs, Window: 3, Logs: &schema.LogOptions{Pod: "web"}})
	// Without acks the device stops at the window.
	// (An overrun would also show in the final count below: 5 data
	// responses for acks up to 2 and a window of 3.)
	rs := e.pub.await("window", id, func(rs []*schema.Response) bool { return len(rs) >= 3 })
	if len(rs) != 3 {
		t.Fatalf("sent %d responses unacknowledged, window 3", len(rs))
	}
	// Acks open the window by as much as they acknowledge.
	e.ack(id, 2)
	e.pub.await("after ack 2", id, func(rs []*schema.Response) bool { return len(rs) == 5 })
	// Then silence: the lease expires and the stream ends with Timeout.
	rs = e.pub.done(id)
	if d := rs[len(rs)-1]; d.Code != schema.CodeTimeout {
		t.Fatalf("done = %+v, want Timeout", d)
	}
	if len(rs) != 6 {
		t.Fatalf("%d responses, want 5 data and a Done", len(rs))
	}
	text(t, rs)
}

func TestLogsRetryAcrossOutage(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.ackAll()
	p := e.logPath("web", "app")
	var want strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&want, "line %04d %s\n", i, strings.Repeat("y", 40))
	}
	e.writeLog(p, want.String(), false)
	e.pub.setDown(true)
	id := newID()
	e.logs(id, schema.LogOptions{Pod: "web"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.pub.mu.Lock()
		n := e.pub.attempts
		e.pub.mu.Unlock()
		if n >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no retries while down")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	e.pub.setDown(false)
	if got := text(t, e.pub.done(id)); got != want.String() {
		t.Fatalf("after the outage got %d bytes, want %d", len(got), want.Len())
	}
}

func TestRequestsIgnoredAndRefused(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.srv.Handle([]byte("{not json"))
	e.send(schema.Request{ID: newID(), Device: "pi-2", Op: schema.OpTop})
	e.send(schema.Request{ID: newID(), Op: schema.OpTop, Deadline: time.Now().Add(-time.Second)})
	e.send(schema.Request{ID: newID(), Op: schema.OpAck, Ack: 3})
	// Eight follows (no acks needed: the log is empty) fill the device.
	var ids []string
	for range schema.MaxConcurrentRequests {
		id := newID()
		ids = append(ids, id)
		e.logs(id, schema.LogOptions{Pod: "web", Follow: true})
	}
	e.logs(ids[0], schema.LogOptions{Pod: "web", Follow: true}) // a live ID again
	extra := newID()
	e.send(schema.Request{ID: extra, Op: schema.OpTop})
	rs := e.pub.done(extra)
	if d := rs[0]; len(rs) != 1 || d.Code != schema.CodeTooManyRequests {
		t.Fatalf("ninth request = %s", dump(rs))
	}
	st := e.srv.Stats()
	if st.Unauthenticated != 2 || st.OtherDevice != 1 || st.Late != 1 || st.Unknown != 1 || st.Duplicate != 1 || st.Refused != 1 || st.Started != 8 {
		t.Fatalf("stats = %+v", st)
	}
	for _, id := range ids {
		e.send(schema.Request{ID: id, Op: schema.OpCancel})
		e.pub.done(id)
	}
	if rs := e.pub.of(newID()); len(rs) != 0 {
		t.Fatal("responses to nothing")
	}
}

func TestExecStream(t *testing.T) {
	e := newEnv(t)
	id0 := e.container("web", "app")
	e.ackAll()
	sizes := make(chan runtime.TermSize, 4)
	e.rt.SetExecStreamHandler(func(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
		if id != id0 || strings.Join(o.Cmd, " ") != "sh -c cat" {
			return -1, fmt.Errorf("unexpected exec %s %v", id, o.Cmd)
		}
		if o.Size != nil {
			sizes <- *o.Size
		}
		go func() {
			for sz := range o.Resize {
				sizes <- sz
			}
		}()
		in, err := io.ReadAll(o.Stdin)
		if err != nil {
			return -1, err
		}
		fmt.Fprintf(o.Stdout, "got %s", in)
		fmt.Fprint(o.Stderr, "warn")
		return 3, nil
	})
	id := newID()
	e.send(schema.Request{ID: id, Op: schema.OpExec, Exec: &schema.ExecOptions{
		Pod: "web", Command: []string{"sh", "-c", "cat"}, Stdin: true, TTY: true, Size: &schema.TermSize{Cols: 80, Rows: 24},
	}})
	rs := e.pub.await("started", id, func(rs []*schema.Response) bool { return len(rs) >= 1 })
	if r := rs[0]; r.Seq != 1 || r.Done || len(r.Data) != 0 {
		t.Fatalf("first exec response = %s", dump(rs))
	}
	if sz := <-sizes; sz != (runtime.TermSize{Cols: 80, Rows: 24}) {
		t.Errorf("initial size %+v", sz)
	}
	e.send(schema.Request{ID: id, Op: schema.OpResize, Size: &schema.TermSize{Cols: 100, Rows: 30}})
	if sz := <-sizes; sz != (runtime.TermSize{Cols: 100, Rows: 30}) {
		t.Errorf("resized to %+v", sz)
	}
	// Input out of order is put back in order by its Seq.
	e.send(schema.Request{ID: id, Op: schema.OpStdin, Seq: 2, Data: []byte("world"), EOF: true})
	e.send(schema.Request{ID: id, Op: schema.OpStdin, Seq: 1, Data: []byte("hello ")})
	rs = e.pub.done(id)
	text(t, rs)
	var out, errOut string
	for _, r := range rs {
		switch r.Stream {
		case schema.StreamStdout:
			out += string(r.Data)
		case schema.StreamStderr:
			errOut += string(r.Data)
		}
	}
	d := rs[len(rs)-1]
	if out != "got hello world" || errOut != "warn" || d.ExitCode == nil || *d.ExitCode != 3 || d.Code != "" {
		t.Fatalf("exec = %q %q, done %s", out, errOut, dump(rs[len(rs)-1:]))
	}

	// A stopped container.
	if err := e.rt.Stop(context.Background(), id0, 0); err != nil {
		t.Fatal(err)
	}
	id = newID()
	e.send(schema.Request{ID: id, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web", Command: []string{"ls"}}})
	rs = e.pub.done(id)
	if d := rs[0]; len(rs) != 1 || d.Code != schema.CodeNotRunning || !strings.Contains(d.Error, "web/app") {
		t.Fatalf("exec in a stopped container = %s", dump(rs))
	}
}

func TestExecCancelKills(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.ackAll()
	killed := make(chan struct{})
	e.rt.SetExecStreamHandler(func(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
		<-ctx.Done()
		close(killed)
		return -1, ctx.Err()
	})
	id := newID()
	e.send(schema.Request{ID: id, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web", Command: []string{"sleep", "1000"}}})
	e.pub.await("started", id, func(rs []*schema.Response) bool { return len(rs) == 1 })
	e.send(schema.Request{ID: id, Op: schema.OpCancel})
	<-killed
	rs := e.pub.done(id)
	if d := rs[len(rs)-1]; d.ExitCode != nil || d.Error == "" {
		t.Fatalf("done after cancel = %s", dump(rs))
	}
}

func TestTop(t *testing.T) {
	e := newEnv(t)
	id0 := e.container("web", "app")
	e.container("db", "pg")
	if err := e.rt.Stop(context.Background(), "db-pg", 0); err != nil {
		t.Fatal(err)
	}
	e.rt.SetStats(id0, runtime.ContainerStats{CPUUsageNanos: 1e9, MemoryBytes: 100 << 20, MemoryWorkingSetBytes: 80 << 20, MemoryLimitBytes: 256 << 20, PIDs: 3})
	id := newID()
	e.send(schema.Request{ID: id, Op: schema.OpTop})
	rs := e.pub.done(id)
	r := rs[0]
	if len(rs) != 1 || r.Top == nil || r.Code != "" {
		t.Fatalf("top = %s", dump(rs))
	}
	if r.Top.Device != "pi-1" || r.Top.Kind != "TopReport" || r.Top.Node.CPUs != 4 || len(r.Top.Containers) != 1 {
		t.Fatalf("top = %s", dump(rs))
	}
	c := r.Top.Containers[0]
	if c.Pod != "web" || c.Container != "app" || c.MemoryLimitBytes != 256<<20 || c.MemoryWorkingSetBytes != 80<<20 || c.PIDs != 3 || c.CPUMillicores != nil {
		t.Fatalf("container metrics = %+v", c)
	}
	// The second measurement has a rate.
	time.Sleep(20 * time.Millisecond) // the Fake stamps Stats with the real clock
	e.rt.SetStats(id0, runtime.ContainerStats{CPUUsageNanos: 2e9})
	id = newID()
	e.send(schema.Request{ID: id, Op: schema.OpTop})
	rs = e.pub.done(id)
	if c := rs[0].Top.Containers[0]; c.CPUMillicores == nil || *c.CPUMillicores <= 0 {
		t.Fatalf("second top = %s", dump(rs))
	}
}

// TestGoroutinesEnd: operations of every kind, ended every way, leave
// no goroutine behind, and neither does stopping the server.
func TestGoroutinesEnd(t *testing.T) {
	base := goruntime.NumGoroutine()
	func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pub := newFakePub(t)
		rt := runtime.NewFake(runtime.FakeOptions{})
		dir := t.TempDir()
		srv, err := New(Options{Device: "pi-1", Publisher: pub, Runtime: rt, Key: hubPub, Lease: 200 * time.Millisecond,
			LogPath:        func(pod, c string) string { return dir + "/" + pod + "-" + c + ".log" },
			Node:           func(context.Context) schema.NodeMetrics { return schema.NodeMetrics{} },
			FollowInterval: 10 * time.Millisecond, IndexInterval: 10 * time.Millisecond,
			Pods: func() map[string][]string { return map[string][]string{"web": {"app"}} }})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = srv.Run(ctx); close(done) }()
		for srv.stopping() {
			time.Sleep(time.Millisecond) // polling; Run starts at once
		}
		e := &env{t: t, pub: pub, rt: rt, srv: srv, dir: dir}
		e.container("web", "app")
		rt.SetExecStreamHandler(func(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
			_, err := io.Copy(o.Stdout, o.Stdin)
			return 0, err
		})
		leased := newID() // never acked: the lease ends it
		e.logs(leased, schema.LogOptions{Pod: "web", Follow: true})
		e.send(schema.Request{ID: newID(), Op: schema.OpTop})
		stuck := newID() // an exec whose input never ends: Run's end ends it
		e.send(schema.Request{ID: stuck, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web", Command: []string{"cat"}, Stdin: true}})
		pub.done(leased)
		pub.await("exec started", stuck, func(rs []*schema.Response) bool { return len(rs) >= 1 })
		cancel()
		<-done
		if n := srv.Live(); n != 0 {
			t.Fatalf("%d operations live after Run", n)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := goruntime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", n, base, buf[:goruntime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}
