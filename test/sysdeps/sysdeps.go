// Package sysdeps is the one list of the system tools Fleet's tests need
// beyond Go, the Debian packages that provide them, and the decision of
// what `make test` does when some are missing: install them (as root, or
// through sudo without a password), or stop at once printing the single
// apt-get line that would.
//
// Tests look their tools up through Require, so a missing tool fails a full
// run with that same install line, and skips under -short (`make
// test-short` needs only Go).
package sysdeps

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Tool is something the tests run or read, and the Debian package that
// provides it.
type Tool struct {
	// Name is the command looked up on PATH, or an absolute file path.
	Name string
	// Package is the Debian package that installs it.
	Package string
	// Dirs are searched after PATH (daemons live in sbin, which a
	// non-root PATH may lack).
	Dirs []string
	// For says which tests need it.
	For string
}

// Tools is everything `make test` needs besides Go, in install order.
var Tools = []Tool{
	{Name: "gcc", Package: "gcc", For: "the race detector (-race needs cgo)"},
	{Name: "/usr/include/stdio.h", Package: "libc6-dev", For: "the race detector (cgo needs the C headers)"},
	{Name: "containerd", Package: "containerd", Dirs: sbin, For: "the agent's containerd runtime and the end-to-end tests"},
	{Name: "containerd-shim-runc-v2", Package: "containerd", Dirs: sbin, For: "running containers"},
	{Name: "runc", Package: "runc", Dirs: sbin, For: "running containers"},
	{Name: "mosquitto", Package: "mosquitto", Dirs: sbin, For: "the external-broker tests"},
	{Name: "mosquitto_sub", Package: "mosquitto-clients", For: "monitoring tests with real MQTT clients"},
	{Name: "mosquitto_pub", Package: "mosquitto-clients", For: "monitoring tests with real MQTT clients"},
	{Name: "mosquitto_passwd", Package: "mosquitto", For: "the Mosquitto password file tests"},
	{Name: "qemu-arm-static", Package: "qemu-user-static", For: "the 32-bit ARM agent tests"},
	{Name: "qemu-aarch64-static", Package: "qemu-user-static", For: "the arm64 agent and container tests"},
	{Name: "shellcheck", Package: "shellcheck", For: "linting arm/install.sh"},
	{Name: "systemd-analyze", Package: "systemd", For: "checking the agent's systemd unit"},
	{Name: "chromium", Package: "chromium", For: "the dashboard's browser tests (driven by chromedp)"},
	{Name: "busybox", Package: "busybox-static", For: "the test image with a shell (fleet exec tests)"},
	{Name: "prometheus", Package: "prometheus", For: "the Prometheus alert-rule tests (a real scraper against a real hub)"},
	{Name: "promtool", Package: "prometheus", For: "checking and unit-testing fleet-examples/prometheus/fleet-rules.yml"},
	{Name: "node", Package: "nodejs", For: "the Node-RED example flow's test (a real Node-RED from npm)"},
	{Name: "npm", Package: "npm", For: "installing the pinned Node-RED for its test"},
	{Name: "etcd", Package: "etcd-server", Dirs: sbin, For: "the store conformance suite on a real 3-member etcd cluster"},
}

var sbin = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

