package armtest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallBootstrapToken: for devices that enroll themselves, install.sh
// writes the bootstrap token (0600) instead of a device token and a config
// that names it; every key is an agent flag; a second run changes nothing;
// uninstall leaves the tree as it was; mixing it with a device token or an
// unknown --name-from is refused.
func TestInstallBootstrapToken(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	before := snapshot(t, root)
	bt := filepath.Join(t.TempDir(), "bootstrap-token")
	writeFile(t, bt, "abc123.0123456789abcdef0123456789abcdef\n", 0o600)
	args := []string{"--root", root, "--broker", "tcp://hub.example:1883", "--bootstrap-token-file", bt,
		"--name-from", "serial", "--binary", agent, "--arch", "arm64"}
	mustInstall(t, args...)

	p := filepath.Join(root, "etc/fleet/bootstrap-token")
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap-token: %v %v, want mode 0600", fi, err)
	}
	if got := string(readFile(t, p)); got != "abc123.0123456789abcdef0123456789abcdef\n" {
		t.Errorf("bootstrap-token holds %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/fleet/token")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a device token file was written for a bootstrap install: %v", err)
	}
	conf := readFile(t, filepath.Join(root, "etc/fleet/agent.yaml"))
	for _, want := range []string{"bootstrap-token-file: '/etc/fleet/bootstrap-token'\n", "name-from: 'serial'\n", "broker: 'tcp://hub.example:1883'\n"} {
		if !bytes.Contains(conf, []byte(want)) {
			t.Errorf("agent.yaml lacks %q:\n%s", want, conf)
		}
	}
	for _, unwanted := range []string{"token-file: '/etc/fleet/token'", "device:"} {
		if bytes.Contains(conf, []byte(unwanted)) {
			t.Errorf("agent.yaml has %q:\n%s", unwanted, conf)
		}
	}
	var keys []string
	for _, line := range strings.Split(string(conf), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			keys = append(keys, k)
		}
	}
	checkKeysAreAgentFlags(t, keys)

	installed := snapshot(t, root)
	mustInstall(t, args...)
	if d := diffTrees(installed, snapshot(t, root), true); len(d) > 0 {
		t.Errorf("second install changed the tree:\n%s", strings.Join(d, "\n"))
	}
	if r := runInstall(t, "--root", root, "--uninstall"); r.code != 0 {
		t.Fatalf("uninstall: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := diffTrees(before, snapshot(t, root), false); len(d) > 0 {
		t.Errorf("uninstall did not restore the tree:\n%s", strings.Join(d, "\n"))
	}

	for name, bad := range map[string][]string{
		"with a device token": append(append([]string{}, args...), "--token", "t"),
		"unknown name source": append(append([]string{}, args[:len(args)-6]...), "--name-from", "mac", "--binary", agent, "--arch", "arm64"),
		"name-from alone":     {"--root", root, "--broker", "tcp://hub:1883", "--device", "pi-9", "--token", "t", "--name-from", "serial", "--binary", agent, "--arch", "arm64"},
	} {
		if r := runInstall(t, bad...); r.code != 2 {
			t.Errorf("%s: exit %d, want 2 (usage)\n%s%s", name, r.code, r.stdout, r.stderr)
		}
	}
}
