package armtest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// testJoin is a join string as fleet device add prints it.
func testJoin(t *testing.T) string {
	t.Helper()
	j, err := schema.EncodeJoin(schema.JoinInfo{
		Brokers: []string{"ssl://10.0.0.5:8883"}, CAHash: "sha256:" + strings.Repeat("5a", 32),
		SigningKey: schema.EncodeSigningKey(bytes.Repeat([]byte{7}, 32)), Device: "pi-09", Token: "device-token",
	})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestInstallJoin: --join (the string, or @FILE) is kept as
// /etc/fleet/join (0600) and the config points the agent at it; no token
// file is written, and the agent takes every key written.
func TestInstallJoin(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	join := testJoin(t)
	file := filepath.Join(t.TempDir(), "join")
	writeFile(t, file, join+"\n", 0o600)
	for name, arg := range map[string]string{"string": join, "file": "@" + file} {
		t.Run(name, func(t *testing.T) {
			root := deviceRoot(t)
			r := mustInstall(t, "--root", root, "--join", arg, "--binary", agent, "--arch", "arm64")
			if !strings.Contains(r.stdout, "fleet-agent installed with the join string /etc/fleet/join") {
				t.Errorf("install output:\n%s", r.stdout)
			}
			fi, err := os.Stat(filepath.Join(root, "etc/fleet/join"))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("/etc/fleet/join: %v %v, want mode 0600", fi, err)
			}
			if got := strings.TrimSpace(string(readFile(t, filepath.Join(root, "etc/fleet/join")))); got != join {
				t.Errorf("/etc/fleet/join holds %q", got)
			}
			conf := readFile(t, filepath.Join(root, "etc/fleet/agent.yaml"))
			if !bytes.Contains(conf, []byte("join: '@/etc/fleet/join'\n")) || bytes.Contains(conf, []byte("token")) || bytes.Contains(conf, []byte("broker:")) {
				t.Errorf("agent.yaml:\n%s", conf)
			}
			if _, err := os.Stat(filepath.Join(root, "etc/fleet/token")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a token file was written: %v", err)
			}
			if !bytes.Contains(readFile(t, filepath.Join(root, "etc/fleet/.installed-files")), []byte("f /etc/fleet/join\n")) {
				t.Error("the manifest does not list /etc/fleet/join")
			}
		})
	}
	checkKeysAreAgentFlags(t, []string{"join", "insecure-trust-first-key"})
}

// TestInstallJoinRejectsBadUsage: a malformed join string, and options
// the join string carries given beside it, are usage errors (exit 2)
// that change nothing.
func TestInstallJoinRejectsBadUsage(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	join := testJoin(t)
	base := []string{"--root", root, "--binary", agent, "--arch", "arm64"}
	for name, tt := range map[string]struct {
		args []string
		want string
	}{
		"not a join string": {[]string{"--join", "device-token"}, "--join: not a join string"},
		"a later format":    {[]string{"--join", "fleetjoin2:abc"}, "format this install.sh does not know"},
		"mangled":           {[]string{"--join", join[:30] + "+/" + join[30:]}, "not base64url"},
		"with --broker":     {[]string{"--join", join, "--broker", "ssl://rogue:8883"}, "--broker: the join string carries it"},
		"with --device":     {[]string{"--join", join, "--device", "pi-1"}, "--device: the join string carries it"},
		"with --token":      {[]string{"--join", join, "--token", "x"}, "--token: the join string carries it"},
		"with --ca-hash":    {[]string{"--join", join, "--ca-hash", "sha256:" + strings.Repeat("ab", 32)}, "--ca-hash: the join string carries it"},
	} {
		t.Run(name, func(t *testing.T) {
			before := snapshot(t, root)
			r := runInstall(t, append(slicesClone(base), tt.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
			if strings.Contains(r.stderr, "device-token") && name != "not a join string" {
				t.Errorf("the error shows the token: %s", r.stderr)
			}
			if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
				t.Errorf("bad usage changed the tree:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