// Find returns where the tool is, or an error naming the package.
func (t Tool) Find() (string, error) {
	if filepath.IsAbs(t.Name) {
		if _, err := os.Stat(t.Name); err != nil {
			return "", t.missing()
		}
		return t.Name, nil
	}
	if p, err := exec.LookPath(t.Name); err == nil {
		return p, nil
	}
	for _, d := range t.Dirs {
		p := filepath.Join(d, t.Name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", t.missing()
}

func (t Tool) missing() error {
	return fmt.Errorf("%s not found, needed for %s: `make test` installs it, or run: %s",
		t.Name, t.For, InstallLine([]string{t.Package}, false))
}

// Lookup returns the tool of that name from Tools.
func Lookup(name string) (Tool, bool) {
	i := slices.IndexFunc(Tools, func(t Tool) bool { return t.Name == name })
	if i < 0 {
		return Tool{}, false
	}
	return Tools[i], true
}

// Path finds a tool of Tools by name.
func Path(name string) (string, error) {
	t, ok := Lookup(name)
	if !ok {
		return "", fmt.Errorf("sysdeps: %q is not in the list of test tools", name)
	}
	return t.Find()
}

// Require returns the path of a tool of Tools. A missing tool skips the
// test under -short and fails it otherwise, with the install line.
func Require(tb testing.TB, name string) string {
	tb.Helper()
	p, err := Path(name)
	if err != nil {
		if testing.Short() {
			tb.Skipf("%v (skipped under -short)", err)
		}
		tb.Fatal(err)
	}
	return p
}

// Missing returns the tools find cannot find, in the order of tools.
func Missing(tools []Tool, find func(Tool) error) []Tool {
	var out []Tool
	for _, t := range tools {
		if find(t) != nil {
			out = append(out, t)
		}
	}
	return out
}

// Packages returns the distinct packages of tools, in order.
func Packages(tools []Tool) []string {
	var pkgs []string
	for _, t := range tools {
		if !slices.Contains(pkgs, t.Package) {
			pkgs = append(pkgs, t.Package)
		}
	}
	return pkgs
}

// InstallLine is the apt-get command that installs pkgs, through sudo when
// the caller is not root.
func InstallLine(pkgs []string, root bool) string {
	line := "apt-get install -y --no-install-recommends " + strings.Join(pkgs, " ")
	if !root {
		line = "sudo " + line
	}
	return line
}

// Host is what the decision depends on besides the missing tools.
type Host struct {
	Root      bool // running as uid 0
	Apt       bool // apt-get exists (Debian or a derivative)
	Sudo      bool // sudo -n true succeeds (sudo without a password)
	CheckOnly bool // report, never install
}

// Action is what to do about missing tools.
type Action int

const (
	// Nothing: every tool is present.
	Nothing Action = iota
	// Install runs Plan.Commands.
	Install
	// Stop prints Plan.Message and fails.
	Stop
)

// Plan is the decision: an action, the commands to run for Install, and
// the message to print.
type Plan struct {
	Action   Action
	Packages []string
	Commands [][]string
	Message  string
}

// Decide is the whole policy of `make test` about missing tools, as a pure
// function so that it is tested without a fresh machine.
func Decide(missing []Tool, h Host) Plan {
	if len(missing) == 0 {
		return Plan{Action: Nothing, Message: "test dependencies: all present"}
	}
	pkgs := Packages(missing)
	var b strings.Builder
	b.WriteString("test dependencies missing:\n")
	for _, t := range missing {
		fmt.Fprintf(&b, "  %-24s (%s) for %s\n", t.Name, t.Package, t.For)
	}
	switch {
	case !h.Apt:
		fmt.Fprintf(&b, "this machine has no apt-get: install the packages named above (Debian names) with its package manager, then run make test again")
		return Plan{Action: Stop, Packages: pkgs, Message: b.String()}
	case h.CheckOnly:
		fmt.Fprintf(&b, "install them with:\n  %s", InstallLine(pkgs, h.Root))
		return Plan{Action: Stop, Packages: pkgs, Message: b.String()}
	case !h.Root && !h.Sudo:
		fmt.Fprintf(&b, "not root and sudo needs a password: install them with\n  %s\nthen run make test again", InstallLine(pkgs, false))
		return Plan{Action: Stop, Packages: pkgs, Message: b.String()}
	}
	var prefix []string
	if !h.Root {
		prefix = []string{"sudo", "-n"}
	}
	install := append(append(slices.Clone(prefix), "apt-get", "install", "-y", "-q", "--no-install-recommends"), pkgs...)
	update := append(slices.Clone(prefix), "apt-get", "update", "-q")
	fmt.Fprintf(&b, "installing: %s", strings.Join(pkgs, " "))
	return Plan{Action: Install, Packages: pkgs, Commands: [][]string{update, install}, Message: b.String()}
}

// ErrMissing is returned by the installer when tools are still missing.
var ErrMissing = errors.New("test dependencies missing")
