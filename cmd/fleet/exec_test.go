package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestExecNonInteractive(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	var query string
	rh.execErr = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("container") == "stopped" {
			statusJSON(w, 409, "Conflict", "container web/stopped on device pi-1 is not running")
			return true
		}
		return false
	}
	rh.exec = func(conn net.Conn, br *bufio.Reader, r *http.Request, device, pod string) {
		query = r.URL.RawQuery
		cmd := r.URL.Query()["command"]
		switch cmd[0] {
		case "cat":
			schema.WriteFrame(conn, schema.FrameStdout, []byte(device+"\n"))
			schema.WriteFrame(conn, schema.FrameStderr, []byte("cat: a warning\n"))
			execExit(conn, schema.ExecExit{ExitCode: 3})
		case "echo-input":
			var in bytes.Buffer
			for {
				typ, data, err := schema.ReadFrame(br, nil)
				if err != nil {
					execExit(conn, schema.ExecExit{ExitCode: 1, Code: schema.CodeInternal, Error: err.Error()})
					return
				}
				if typ == schema.FrameStdinEOF {
					break
				}
				in.Write(data)
			}
			schema.WriteFrame(conn, schema.FrameStdout, in.Bytes())
			execExit(conn, schema.ExecExit{})
		default:
			execExit(conn, schema.ExecExit{ExitCode: 126, Code: schema.CodeBadRequest, Error: `exec "nope" in web/web: executable file not found in $PATH`})
		}
	}
	r := e.run("", "exec", "pi-1/web", "-c", "web", "--", "cat", "/etc/hostname")
	if r.code != 3 || r.stdout != "pi-1\n" || r.stderr != "cat: a warning\n" {
		t.Errorf("exit code: %+v", r)
	}
	if query != "command=cat&command=%2Fetc%2Fhostname&container=web" {
		t.Errorf("query %q", query)
	}
	// A flag-like argument after -- belongs to the command.
	if r := e.run("hello input", "exec", "-i", "pi-1/web", "--", "echo-input", "-l"); r.code != 0 || r.stdout != "hello input" {
		t.Errorf("-i: %+v", r)
	}
	if query != "command=echo-input&command=-l&stdin=true" {
		t.Errorf("-i query %q", query)
	}
	r = e.run("", "exec", "pi-1/web", "--", "nope")
	if r.code != 1 || r.stderr != "error: exec in pi-1/web: exec \"nope\" in web/web: executable file not found in $PATH\n" {
		t.Errorf("exec error: %+v", r)
	}
	r = e.run("", "exec", "pi-1/web", "-c", "stopped", "--", "ls")
	if r.code != 1 || r.stderr != "Error from server (Conflict): container web/stopped on device pi-1 is not running\n" {
		t.Errorf("refused: %+v", r)
	}
	r = e.run("", "exec", "pi-9/web", "--", "ls")
	if r.code != 1 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("unknown device: %+v", r)
	}
	for _, bad := range [][]string{
		{"exec", "pi-1/web", "ls"},
		{"exec", "pi-1/web", "--"},
		{"exec", "deployment/web", "--", "ls"},
		{"exec", "pi-1", "--", "ls"},
	} {
		if r := e.run("", bad...); r.code != 1 || !strings.HasPrefix(r.stderr, "error: ") {
			t.Errorf("%v: %+v", bad, r)
		}
	}
}

// -t needs a terminal on fleet's input; without one fleet says what to do
// and asks the hub nothing.
func TestExecTTYWithoutTerminal(t *testing.T) {
	e, rh := newRemoteEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", deviceYAML))
	rh.exec = func(conn net.Conn, br *bufio.Reader, r *http.Request, device, pod string) {
		t.Error("exec sent without a terminal")
	}
	for _, flags := range []string{"-t", "-it"} {
		r := e.run("", "exec", flags, "pi-1/web", "--", "sh")
		if r.code != 1 || r.stderr != "error: "+errNoTTY.Error()+"\n" || !strings.Contains(r.stderr, "leave out -t") {
			t.Errorf("%s: %+v", flags, r)
		}
	}
}

func resizeOf(data []byte) schema.TermSize {
	var s schema.TermSize
	json.Unmarshal(data, &s)
	return s
}
