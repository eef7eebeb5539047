package armtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/edgeagent/selfupdate"
)

// installResult is one run of arm/install.sh.
type installResult struct {
	stdout, stderr string
	code           int
}

// runScript runs script with sh (dash on Debian: the script must be
// POSIX).
func runScript(t *testing.T, script string, args ...string) installResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{script}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := installResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sh %s: %v", script, err)
	}
	return r
}

func runInstall(t *testing.T, args ...string) installResult {
	t.Helper()
	return runScript(t, filepath.Join(repoRoot, "arm", "install.sh"), args...)
}

// mustInstall runs install.sh and fails t unless it exits 0.
func mustInstall(t *testing.T, args ...string) installResult {
	t.Helper()
	r := runInstall(t, args...)
	if r.code != 0 {
		t.Fatalf("install.sh %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// node is what a snapshot keeps of one path.
type node struct {
	mode    fs.FileMode
	sum     [sha256.Size]byte // regular files
	link    string            // symlinks
	modTime time.Time
}

// snapshot records every path under root (relative, with a leading /).
func snapshot(t *testing.T, root string) map[string]node {
	t.Helper()
	tree := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n := node{mode: fi.Mode(), modTime: fi.ModTime()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.sum = sha256.Sum256(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			if n.link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, p)
		tree["/"+filepath.ToSlash(rel)] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(tree, "/.")
	return tree
}

// diffTrees lists the differences between two snapshots; directories'
// modification times are compared only with dirTimes.
func diffTrees(before, after map[string]node, dirTimes bool) []string {
	var diffs []string
	for _, p := range slices.Sorted(maps.Keys(before)) {
		a, ok := after[p]
		b := before[p]
		switch {
		case !ok:
			diffs = append(diffs, "removed "+p)
		case a.mode != b.mode || a.sum != b.sum || a.link != b.link:
			diffs = append(diffs, fmt.Sprintf("changed %s (%v -> %v)", p, b.mode, a.mode))
		case !a.modTime.Equal(b.modTime) && (dirTimes || !a.mode.IsDir()):
			diffs = append(diffs, fmt.Sprintf("touched %s (%v -> %v)", p, b.modTime, a.modTime))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, "added "+p)
		}
	}
	return diffs
}

// deviceRoot makes a temporary root that looks like a Pi: a hostname,
// agent state from an earlier install, a memory-enabled /proc/cgroups
// (cgroup v1), the boot command line.
func deviceRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"/etc/hostname":                   "pi-01\n",
		"/var/lib/fleet-agent/state.json": `{"kept":true}` + "\n",
		"/proc/cgroups":                   procCgroups(true),
		"/boot/firmware/cmdline.txt":      "console=serial0,115200 root=PARTUUID=1234-02 rootfstype=ext4 fsck.repair=yes rootwait\n",
	}
	for p, content := range files {
		writeFile(t, filepath.Join(root, p), content, 0o644)
	}
	return root
}

func procCgroups(memory bool) string {
	enabled := "0"
	if memory {
		enabled = "1"
	}
	return "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t0\t1\t1\ncpu\t0\t1\t1\nmemory\t0\t1\t" + enabled + "\npids\t0\t1\t1\n"
}

func writeFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInstallUninstall installs into a temporary root, checks every path
// it wrote (content and mode), installs again (nothing may change, not
// even a modification time), uninstalls (the tree must be as before, the
// agent's state kept) and finally purges.
func TestInstallUninstall(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "armv6"))
	root := deviceRoot(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "s3cret-token\n", 0o600)
	args := []string{"--root", root, "--broker", "tcp://hub.example:1883", "--device", "pi-01",
		"--token-file", tokenFile, "--binary", agent, "--arch", "armv6"}

	// The upgrade layout: the binary as its release, current linked to
	// it, and the unit's /usr/local/bin/fleet-agent linked to current.
	release := installedName(agent)
	before := snapshot(t, root)
	first := mustInstall(t, args...)
	installed := snapshot(t, root)

	unit := filepath.Join(repoRoot, "arm", "fleet-agent.service")
	sumOf := func(p string) [sha256.Size]byte { return sha256.Sum256(readFile(t, p)) }
	wantAdded := map[string]struct {
		mode fs.FileMode
		sum  *[sha256.Size]byte
		link string
	}{
		"/usr":                                        {mode: fs.ModeDir | 0o755},
		"/usr/local":                                  {mode: fs.ModeDir | 0o755},
		"/usr/local/bin":                              {mode: fs.ModeDir | 0o755},
		"/usr/local/bin/fleet-agent":                  {mode: fs.ModeSymlink | 0o777, link: "/usr/local/lib/fleet-agent/current"},
		"/usr/local/lib":                              {mode: fs.ModeDir | 0o755},
		"/usr/local/lib/fleet-agent":                  {mode: fs.ModeDir | 0o755},
		"/usr/local/lib/fleet-agent/current":          {mode: fs.ModeSymlink | 0o777, link: release},
		"/usr/local/lib/fleet-agent/" + release:       {mode: 0o755, sum: ptr(sumOf(agent))},
		"/etc/fleet":                                  {mode: fs.ModeDir | 0o700},
		"/etc/fleet/agent.yaml":                       {mode: 0o600},
		"/etc/fleet/token":                            {mode: 0o600, sum: ptr(sha256.Sum256([]byte("s3cret-token\n")))},
		"/etc/fleet/.installed-files":                 {mode: 0o600},
		"/etc/systemd":                                {mode: fs.ModeDir | 0o755},
		"/etc/systemd/system":                         {mode: fs.ModeDir | 0o755},
		"/etc/systemd/system/fleet-agent.service":     {mode: 0o644, sum: ptr(sumOf(unit))},
		"/etc/systemd/system/multi-user.target.wants": {mode: fs.ModeDir | 0o755},
		"/etc/systemd/system/multi-user.target.wants/fleet-agent.service": {
			mode: fs.ModeSymlink | 0o777, link: "/etc/systemd/system/fleet-agent.service"},
	}
	var added []string
	for _, d := range diffTrees(before, installed, false) {
		p, ok := strings.CutPrefix(d, "added ")
		if !ok {
			t.Errorf("install changed a path it does not own: %s", d)
			continue
		}
		added = append(added, p)
		want, ok := wantAdded[p]
		if !ok {
			t.Errorf("install wrote unexpected %s", p)
			continue
		}
		got := installed[p]
		if got.mode != want.mode {
			t.Errorf("%s: mode %v, want %v", p, got.mode, want.mode)
		}
		if want.sum != nil && got.sum != *want.sum {
			t.Errorf("%s: unexpected content", p)
		}
		if got.link != want.link {
			t.Errorf("%s: links to %q, want %q", p, got.link, want.link)
		}
	}
	if len(added) != len(wantAdded) {
		t.Errorf("install added %d paths, want %d:\n got %v", len(added), len(wantAdded), added)
	}

	checkLayout(t, root, release)

	// The config: exactly the agent's keys, with the given values.
	var cfg map[string]string
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(root, "etc/fleet/agent.yaml")), &cfg); err != nil {
		t.Fatalf("agent.yaml: %v", err)
	}
	wantCfg := map[string]string{
		"broker": "tcp://hub.example:1883", "device": "pi-01", "token-file": "/etc/fleet/token",
		"state-dir": "/var/lib/fleet-agent", "containerd-socket": "/run/containerd/containerd.sock", "namespace": "fleet",
	}
	if !maps.Equal(cfg, wantCfg) {
		t.Errorf("agent.yaml = %v, want %v", cfg, wantCfg)
	}
	checkKeysAreAgentFlags(t, slices.Collect(maps.Keys(cfg)))

	wantManifest := `d /etc/fleet
d /etc/systemd
d /etc/systemd/system
d /etc/systemd/system/multi-user.target.wants
d /usr
d /usr/local
d /usr/local/bin
d /usr/local/lib
d /usr/local/lib/fleet-agent
f /etc/fleet/agent.yaml
f /etc/fleet/token
f /etc/systemd/system/fleet-agent.service
f /usr/local/lib/fleet-agent/` + release + `
l /etc/systemd/system/multi-user.target.wants/fleet-agent.service
l /usr/local/bin/fleet-agent
l /usr/local/lib/fleet-agent/current
`
	if got := string(readFile(t, filepath.Join(root, "etc/fleet/.installed-files"))); got != wantManifest {
		t.Errorf("manifest:\n%s\nwant:\n%s", got, wantManifest)
	}
	for _, want := range []string{
		"would run: env DEBIAN_FRONTEND=noninteractive apt-get install -y containerd runc",
		"would run: systemctl daemon-reload",
		"would run: systemctl enable --now fleet-agent.service",
	} {
		if !strings.Contains(first.stdout, want+"\n") {
			t.Errorf("first install output lacks %q:\n%s", want, first.stdout)
		}
	}
	if strings.Contains(first.stdout+first.stderr, "s3cret-token") {
		t.Error("install.sh printed the token")
	}

	// Idempotent: the same tree, byte for byte and time for time, and
	// nothing to reload or restart.
	second := mustInstall(t, args...)
	if d := diffTrees(installed, snapshot(t, root), true); len(d) > 0 {
		t.Errorf("second install changed the tree:\n%s", strings.Join(d, "\n"))
	}
	for _, unwanted := range []string{"wrote ", "created ", "linked ", "daemon-reload", "try-restart"} {
		if strings.Contains(second.stdout, unwanted) {
			t.Errorf("second install output has %q:\n%s", unwanted, second.stdout)
		}
	}
	if !strings.Contains(second.stdout, "would run: systemctl enable --now fleet-agent.service\n") {
		t.Errorf("second install does not make sure the agent runs:\n%s", second.stdout)
	}

	// A changed option rewrites the config only, and restarts the agent.
	changed := slices.Clone(args)
	changed[slices.Index(changed, "tcp://hub.example:1883")] = "tcp://hub2.example:1883"
	third := mustInstall(t, changed...)
	if d := diffTrees(installed, snapshot(t, root), false); len(d) != 1 || !strings.HasPrefix(d[0], "changed /etc/fleet/agent.yaml ") {
		t.Errorf("changing --broker changed %v, want agent.yaml only", d)
	}
	if !strings.Contains(third.stdout, "would run: systemctl try-restart fleet-agent.service\n") {
		t.Errorf("a changed config does not restart the agent:\n%s", third.stdout)
	}

	// Uninstall: as before, state kept, containerd not touched.
	un := mustInstall(t, "--uninstall", "--root", root)
	if d := diffTrees(before, snapshot(t, root), false); len(d) > 0 {
		t.Errorf("uninstall did not restore the tree:\n%s", strings.Join(d, "\n"))
	}
	for _, want := range []string{"would run: systemctl disable --now fleet-agent.service\n", "would run: systemctl daemon-reload\n"} {
		if !strings.Contains(un.stdout, want) {
			t.Errorf("uninstall output lacks %q:\n%s", want, un.stdout)
		}
	}
	if strings.Contains(un.stdout, "apt-get") {
		t.Errorf("uninstall touches packages:\n%s", un.stdout)
	}

	// Purge removes the agent's state too, and nothing else.
	mustInstall(t, args...)
	mustInstall(t, "--uninstall", "--purge", "--root", root)
	wantPurged := maps.Clone(before)
	delete(wantPurged, "/var/lib/fleet-agent")
	delete(wantPurged, "/var/lib/fleet-agent/state.json")
	if d := diffTrees(wantPurged, snapshot(t, root), false); len(d) > 0 {
		t.Errorf("uninstall --purge:\n%s", strings.Join(d, "\n"))
	}
}

