package selfupdate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// The test binary doubles as the agent in trial: with helperEnv set it
// plays the new agent (report, exit or hang) instead of running tests.
const helperEnv = "SELFUPDATE_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "report":
		r, err := TrialReporter()
		if err != nil || r == nil {
			fmt.Fprintln(os.Stderr, "no trial reporter:", err)
			os.Exit(2)
		}
		r.Adopted()
		r.Connected()
		r.Reported()
		time.Sleep(time.Minute) // until Trial stops it
	case "exit":
		fmt.Fprintln(os.Stderr, "fleet-agent: unknown flag --frobnicate")
		os.Exit(3)
	case "connect-only":
		r, _ := TrialReporter()
		r.Connected()
		time.Sleep(time.Minute)
	case "hang":
		time.Sleep(time.Minute)
	}
	os.Exit(0)
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// fakeFetcher serves one file per image, counting fetches.
type fakeFetcher struct {
	mu    sync.Mutex
	files map[string][]byte
	err   error
	calls int
}

func (f *fakeFetcher) ReadImageFile(_ context.Context, image, path string, w io.Writer) (int64, error) {
	f.mu.Lock()
	f.calls++
	b, ok := f.files[image]
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if !ok || path != BinaryPath {
		return 0, fmt.Errorf("%s: no %s", image, path)
	}
	n, err := w.Write(b)
	return int64(n), err
}

var _ Fetcher = (*fakeFetcher)(nil)

