package test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ggcrmutate "github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/fleetmq/fleet/edgeagent/selfupdate"
)

// agentBuilds caches the fleet-agent builds of BuildAgentVersion.
var agentBuilds struct {
	mu    sync.Mutex
	paths map[string]string
}

// BuildAgentVersion builds fleet-agent stamped with version (as make
// release stamps a release: -X schema.Version, static, stripped), once
// per test binary, and returns its path.
func BuildAgentVersion(t testing.TB, version string) string {
	t.Helper()
	if _, err := BuildBinary("fleet-agent"); err != nil { // makes binaries.dir
		t.Fatal(err)
	}
	agentBuilds.mu.Lock()
	defer agentBuilds.mu.Unlock()
	if p, ok := agentBuilds.paths[version]; ok {
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binaries.mu.Lock()
	path := filepath.Join(binaries.dir, "fleet-agent-"+version)
	binaries.mu.Unlock()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags=-s -w -X github.com/fleetmq/fleet/schema.Version="+version, "-o", path, "./cmd/fleet-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build fleet-agent %s: %v\n%s", version, err, out)
	}
	if agentBuilds.paths == nil {
		agentBuilds.paths = map[string]string{}
	}
	agentBuilds.paths[version] = path
	return path
}

// Sha256Digest is "sha256:" and the hex SHA-256 of b.
func Sha256Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// CountingRegistry is an in-memory OCI registry on a loopback port that
// counts the bytes it serves per repository.
type CountingRegistry struct {
	Host string

	mu    sync.Mutex
	bytes map[string]int64 // repository -> bytes of GET responses
}

// StartCountingRegistry starts one, stopped at the end of the test.
func StartCountingRegistry(t testing.TB) *CountingRegistry {
	t.Helper()
	r := &CountingRegistry{bytes: map[string]int64{}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		h.ServeHTTP(cw, req)
		if req.Method == http.MethodGet {
			repo := strings.TrimPrefix(req.URL.Path, "/v2/")
			for _, sep := range []string{"/manifests/", "/blobs/"} {
				if i := strings.Index(repo, sep); i >= 0 {
					repo = repo[:i]
				}
			}
			r.mu.Lock()
			r.bytes[repo] += cw.n
			r.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// Served is how many bytes GETs of repo were answered with.
func (r *CountingRegistry) Served(repo string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes[repo]
}

// PushAgentImage pushes an image of this platform holding bin at
// /fleet-agent (one gzipped layer) as Host/repo, and returns the
// reference, the binary's digest and the layer's compressed size.
func (r *CountingRegistry) PushAgentImage(t testing.TB, repo string, bin []byte) (ref, digest string, layerBytes int64) {
	t.Helper()
	return r.PushAgentImageFor(t, repo, bin, goruntime.GOARCH, "")
}

// PushAgentImageFor is PushAgentImage for linux/arch/variant (arm64, or
// arm and v7: the image of another machine's agent).
func (r *CountingRegistry) PushAgentImageFor(t testing.TB, repo string, bin []byte, arch, variant string) (ref, digest string, layerBytes int64) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "fleet-agent", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := ggcrmutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture, cf.Variant = "linux", arch, variant
	cf.Config = v1.Config{Entrypoint: []string{"/fleet-agent"}}
	if img, err = ggcrmutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref = r.Host + "/" + repo
	dst, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	size, err := layer.Size()
	if err != nil {
		t.Fatal(err)
	}
	repoName := repo
	if i := strings.LastIndexByte(repoName, ':'); i >= 0 {
		repoName = repoName[:i]
	}
	r.mu.Lock()
	delete(r.bytes, repoName)
	r.mu.Unlock()
	return ref, Sha256Digest(bin), size
}

// UseUpgradeLayout restarts a's agent the way install.sh installs it: from
// <dir>/current, a link to the binary bin installed as version, with
// --upgrade-dir dir and a trial deadline, so the agent can replace itself.
// Every later Start and Restart runs <dir>/current, as systemd would.
func UseUpgradeLayout(t testing.TB, a *Agent, version, bin string, trialDeadline time.Duration) selfupdate.Layout {
	t.Helper()
	l := selfupdate.Layout{Dir: filepath.Join(filepath.Dir(a.StateDir), "lib-"+a.Device)}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Stage(version, Sha256Digest(b), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCurrent(version); err != nil {
		t.Fatal(err)
	}
	a.Kill(t)
	a.bin = l.Current()
	a.opts.Args = append(a.opts.Args, "--upgrade-dir", l.Dir, "--upgrade-trial-deadline", trialDeadline.String())
	a.Start(t)
	return l
}

// AgentProcesses are the PIDs of a's process and every process under it
// (the agent in trial).
func AgentProcesses(a *Agent) []int {
	pid := a.PID()
	if pid == 0 {
		return nil
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		// Each thread lists the children it started.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil && !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// KillAllAgentProcesses sends SIGKILL to every process of a at once, as a
// power cut would, and waits until none runs. It returns how many there
// were.
func KillAllAgentProcesses(t testing.TB, a *Agent) int {
	t.Helper()
	pids := AgentProcesses(a)
	for _, p := range pids[min(1, len(pids)):] {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	a.Kill(t)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for processRuns(p) {
			if time.Now().After(deadline) {
				t.Fatalf("agent process %d of %s survived SIGKILL", p, a.Device)
			}
			time.Sleep(pollEvery) // poll interval, not synchronisation
		}
	}
	return len(pids)
}

// processRuns reports whether pid exists and is no zombie.
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) < i+3 || s[i+2] != 'Z'
}

// RSSBytes is the resident memory of pid (0 if it is gone).
func RSSBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// LogTimes returns the time= of every line of logs after mark that
// contains substr, in order (slog's text format).
func LogTimes(logs string, mark int, substr string) []time.Time {
	var out []time.Time
	if mark > len(logs) {
		mark = len(logs)
	}
	for _, l := range strings.Split(logs[mark:], "\n") {
		if !strings.Contains(l, substr) {
			continue
		}
		f, ok := strings.CutPrefix(l, "time=")
		if !ok {
			continue
		}
		if i := strings.IndexByte(f, ' '); i > 0 {
			f = f[:i]
		}
		if ts, err := time.Parse(time.RFC3339Nano, f); err == nil {
			out = append(out, ts)
		}
	}
	return out
}

// SampleAgentRSS samples, every pollEvery until the returned function is
// called, the resident memory of all of a's processes (AgentProcesses:
// the agent and the one in trial) and returns the largest sum seen and
// the most processes seen at once. A measurement, never an assertion.
func SampleAgentRSS(a *Agent) func() (maxBytes int64, maxProcs int) {
	stop, done := make(chan struct{}), make(chan struct{})
	var maxBytes int64
	var maxProcs int
	go func() {
		defer close(done)
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			var sum int64
			pids := AgentProcesses(a)
			for _, p := range pids {
				sum += RSSBytes(p)
			}
			maxBytes, maxProcs = max(maxBytes, sum), max(maxProcs, len(pids))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int64, int) {
		close(stop)
		<-done
		return maxBytes, maxProcs
	}
}