func ptr[T any](v T) *T { return &v }

// checkLayout checks that install.sh wrote the layout the agent replaces
// itself in: current names the installed binary, so an agent started from
// it may upgrade.
func checkLayout(t *testing.T, root, release string) {
	t.Helper()
	lay := selfupdate.Layout{Dir: filepath.Join(root, "usr/local/lib/fleet-agent")}
	if v, err := lay.CurrentVersion(); err != nil || v != release {
		t.Errorf("layout current: %q, %v; want %s", v, err, release)
	}
	if err := lay.Check(filepath.Join(lay.Dir, release)); err != nil {
		t.Errorf("the agent would not upgrade itself from the installed layout: %v", err)
	}
}

// installedName is the name install.sh gives agent in
// /usr/local/lib/fleet-agent: its release when it runs on this machine
// (through binfmt_misc), else "installed".
func installedName(agent string) string {
	out, err := exec.Command(agent, "version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) > 1 && f[0] == "fleet-agent" {
		return f[1]
	}
	return "installed"
}

// checkKeysAreAgentFlags checks that every config key install.sh writes is
// a flag of the agent it installs (config file keys and flags share names).
func checkKeysAreAgentFlags(t *testing.T, keys []string) {
	t.Helper()
	tg := targetByArch(t, "arm64")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := qemuCmd(ctx, t, tg, binPath(t, "fleet-agent", tg), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("fleet-agent --help: %v\n%s", err, out)
	}
	for _, k := range keys {
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(k) + `\b`).Match(out) {
			t.Errorf("agent.yaml key %q is not a fleet-agent flag:\n%s", k, out)
		}
	}
}