// newLayout makes a layout whose current is v1.4.0, a copy of exe.
func newLayout(t *testing.T) (Layout, string) {
	t.Helper()
	l := Layout{Dir: t.TempDir()}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Stage("v1.4.0", digestOf(self), bytes.NewReader(self)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCurrent("v1.4.0"); err != nil {
		t.Fatal(err)
	}
	return l, l.Binary("v1.4.0")
}

func TestLayoutStage(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	bin := []byte("#!/bin/sh\nexit 0\n")
	if _, err := l.Stage("v1.5.0", digestOf([]byte("other")), bytes.NewReader(bin)); !errors.Is(err, ErrDigest) {
		t.Fatalf("wrong digest: err %v, want ErrDigest", err)
	}
	if ents, _ := os.ReadDir(l.Dir); len(ents) != 0 {
		t.Fatalf("a refused binary left %v behind", ents)
	}
	if _, err := l.Stage("../evil", digestOf(bin), bytes.NewReader(bin)); err == nil {
		t.Fatal("a version that is a path was staged")
	}
	n, err := l.Stage("v1.5.0", digestOf(bin), bytes.NewReader(bin))
	if err != nil || n != int64(len(bin)) {
		t.Fatalf("stage: %d, %v", n, err)
	}
	if fi, err := os.Stat(l.Binary("v1.5.0")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("staged binary: %v, %v; want mode 0755", fi, err)
	}
	if !l.Staged("v1.5.0", digestOf(bin)) || l.Staged("v1.5.0", digestOf([]byte("x"))) {
		t.Fatal("Staged does not check the digest")
	}
	if err := l.SetCurrent("v1.4.0"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetNext("v1.5.0"); err != nil {
		t.Fatal(err)
	}
	if v, _ := l.NextVersion(); v != "v1.5.0" {
		t.Fatalf("next %q", v)
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	cur, _ := l.CurrentVersion()
	next, _ := l.NextVersion()
	if cur != "v1.5.0" || next != "" {
		t.Fatalf("after commit: current %q next %q", cur, next)
	}
}

func TestLayoutCheck(t *testing.T) {
	l, exe := newLayout(t)
	if err := l.Check(exe); err != nil {
		t.Fatalf("the current binary: %v", err)
	}
	if err := l.Check(os.Args[0]); !errors.Is(err, ErrNoLayout) {
		t.Fatalf("a binary outside the layout: %v, want ErrNoLayout", err)
	}
	if err := (Layout{Dir: t.TempDir()}).Check(exe); !errors.Is(err, ErrNoLayout) {
		t.Fatalf("no current: %v, want ErrNoLayout", err)
	}
}

func newUpdater(t *testing.T, l Layout, exe, version string, f Fetcher) (*Updater, string) {
	t.Helper()
	dir := t.TempDir()
	u, err := New(Options{Layout: l, StateDir: dir, Version: version, Fetcher: f, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	return u, dir
}

func TestUpdaterStagesVerifiedBinary(t *testing.T) {
	l, exe := newLayout(t)
	bin := []byte("new agent")
	f := &fakeFetcher{files: map[string][]byte{"reg/agent:v1.5.0": bin}}
	u, dir := newUpdater(t, l, exe, "v1.4.0", f)
	u.Desired(&schema.DesiredAgent{Version: "v1.5.0", Image: "reg/agent:v1.5.0", Digest: digestOf(bin)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go u.Run(ctx)
	select {
	case s := <-u.Ready():
		if s.Version != "v1.5.0" || s.Previous != "v1.4.0" {
			t.Fatalf("staged %+v", s)
		}
	case <-ctx.Done():
		t.Fatalf("nothing staged: status %+v", u.Status())
	}
	if v, _ := l.NextVersion(); v != "v1.5.0" {
		t.Fatalf("next %q, want v1.5.0", v)
	}
	if cur, _ := l.CurrentVersion(); cur != "v1.4.0" {
		t.Fatalf("current %q moved before the trial", cur)
	}
	rec, err := LoadRecord(dir)
	if err != nil || rec == nil || rec.Phase != schema.AgentUpgradeTrial || rec.Trials != 1 {
		t.Fatalf("record %+v, %v; want Trial, 1 trial", rec, err)
	}
}

func TestUpdaterRefuses(t *testing.T) {
	bin := []byte("new agent")
	for _, tt := range []struct {
		name    string
		desired schema.DesiredAgent
		exe     func(l Layout, exe string) string
		want    string
	}{
		{"digest mismatch", schema.DesiredAgent{Version: "v1.5.0", Image: "reg/agent:v1.5.0", Digest: digestOf([]byte("signed"))}, nil, "digest mismatch"},
		{"no digest", schema.DesiredAgent{Version: "v1.5.0", Image: "reg/agent:v1.5.0"}, nil, "no digest"},
		{"not in a layout", schema.DesiredAgent{Version: "v1.5.0", Image: "reg/agent:v1.5.0", Digest: digestOf(bin)},
			func(Layout, string) string { return os.Args[0] }, "not installed in an upgrade layout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, exe := newLayout(t)
			if tt.exe != nil {
				exe = tt.exe(l, exe)
			}
			f := &fakeFetcher{files: map[string][]byte{"reg/agent:v1.5.0": bin}}
			u, dir := newUpdater(t, l, exe, "v1.4.0", f)
			u.Desired(&tt.desired)
			if s, err := u.step(context.Background()); s != nil || err != nil {
				t.Fatalf("step: %+v, %v; want a refusal", s, err)
			}
			st := u.Status()
			if st == nil || st.Phase != schema.AgentUpgradeFailed || !strings.Contains(st.Message, tt.want) {
				t.Fatalf("status %+v; want Failed saying %q", st, tt.want)
			}
			if _, err := os.Stat(l.Binary("v1.5.0")); !os.IsNotExist(err) {
				t.Fatalf("a refused binary is in the layout: %v", err)
			}
			calls := f.calls
			u2, err := New(Options{Layout: l, StateDir: dir, Version: "v1.4.0", Fetcher: f, Exe: exe})
			if err != nil {
				t.Fatal(err)
			}
			u2.Desired(&tt.desired)
			if s, _ := u2.step(context.Background()); s != nil || f.calls != calls || u2.Status().Phase != schema.AgentUpgradeFailed {
				t.Fatalf("after a restart the refused version was tried again (fetches %d→%d)", calls, f.calls)
			}
			// The desired state names the running agent again: forgotten.
			u2.Desired(&schema.DesiredAgent{Version: "v1.4.0"})
			u2.step(context.Background())
			if u2.Status() != nil {
				t.Fatalf("status %+v after the desired state named this agent", u2.Status())
			}
		})
	}
}

func TestUpdaterRetriesFetch(t *testing.T) {
	l, exe := newLayout(t)
	f := &fakeFetcher{err: errors.New("registry unreachable")}
	u, _ := newUpdater(t, l, exe, "v1.4.0", f)
	u.Desired(&schema.DesiredAgent{Version: "v1.5.0", Image: "reg/agent:v1.5.0", Digest: digestOf([]byte("x"))})
	if _, err := u.step(context.Background()); err == nil || !strings.Contains(err.Error(), "registry unreachable") {
		t.Fatalf("step: %v, want the fetch error (retried)", err)
	}
	if st := u.Status(); st == nil || st.Phase != schema.AgentUpgradeDownloading {
		t.Fatalf("status %+v, want Downloading", st)
	}
}

// TestUpdaterSettles: what a new process makes of the record a previous
// one left.
func TestUpdaterSettles(t *testing.T) {
	for _, tt := range []struct {
		name    string
		version string // this process's
		trials  int
		want    schema.AgentUpgradePhase
	}{
		{"the new agent after its trial", "v1.5.0", 1, schema.AgentUpgradeUpdated},
		{"the previous agent after an interrupted trial", "v1.4.0", 1, schema.AgentUpgradeTrial},
		{"the previous agent after two interrupted trials", "v1.4.0", MaxTrials, schema.AgentUpgradeFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, exe := newLayout(t)
			dir := t.TempDir()
			if err := SaveRecord(dir, &Record{Version: "v1.5.0", Digest: "sha256:x", Previous: "v1.4.0", Phase: schema.AgentUpgradeTrial, Trials: tt.trials}); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("v1.4.0", l.Next()); err != nil {
				t.Fatal(err)
			}
			u, err := New(Options{Layout: l, StateDir: dir, Version: tt.version, Fetcher: &fakeFetcher{}, Exe: exe})
			if err != nil {
				t.Fatal(err)
			}
			if st := u.Status(); st == nil || st.Phase != tt.want {
				t.Fatalf("status %+v, want %s", st, tt.want)
			}
			if _, err := os.Lstat(l.Next()); !os.IsNotExist(err) {
				t.Fatal("next left in place")
			}
		})
	}
}

// trialLayout stages the test binary as v1.5.0 and points next at it.
func trialLayout(t *testing.T) (Layout, string, Staged) {
	t.Helper()
	l, _ := newLayout(t)
	self, _ := os.ReadFile(os.Args[0])
	if err := os.Remove(l.Binary("v1.4.0")); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1.4.0", "v1.5.0"} {
		if _, err := l.Stage(v, digestOf(self), bytes.NewReader(self)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetNext("v1.5.0"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := Staged{Version: "v1.5.0", Digest: digestOf(self), Previous: "v1.4.0"}
	if err := SaveRecord(dir, &Record{Version: s.Version, Digest: s.Digest, Previous: s.Previous, Phase: schema.AgentUpgradeTrial, Trials: 1}); err != nil {
		t.Fatal(err)
	}
	return l, dir, s
}

// TestTrial runs real child processes through every outcome.
func TestTrial(t *testing.T) {
	for _, tt := range []struct {
		helper  string
		passed  bool
		current string
		reason  string
	}{
		{"report", true, "v1.5.0", ""},
		{"exit", false, "v1.4.0", "exited at start (exit status 3): fleet-agent: unknown flag --frobnicate"},
		{"hang", false, "v1.4.0", "did not connect to the broker within 1.5s"},
		{"connect-only", false, "v1.4.0", "connected but did not report its status within 1.5s"},
	} {
		t.Run(tt.helper, func(t *testing.T) {
			l, dir, s := trialLayout(t)
			var errOut bytes.Buffer
			res, err := Trial(context.Background(), TrialOptions{
				Layout: l, StateDir: dir, Staged: s, Args: []string{"-test.run=^$"},
				Env:      append(os.Environ(), helperEnv+"="+tt.helper),
				Deadline: 1500 * time.Millisecond, Stdout: io.Discard, Stderr: &errOut, StopTimeout: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Passed != tt.passed || !strings.Contains(res.Reason, tt.reason) {
				t.Fatalf("result %+v; want passed %v, reason %q", res, tt.passed, tt.reason)
			}
			if cur, _ := l.CurrentVersion(); cur != tt.current {
				t.Fatalf("current %q, want %q", cur, tt.current)
			}
			if _, err := os.Lstat(l.Next()); !os.IsNotExist(err) {
				t.Fatal("next left in place")
			}
			rec, _ := LoadRecord(dir)
			if !tt.passed && (rec == nil || rec.Phase != schema.AgentUpgradeFailed || rec.Message != res.Reason) {
				t.Fatalf("record %+v; want Failed with the reason", rec)
			}
			if tt.passed && res.MaxRSS <= 0 {
				t.Errorf("no memory figure for the trial: %+v", res)
			}
			if _, err := os.FindProcess(res.PID); err == nil && processAlive(res.PID) {
				t.Errorf("the child %d still runs", res.PID)
			}
		})
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}
