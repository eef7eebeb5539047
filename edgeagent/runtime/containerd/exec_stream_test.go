package containerd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// ttyHelper is a static program mounted into the container: it prints
// its terminal's size, then answers lines on stdin ("size" prints the
// size again, anything else is echoed) and exits 7 at end of input.
const ttyHelper = `package main

import (
	"bufio"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

func size() {
	var ws struct{ Row, Col, X, Y uint16 }
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
		fmt.Println("no tty:", e)
		return
	}
	fmt.Printf("size %d %d\n", ws.Row, ws.Col)
}

func main() {
	size()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "size" {
			size()
		} else {
			fmt.Println("echo:", sc.Text())
		}
	}
	os.Exit(7)
}
`

// buildTTYHelper compiles ttyHelper statically and returns its path.
func buildTTYHelper(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(ttyHelper), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module ttyhelper\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "ttyhelper")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build tty helper: %v\n%s", err, b)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the runtime's copy goroutines.
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

func TestExecStream(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	helper := buildTTYHelper(t)
	box := uniqueID("box")
	spec := e.spec(box, "sleep", "forever")
	spec.Mounts = append(spec.Mounts, schemaMount(filepath.Dir(helper), "/helper"))
	mustCreateStart(t, rt, spec)
	await(t, "box running", func() (bool, error) {
		c, err := rt.List(ctx)
		return err == nil && len(c) == 1 && c[0].State == runtime.StateRunning, err
	})

	t.Run("output and exit code", func(t *testing.T) {
		var out, errOut syncBuffer
		started := false
		code, err := rt.ExecStream(ctx, box, runtime.ExecStreamOptions{
			Cmd: []string{"/app", "echo", "hi", "stderr", "oops", "exit", "3"}, Stdout: &out, Stderr: &errOut,
			Started: func() { started = true },
		})
		if err != nil || code != 3 || out.String() != "hi\n" || errOut.String() != "oops\n" || !started {
			t.Fatalf("exec = %d, %q, %q, %v (started %v)", code, out.String(), errOut.String(), err, started)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		var out syncBuffer
		code, err := rt.ExecStream(ctx, box, runtime.ExecStreamOptions{
			Cmd: []string{"/app", "read", "/dev/stdin"}, Stdin: strings.NewReader("hello"), Stdout: &out,
		})
		if err != nil || code != 0 || out.String() != "read: hello\n" {
			t.Fatalf("exec with stdin = %d, %q, %v", code, out.String(), err)
		}
	})
	t.Run("tty and resize", func(t *testing.T) {
		inR, inW := io.Pipe()
		var out syncBuffer
		resize := make(chan runtime.TermSize, 1)
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			code, err := rt.ExecStream(ctx, box, runtime.ExecStreamOptions{
				Cmd: []string{"/helper/ttyhelper"}, TTY: true, Stdin: inR, Stdout: &out,
				Size: &runtime.TermSize{Cols: 80, Rows: 24}, Resize: resize,
			})
			done <- result{code, err}
		}()
		await(t, "initial size", func() (bool, error) { return strings.Contains(out.String(), "size 24 80"), nil })
		resize <- runtime.TermSize{Cols: 100, Rows: 30}
		// The resize is applied asynchronously: ask until it shows.
		await(t, "resized", func() (bool, error) {
			if _, err := inW.Write([]byte("size\n")); err != nil {
				return false, err
			}
			time.Sleep(50 * time.Millisecond) // pacing the questions
			return strings.Contains(out.String(), "size 30 100"), nil
		})
		// Ctrl-D, as a terminal sends it: end of input for the process.
		// (Closing a terminal's input hangs it up instead: SIGHUP.)
		if _, err := inW.Write([]byte{4}); err != nil {
			t.Fatal(err)
		}
		r := <-done
		inW.Close()
		if r.err != nil || r.code != 7 {
			t.Fatalf("tty exec = %d, %v; output %q", r.code, r.err, out.String())
		}
	})
	t.Run("cancel kills", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := rt.ExecStream(cctx, box, runtime.ExecStreamOptions{Cmd: []string{"/app", "sleep", "forever"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("exec past ctx = %v", err)
		}
	})
	if err := rt.Stop(ctx, box, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ExecStream(ctx, box, runtime.ExecStreamOptions{Cmd: []string{"/app"}}); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("exec in a stopped container = %v, want ErrNotRunning", err)
	}
	if _, err := rt.ExecStream(ctx, "nope", runtime.ExecStreamOptions{Cmd: []string{"/app"}}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("exec in an unknown container = %v, want ErrNotFound", err)
	}
}

func TestStatsMatchCgroup(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	capped := uniqueID("capped")
	spec := e.spec(capped, "spam", "100", "sleep", "forever")
	spec.MemoryLimitBytes = 64 << 20
	mustCreateStart(t, rt, spec)
	var st runtime.ContainerStats
	await(t, "stats", func() (bool, error) {
		var err error
		st, err = rt.Stats(ctx, capped)
		return err == nil && st.MemoryBytes > 0, err
	})
	c, err := e.client().LoadContainer(e.ctx, capped)
	if err != nil {
		t.Fatal(err)
	}
	ospec, err := c.Spec(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	cg := ospec.Linux.CgroupsPath
	var limitFile string
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes"), // v1
		filepath.Join("/sys/fs/cgroup", cg, "memory.max"),                   // v2
	} {
		if _, err := os.Stat(p); err == nil {
			limitFile = p
			break
		}
	}
	if limitFile == "" {
		t.Fatalf("no memory limit file for cgroup %s", cg)
	}
	b, err := os.ReadFile(limitFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), "67108864"; got != want {
		t.Fatalf("%s = %s, want %s", limitFile, got, want)
	}
	if st.MemoryLimitBytes != 64<<20 || st.MemoryWorkingSetBytes > st.MemoryBytes || st.CPUUsageNanos == 0 || st.PIDs == 0 {
		t.Fatalf("stats = %+v", st)
	}
	if err := rt.Stop(ctx, capped, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Stats(ctx, capped); !errors.Is(err, runtime.ErrNotRunning) {
		t.Fatalf("stats of a stopped container = %v, want ErrNotRunning", err)
	}
}

func TestPreviousLogAfterRestart(t *testing.T) {
	e := newEnv(t)
	rt := e.newRuntime(t)
	ctx := context.Background()
	crashy := uniqueID("crashy")
	spec := e.spec(crashy, "echo", "run", "exit", "1")
	spec.LogPath = filepath.Join(t.TempDir(), "crashy.log")
	exits := subscribe(t, rt)
	mustCreateStart(t, rt, spec)
	awaitExit(t, exits, crashy)
	awaitLog(t, spec.LogPath, "run\n")
	f, err := os.OpenFile(spec.LogPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("first run's last words\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := rt.Start(ctx, crashy); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, exits, crashy)
	awaitLog(t, spec.LogPath, "run\n")
	if got := readFile(spec.LogPath + ".previous"); got != "run\nfirst run's last words\n" {
		t.Errorf("previous log = %q", got)
	}
	if got := readFile(spec.LogPath); strings.Contains(got, "last words") {
		t.Errorf("current log holds the previous run: %q", got)
	}
}

func schemaMount(host, ctr string) schema.Mount {
	return schema.Mount{HostPath: host, MountPath: ctr, ReadOnly: true}
}

// uniqueID names a container of these tests: runc keeps its state by
// namespace and ID on the host, shared with other daemons' test runs.
func uniqueID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