// TestInstallTLSBrokerWithCA installs a CA, then drops it: the second
// install removes the CA file it no longer uses.
func TestInstallTLSBrokerWithCA(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0o600)
	base := []string{"--root", root, "--broker", "ssl://hub.example:8883", "--device", "pi-02",
		"--token", "tok", "--binary", agent, "--arch", "arm64"}
	mustInstall(t, append(base, "--ca", ca)...)
	fi, err := os.Stat(filepath.Join(root, "etc/fleet/ca.pem"))
	if err != nil || fi.Mode() != 0o644 {
		t.Fatalf("ca.pem: %v %v, want mode 0644", fi, err)
	}
	if !bytes.Contains(readFile(t, filepath.Join(root, "etc/fleet/agent.yaml")), []byte("ca: '/etc/fleet/ca.pem'\n")) {
		t.Errorf("agent.yaml does not name the CA:\n%s", readFile(t, filepath.Join(root, "etc/fleet/agent.yaml")))
	}
	mustInstall(t, base...)
	if _, err := os.Stat(filepath.Join(root, "etc/fleet/ca.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ca.pem left behind after reinstalling without --ca: %v", err)
	}
	if bytes.Contains(readFile(t, filepath.Join(root, "etc/fleet/.installed-files")), []byte("ca.pem")) {
		t.Error("manifest still lists ca.pem")
	}
}

