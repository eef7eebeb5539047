package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/enroll"
)

// checkLines runs `fleet-agent check` with args and returns its output and
// error. The real-broker, real-containerd runs are in test/ (agent_check).
func checkLines(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(append([]string{"check", "--timeout", "2s"}, args...), &out, &out)
	return out.String(), err
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestCheckReportsEveryProblem(t *testing.T) {
	state := t.TempDir()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("secret-token-value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := checkLines(t, "--device", "pi-1", "--token-file", token, "--state-dir", state,
		"--containerd-socket", filepath.Join(state, "no.sock"), "--broker", "tcp://"+closedPort(t))
	if err == nil || err.Error() != "4 of 7 checks failed" {
		t.Fatalf("err = %v, want 4 of 7 checks failed\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^ok +config +broker tcp://127\.0\.0\.1:\d+, topic prefix fleet/v1, containerd namespace fleet$`,
		`(?m)^warn +identity +device pi-1, token from .*token, which others can read \(mode 0644\): chmod 600 it$`,
		`(?m)^ok +state dir +.* writable; no desired state persisted yet$`,
		`(?m)^FAIL +signing key +none pinned: the agent runs nothing from the broker; start it with --join`,
		`(?m)^FAIL +containerd +stat .*no\.sock: no such file or directory \(is containerd installed and running\?`,
		`(?m)^FAIL +broker +tcp://127\.0\.0\.1:\d+ as pi-1: .*connection refused`,
		`(?m)^FAIL +desired state +not checked: no connection to the broker$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret-token-value") {
		t.Errorf("the token is printed:\n%s", out)
	}
	// It changed nothing: the state dir is as it was.
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("the state dir holds %v after the check", entries)
	}
}

func TestCheckIdentity(t *testing.T) {
	enrolled := t.TempDir()
	if err := os.WriteFile(filepath.Join(enrolled, enroll.DeviceFile), []byte("pi-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(enrolled, enroll.TokenFile), []byte("device-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bootstrap := writeFile(t, "bt", "abcdef.0123456789abcdefghijklmnopqrstuv")
	nowhere := "tcp://" + closedPort(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"enrolled earlier", []string{"--state-dir", enrolled},
			`(?m)^ok +identity +device pi-7, token saved at enrollment in .*token$`},
		{"enrolled as another device", []string{"--state-dir", enrolled, "--device", "pi-8", "--bootstrap-token-file", bootstrap},
			`(?m)^FAIL +identity +the state dir .* holds the token of device "pi-7", enrolled earlier, not of --device pi-8$`},
		{"waiting to enroll", []string{"--state-dir", t.TempDir(), "--device", "pi-9", "--bootstrap-token-file", bootstrap},
			`(?m)^warn +identity +not enrolled yet: at start the agent enrolls as pi-9 with the bootstrap token`},
		{"waiting to enroll: the broker is only dialled", []string{"--state-dir", t.TempDir(), "--device", "pi-9", "--bootstrap-token-file", bootstrap},
			`(?m)^FAIL +broker +tcp://127\.0\.0\.1:\d+: dial tcp .*connection refused$`},
		{"no token at all", []string{"--state-dir", t.TempDir(), "--device", "pi-1"},
			`(?m)^FAIL +identity +device pi-1 has no token: give --token-file, or a bootstrap token to enroll`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := checkLines(t, append(tc.args, "--broker", nowhere, "--containerd-socket", "/nonexistent.sock")...)
			if err == nil {
				t.Fatalf("no error with containerd and the broker away:\n%s", out)
			}
			if !regexp.MustCompile(tc.want).MatchString(out) {
				t.Errorf("no line matching %s in\n%s", tc.want, out)
			}
		})
	}
}

func TestCheckStateDir(t *testing.T) {
	nowhere := "tcp://" + closedPort(t)
	corrupt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(corrupt, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	desired := filepath.Join(corrupt, "v1", "desired.json")
	if err := os.WriteFile(desired, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := writeFile(t, "file", "x")
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "new"), `(?m)^warn +state dir +.*new does not exist yet: the agent creates it \(0700\) at start$`},
		{"not a directory", notDir, `(?m)^FAIL +state dir +.*file is not a directory$`},
		{"corrupt desired state", corrupt, `(?m)^warn +state dir +.* writable, but desired\.json: .*: at start the agent moves a corrupt file aside`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := checkLines(t, "--device", "pi-1", "--token", "x", "--state-dir", tc.dir, "--broker", nowhere, "--containerd-socket", "/nonexistent.sock")
			if !regexp.MustCompile(tc.want).MatchString(out) {
				t.Errorf("no line matching %s in\n%s", tc.want, out)
			}
		})
	}
	// Inspecting left the corrupt file where it was.
	if _, err := os.Stat(desired); err != nil {
		t.Errorf("the corrupt desired state was moved: %v", err)
	}
}

func TestCheckRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "pi-1", "--token", "x", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--device", "pi-1", "--token", "x", "--release-startup-pages", "soon"}, "--release-startup-pages"},
		{[]string{"--device", "pi-1", "--token", "x", "--broker", "http://hub"}, "scheme must be tcp"},
	} {
		out, err := checkLines(t, append(tc.args, "--containerd-socket", "/nonexistent.sock", "--state-dir", t.TempDir())...)
		if err == nil || !strings.Contains(out+err.Error(), tc.want) {
			t.Errorf("check %v: err %v, output\n%s\nwant %q", tc.args, err, out, tc.want)
		}
	}
}
