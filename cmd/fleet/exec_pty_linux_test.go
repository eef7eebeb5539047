package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/ptytest"
)

// fleet exec -it through a real pseudo-terminal: the terminal goes raw
// (keys such as Ctrl-D reach the command as bytes), the initial size is
// sent, a window change becomes a resize frame, the command's exit code
// is fleet's, and the terminal is restored.
func TestExecInteractiveTerminal(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", deviceYAML))
	master, slave := ptytest.Open(t)
	ptytest.SetSize(t, slave, 80, 24)
	before := ptytest.Termios(t, slave)
	if before.Lflag&unix.ECHO == 0 || before.Lflag&unix.ICANON == 0 {
		t.Fatalf("a new pty should be cooked: lflag %#x", before.Lflag)
	}

	resized := make(chan schema.TermSize, 4)
	rh.exec = func(conn net.Conn, br *bufio.Reader, r *http.Request, device, pod string) {
		q := r.URL.Query()
		if q.Get("tty") != "true" || q.Get("stdin") != "true" || q.Get("cols") != "80" || q.Get("rows") != "24" {
			execExit(conn, schema.ExecExit{ExitCode: 1, Code: schema.CodeBadRequest, Error: "query " + r.URL.RawQuery})
			return
		}
		var in bytes.Buffer
		for {
			typ, data, err := schema.ReadFrame(br, nil)
			if err != nil {
				return
			}
			switch typ {
			case schema.FrameResize:
				resized <- resizeOf(data)
			case schema.FrameStdin:
				in.Write(data)
				if bytes.Contains(in.Bytes(), []byte{4}) { // Ctrl-D, as a byte
					schema.WriteFrame(conn, schema.FrameStdout, append([]byte("got:"), in.Bytes()...))
					execExit(conn, schema.ExecExit{ExitCode: 7})
					return
				}
			}
		}
	}

	var out, errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), []string{"exec", "-it", "pi-1/web", "--", "sh"}, stdio{in: slave, out: &out, err: &errb, getenv: func(k string) string { return e.vars[k] }, workDir: e.dir})
	}()

	deadline := time.Now().Add(10 * time.Second)
	for ptytest.Termios(t, slave).Lflag&(unix.ECHO|unix.ICANON) != 0 {
		select {
		case err := <-done:
			t.Fatalf("fleet exec ended before the terminal went raw: %v, stderr %q", err, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminal did not go raw")
		}
		time.Sleep(5 * time.Millisecond) // polling the terminal's mode
	}

	ptytest.SetSize(t, slave, 100, 40)
	var got schema.TermSize
	for got != (schema.TermSize{Cols: 100, Rows: 40}) {
		if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-resized:
		case <-time.After(200 * time.Millisecond): // signal again
		}
		if time.Now().After(deadline) {
			t.Fatalf("no resize frame for 100x40 (last %+v)", got)
		}
	}

	if _, err := master.Write([]byte("hi\x04")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if exitCode(err) != 7 {
			t.Errorf("exit code %d (%v), want the command's 7; stderr %q", exitCode(err), err, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fleet exec -it did not end")
	}
	if !strings.HasPrefix(out.String(), "got:hi\x04") {
		t.Errorf("output %q", out.String())
	}
	after := ptytest.Termios(t, slave)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal not restored: lflag %#x→%#x iflag %#x→%#x oflag %#x→%#x", before.Lflag, after.Lflag, before.Iflag, after.Iflag, before.Oflag, after.Oflag)
	}
}

// The terminal is restored when the hub cuts the connection too.
func TestExecInteractiveRestoresOnError(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", deviceYAML))
	_, slave := ptytest.Open(t)
	ptytest.SetSize(t, slave, 80, 24)
	before := ptytest.Termios(t, slave)
	rh.exec = func(conn net.Conn, br *bufio.Reader, r *http.Request, device, pod string) {
		schema.WriteFrame(conn, schema.FrameStdout, []byte("bye"))
		// and close without an exit frame
	}
	err := run(t.Context(), []string{"exec", "-it", "pi-1/web", "--", "sh"}, stdio{in: slave, out: &bytes.Buffer{}, err: &bytes.Buffer{}, getenv: func(k string) string { return e.vars[k] }, workDir: e.dir})
	if exitCode(err) != 1 || err == nil || !strings.Contains(err.Error(), "ended before the command's exit status") {
		t.Errorf("cut connection: %v", err)
	}
	if after := ptytest.Termios(t, slave); after.Lflag != before.Lflag {
		t.Errorf("terminal not restored: lflag %#x→%#x", before.Lflag, after.Lflag)
	}
}