// TestInstallCAHash writes --ca-hash into agent.yaml (the agent pins the
// hub's CA by it), beside a bootstrap token, and a reinstall without it
// drops it.
func TestInstallCAHash(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	bootstrap := filepath.Join(t.TempDir(), "bootstrap-token")
	writeFile(t, bootstrap, "abcdef.0123456789abcdef0123456789abcdef\n", 0o600)
	hash := "sha256:" + strings.Repeat("5a", 32)
	base := []string{"--root", root, "--broker", "ssl://hub.example:8883", "--bootstrap-token-file", bootstrap,
		"--name-from", "serial", "--binary", agent, "--arch", "arm64"}
	mustInstall(t, append(base, "--ca-hash", hash)...)
	conf := readFile(t, filepath.Join(root, "etc/fleet/agent.yaml"))
	if !bytes.Contains(conf, []byte("ca-hash: '"+hash+"'\n")) || bytes.Contains(conf, []byte("\nca: ")) {
		t.Errorf("agent.yaml does not pin the CA hash:\n%s", conf)
	}
	checkKeysAreAgentFlags(t, []string{"ca-hash", "ca-file", "ca"})
	mustInstall(t, base...)
	if conf := readFile(t, filepath.Join(root, "etc/fleet/agent.yaml")); bytes.Contains(conf, []byte("ca-hash")) {
		t.Errorf("agent.yaml keeps the CA hash after reinstalling without it:\n%s", conf)
	}
}

