package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PrevRelease is the commit of the last release before this one: main
// as it was when the wave that made the agent's version desired state
// began (the end of wave 3, before any AgentRollout). The version-skew
// tests build its fleet-agent and fleet-hub and run them against this
// tree's.
const PrevRelease = "3c6884850db983712e21af7b89aebdb8dd45f66f"

// PrevVersion is the version stamped into the PrevRelease builds: older
// than BinaryVersion, within the hub's version-skew policy.
const PrevVersion = "v0.0.0-prev"

var prevBuilds struct {
	mu    sync.Mutex
	src   string
	paths map[string]string
}

// BuildPrevRelease builds cmd/name of PrevRelease (git archive of the
// commit into the test binaries' temporary directory, then go build as
// BuildBinary does, stamped PrevVersion), once per test binary, and
// returns its path. The repository's history must hold the commit (a
// shallow clone does not: git fetch --unshallow).
func BuildPrevRelease(t testing.TB, name string) string {
	t.Helper()
	if _, err := BuildBinary("fleet-agent"); err != nil { // makes binaries.dir
		t.Fatal(err)
	}
	prevBuilds.mu.Lock()
	defer prevBuilds.mu.Unlock()
	if p, ok := prevBuilds.paths[name]; ok {
		return p
	}
	if prevBuilds.src == "" {
		prevBuilds.src = extractPrevRelease(t)
	}
	binaries.mu.Lock()
	path := filepath.Join(binaries.dir, name+"-"+PrevVersion)
	binaries.mu.Unlock()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags=-s -w -X github.com/fleetmq/fleet/schema.Version="+PrevVersion, "-o", path, "./cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = prevBuilds.src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s of the previous release %.12s: %v\n%s", name, PrevRelease, err, out)
	}
	if prevBuilds.paths == nil {
		prevBuilds.paths = map[string]string{}
	}
	prevBuilds.paths[name] = path
	return path
}

// extractPrevRelease writes PrevRelease's tree under binaries.dir.
func extractPrevRelease(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binaries.mu.Lock()
	dir := filepath.Join(binaries.dir, "src-"+PrevRelease[:12])
	binaries.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := dir + ".tar"
	haveCommit(t, root)
	for _, c := range [][]string{{"git", "-C", root, "archive", "-o", tarball, PrevRelease}, {"tar", "-xf", tarball, "-C", dir}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("the previous release %.12s: %s: %v\n%s\n(the version-skew tests need the repository's history: git fetch --unshallow)",
				PrevRelease, strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("the previous release %.12s: no go.mod after git archive: %v", PrevRelease, err)
	}
	return dir
}

// UseAgentBinary restarts a's agent from bin (an older release, say);
// every later Start and Restart runs it too.
func UseAgentBinary(t testing.TB, a *Agent, bin string) {
	t.Helper()
	a.Kill(t)
	a.bin = bin
	a.Start(t)
}

// haveCommit makes sure the repository holds PrevRelease: a shallow clone
// (CI systems often make one) fetches its history from its origin first.
func haveCommit(t testing.TB, root string) {
	t.Helper()
	if exec.Command("git", "-C", root, "cat-file", "-e", PrevRelease+"^{commit}").Run() == nil {
		return
	}
	for _, c := range [][]string{{"fetch", "--quiet", "--unshallow"}, {"fetch", "--quiet", "origin", PrevRelease}} {
		out, err := exec.Command("git", append([]string{"-C", root}, c...)...).CombinedOutput()
		t.Logf("the previous release %.12s is not in this clone: git %s: %v %s", PrevRelease, strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		if exec.Command("git", "-C", root, "cat-file", "-e", PrevRelease+"^{commit}").Run() == nil {
			return
		}
	}
}
