package test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// e2eAgentCheck: `fleet-agent check` with a running agent's configuration
// passes every check against the real broker and containerd and reports
// the desired generation the agent applied; with a wrong token it fails
// the broker check and exits 1. Neither run disturbs the running agent.
func e2eAgentCheck(t *testing.T, f *Fleet) {
	dev := f.Devices()[0]
	a := f.Agent(t, dev)
	gen := f.AwaitConverged(t, e2eConverge, dev)[dev].Status.DesiredGeneration

	out, code := runAgentCheck(t, a, a.TokenFile)
	t.Logf("fleet-agent check:\n%s", out)
	if code != 0 {
		t.Fatalf("fleet-agent check: exit %d\n%s", code, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ok +identity +device ` + dev + `, token from `),
		regexp.MustCompile(`(?m)^ok +state dir +.*writable; desired state generation \d+ persisted`),
		regexp.MustCompile(`(?m)^ok +containerd +.*: containerd v?[0-9.]+.*; namespace ` + a.Namespace + ` has \d+ Fleet containers, \d+ running`),
		regexp.MustCompile(`(?m)^ok +broker +.*: logged in as ` + dev),
		regexp.MustCompile(`(?m)^ok +desired state +fleet/v1/devices/` + dev + `/desired: generation ` + strconv.FormatInt(gen, 10) + `, \d+ pods; the agent has applied it$`),
		regexp.MustCompile(`(?m)^ok +signing key +hub key [0-9a-f]{16} pinned in `),
		regexp.MustCompile(`(?m)^all 7 checks passed$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("fleet-agent check: no line matching %s in\n%s", want, out)
		}
	}

	wrong := filepath.Join(t.TempDir(), "wrong-token")
	if err := os.WriteFile(wrong, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runAgentCheck(t, a, wrong)
	if code != 1 || !regexp.MustCompile(`(?m)^FAIL +broker +.*as `+dev+`: .*(not Authori[sz]ed|bad user name or password).*rotate-token`).MatchString(out) {
		t.Errorf("fleet-agent check with a wrong token: exit %d, want 1 and a FAIL broker line:\n%s", code, out)
	}

	// The running agent kept its session: still online, still converged.
	if !a.Running() {
		t.Fatal("the agent stopped")
	}
	if d := f.Device(t, dev); !Converged(d) {
		t.Errorf("after the checks the hub reports %s as %+v", dev, d.Status)
	}
}

// runAgentCheck runs `fleet-agent check` with the agent's own flags and
// tokenFile, and returns its combined output and exit code.
func runAgentCheck(t *testing.T, a *Agent, tokenFile string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, "check",
		"--broker", a.opts.Broker,
		"--device", a.Device,
		"--token-file", tokenFile,
		"--state-dir", a.StateDir,
		"--containerd-socket", a.opts.ContainerdSocket,
		"--namespace", a.Namespace,
		"--timeout", "20s",
	)
	cmd.Env = cleanEnv(a.StateDir + ".home")
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(b), 0
	case errors.As(err, &ee):
		return string(b), ee.ExitCode()
	}
	t.Fatalf("fleet-agent check: %v\n%s", err, b)
	return "", -1
}