// TestInstallMemoryCgroupDisabled: without the memory cgroup, install.sh
// explains how to enable it in the right cmdline.txt, exits 3 and writes
// nothing.
func TestInstallMemoryCgroupDisabled(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "armv7"))
	cases := []struct {
		name    string
		files   map[string]string
		cmdline string
	}{
		{"v1 bookworm", map[string]string{"/proc/cgroups": procCgroups(false)}, "/boot/firmware/cmdline.txt"},
		{"v1 bullseye", map[string]string{"/proc/cgroups": procCgroups(false), "/boot/cmdline.txt": "root=/dev/mmcblk0p2\n"}, "/boot/cmdline.txt"},
		// cgroup v2 decides even where /proc/cgroups says enabled.
		{"v2", map[string]string{"/proc/cgroups": procCgroups(true), "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io pids\n"}, "/boot/firmware/cmdline.txt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "etc/hostname"), "pi\n", 0o644)
			for p, c := range tc.files {
				writeFile(t, filepath.Join(root, p), c, 0o644)
			}
			if tc.cmdline != "/boot/cmdline.txt" {
				writeFile(t, filepath.Join(root, "boot/firmware/cmdline.txt"), "root=/dev/mmcblk0p2\n", 0o644)
			}
			before := snapshot(t, root)
			r := runInstall(t, "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-03", "--token", "t",
				"--binary", agent, "--arch", "armv7")
			if r.code != 3 {
				t.Fatalf("exit %d, want 3\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{
				"cgroup_enable=memory cgroup_memory=1",
				"sudo sed -i '1 s/$/ cgroup_enable=memory cgroup_memory=1/' " + tc.cmdline + "\n",
				"reboot",
			} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
				t.Errorf("a failed check changed the tree:\n%s", strings.Join(d, "\n"))
			}
		})
	}
	t.Run("v2 enabled", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "sys/fs/cgroup/cgroup.controllers"), "cpuset cpu io memory pids\n", 0o644)
		r := mustInstall(t, "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-03", "--token", "t",
			"--binary", agent, "--arch", "armv7", "--dry-run")
		if !strings.Contains(r.stdout, "memory cgroup: enabled (cgroup v2)") {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
}

// TestInstallDryRun changes nothing and says what it would do.
func TestInstallDryRun(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	before := snapshot(t, root)
	r := mustInstall(t, "--dry-run", "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-04",
		"--token", "t", "--binary", agent, "--arch", "arm64")
	if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
		t.Errorf("--dry-run changed the tree:\n%s", strings.Join(d, "\n"))
	}
	for _, want := range []string{"would link /usr/local/bin/fleet-agent -> /usr/local/lib/fleet-agent/current", "would write /etc/fleet/agent.yaml (mode 0600)",
		"would write /etc/fleet/token (mode 0600)", "would run: systemctl enable --now fleet-agent.service"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--dry-run output lacks %q:\n%s", want, r.stdout)
		}
	}
	mustInstall(t, "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-04", "--token", "t", "--binary", agent, "--arch", "arm64")
	installed := snapshot(t, root)
	mustInstall(t, "--uninstall", "--purge", "--dry-run", "--root", root)
	if d := diffTrees(installed, snapshot(t, root), true); len(d) > 0 {
		t.Errorf("--uninstall --dry-run changed the tree:\n%s", strings.Join(d, "\n"))
	}
}

// TestInstallBinarySources: the binary for --arch from dist/ next to the
// script (release layout), from --url-base, each verified against
// SHA256SUMS; and a binary for the wrong CPU is refused.
func TestInstallBinarySources(t *testing.T) {
	d := dist(t)
	t.Run("dist next to the script", func(t *testing.T) {
		kit := t.TempDir()
		for _, f := range []string{"install.sh", "fleet-agent.service"} {
			writeFile(t, filepath.Join(kit, f), string(readFile(t, filepath.Join(repoRoot, "arm", f))), 0o755)
		}
		for _, f := range []string{"fleet-agent-linux-armv7", "SHA256SUMS"} {
			writeFile(t, filepath.Join(kit, "dist", f), string(readFile(t, filepath.Join(d, f))), 0o755)
		}
		root := deviceRoot(t)
		args := []string{filepath.Join(kit, "install.sh"), "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-05", "--token", "t", "--arch", "armv7"}
		if r := runScript(t, args[0], args[1:]...); r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if !bytes.Equal(readFile(t, filepath.Join(root, "usr/local/lib/fleet-agent/current")), readFile(t, filepath.Join(d, "fleet-agent-linux-armv7"))) {
			t.Error("installed binary is not dist/fleet-agent-linux-armv7")
		}
		// A binary that does not match SHA256SUMS is refused.
		writeFile(t, filepath.Join(kit, "dist", "fleet-agent-linux-armv7"), "\x7fELF tampered", 0o755)
		if r := runScript(t, args[0], args[1:]...); r.code == 0 || !strings.Contains(r.stderr, "checksum mismatch") {
			t.Errorf("tampered binary: exit %d, stderr:\n%s", r.code, r.stderr)
		}
		// No binary for this CPU.
		r := runScript(t, args[0], append(args[1:len(args)-1], "armv6")...)
		if r.code == 0 || !strings.Contains(r.stderr, "no fleet-agent-linux-armv6") {
			t.Errorf("missing binary: exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("url-base", func(t *testing.T) {
		srv := httptest.NewServer(http.FileServer(http.Dir(d)))
		defer srv.Close()
		root := deviceRoot(t)
		mustInstall(t, "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-06", "--token", "t",
			"--url-base", srv.URL+"/", "--arch", "arm64")
		if !bytes.Equal(readFile(t, filepath.Join(root, "usr/local/lib/fleet-agent/current")), readFile(t, filepath.Join(d, "fleet-agent-linux-arm64"))) {
			t.Error("installed binary is not the downloaded fleet-agent-linux-arm64")
		}
		// A server whose SHA256SUMS does not match.
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/SHA256SUMS" {
				fmt.Fprintf(w, "%064x  fleet-agent-linux-arm64\n", 0)
				return
			}
			http.FileServer(http.Dir(d)).ServeHTTP(w, r)
		}))
		defer bad.Close()
		r := runInstall(t, "--root", deviceRoot(t), "--broker", "tcp://hub:1883", "--device", "pi-06", "--token", "t",
			"--url-base", bad.URL, "--arch", "arm64")
		if r.code == 0 || !strings.Contains(r.stderr, "checksum mismatch") {
			t.Errorf("bad checksum: exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("wrong CPU", func(t *testing.T) {
		root := deviceRoot(t)
		before := snapshot(t, root)
		r := runInstall(t, "--root", root, "--broker", "tcp://hub:1883", "--device", "pi-07", "--token", "t",
			"--binary", filepath.Join(d, "fleet-agent-linux-arm64"), "--arch", "armv6")
		if r.code == 0 || !strings.Contains(r.stderr, "is not a armv6 binary") {
			t.Errorf("arm64 binary for armv6: exit %d, stderr:\n%s", r.code, r.stderr)
		}
		if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
			t.Errorf("a refused install changed the tree:\n%s", strings.Join(d, "\n"))
		}
	})
}

// TestInstallRejectsBadUsage: bad options exit 2 before touching anything.
func TestInstallRejectsBadUsage(t *testing.T) {
	agent := binPath(t, "fleet-agent", targetByArch(t, "arm64"))
	root := deviceRoot(t)
	ok := []string{"--root", root, "--broker", "tcp://hub:1883", "--device", "pi-08", "--token", "t", "--binary", agent, "--arch", "arm64"}
	with := func(replace map[string]string, extra ...string) []string {
		var args []string
		for i := 0; i < len(ok); i += 2 {
			v, found := replace[ok[i]]
			switch {
			case !found:
				args = append(args, ok[i], ok[i+1])
			case v != "":
				args = append(args, ok[i], v)
			}
		}
		return append(args, extra...)
	}
	cases := map[string][]string{
		"no device":           with(map[string]string{"--device": ""}),
		"device not a label":  with(map[string]string{"--device": "Pi_08"}),
		"no broker":           with(map[string]string{"--broker": ""}),
		"http broker":         with(map[string]string{"--broker": "http://hub"}),
		"no token":            with(map[string]string{"--token": ""}),
		"token and file":      with(nil, "--token-file", "/dev/null"),
		"empty token":         with(map[string]string{"--token": " "}),
		"ca without tls":      with(nil, "--ca", "/dev/null"),
		"ca hash without tls": with(nil, "--ca-hash", "sha256:"+strings.Repeat("ab", 32)),
		"bad ca hash":         with(map[string]string{"--broker": "ssl://hub:8883"}, "--ca-hash", "sha256:abc"),
		"bad arch":            with(map[string]string{"--arch": "mips"}),
		"relative state dir":  with(nil, "--state-dir", "var/lib/x"),
		"purge on install":    with(nil, "--purge"),
		"unknown option":      with(nil, "--frobnicate"),
		"missing value":       append(slices.Clone(ok), "--namespace"),
		"uninstall options":   {"--uninstall", "--root", root, "--device", "pi-08"},
	}
	before := snapshot(t, root)
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			r := runInstall(t, args...)
			if r.code != 2 {
				t.Errorf("install.sh %s: exit %d, want 2\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			}
		})
	}
	if d := diffTrees(before, snapshot(t, root), true); len(d) > 0 {
		t.Errorf("bad usage changed the tree:\n%s", strings.Join(d, "\n"))
	}
}

// TestShellcheck lints the scripts in arm/.
func TestShellcheck(t *testing.T) {
	sc := lookTool(t, "shellcheck")
	scripts, err := filepath.Glob(filepath.Join(repoRoot, "arm", "*.sh"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no arm/*.sh: %v", err)
	}
	out, err := exec.Command(sc, scripts...).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck %s: %v\n%s", strings.Join(scripts, " "), err, out)
	}
}

// TestServiceUnit checks the systemd unit with systemd-analyze and pins the
// directives the agent depends on.
func TestServiceUnit(t *testing.T) {
	unitPath := filepath.Join(repoRoot, "arm", "fleet-agent.service")
	unit := string(readFile(t, unitPath))
	directives := map[string][]string{}
	for line := range strings.Lines(unit) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	want := map[string]string{
		"ExecStart":  "/usr/local/bin/fleet-agent --config /etc/fleet/agent.yaml",
		"Restart":    "always",
		"RestartSec": "5",
		"KillMode":   "process", // stopping the agent never kills containers
		"WantedBy":   "multi-user.target",
	}
	for k, v := range want {
		if got := directives[k]; !slices.Equal(got, []string{v}) {
			t.Errorf("%s=%v, want %s", k, got, v)
		}
	}
	after := strings.Fields(strings.Join(directives["After"], " "))
	wants := strings.Fields(strings.Join(directives["Wants"], " "))
	for _, u := range []string{"network-online.target", "containerd.service"} {
		if !slices.Contains(after, u) || !slices.Contains(wants, u) {
			t.Errorf("After=%v Wants=%v: want both to name %s", after, wants, u)
		}
	}
	if len(directives["LimitNOFILE"]) != 1 {
		t.Error("no LimitNOFILE")
	}
	// A containerd restart must not stop the agent; a private filesystem
	// view breaks containerd's client-side mounts and host-path checks; a
	// native-only syscall filter kills a 32-bit agent on a 64-bit kernel.
	for _, k := range []string{"Requires", "BindsTo", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
		"PrivateMounts", "SystemCallArchitectures", "CapabilityBoundingSet", "DynamicUser"} {
		if v, ok := directives[k]; ok {
			t.Errorf("%s=%v must not be set (see the unit's comments)", k, v)
		}
	}

	analyze := lookTool(t, "systemd-analyze")
	// verify checks that ExecStart exists: point it at a stand-in.
	dir := t.TempDir()
	stub := filepath.Join(dir, "fleet-agent")
	writeFile(t, stub, "#!/bin/sh\n", 0o755)
	writeFile(t, filepath.Join(dir, "fleet-agent.service"), strings.Replace(unit, "ExecStart=/usr/local/bin/fleet-agent", "ExecStart="+stub, 1), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, "fleet-agent.service")).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
