package sysdeps

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func tools(names ...string) []Tool {
	var out []Tool
	for _, n := range names {
		t, ok := Lookup(n)
		if !ok {
			panic("no tool " + n)
		}
		out = append(out, t)
	}
	return out
}

// TestDecide is the fresh-machine decision of `make test`: what it runs,
// or the one line it prints, for each kind of machine.
func TestDecide(t *testing.T) {
	fresh := tools("gcc", "/usr/include/stdio.h", "containerd", "containerd-shim-runc-v2", "runc",
		"mosquitto", "mosquitto_sub", "mosquitto_passwd", "qemu-arm-static", "shellcheck")
	wantPkgs := "gcc libc6-dev containerd runc mosquitto mosquitto-clients qemu-user-static shellcheck"
	cases := []struct {
		name     string
		missing  []Tool
		host     Host
		action   Action
		commands []string // joined with " ; "
		message  []string // substrings of the message
	}{
		{name: "all present", host: Host{Root: true, Apt: true}, action: Nothing,
			message: []string{"all present"}},
		{name: "all present, user without sudo", host: Host{}, action: Nothing},
		{name: "fresh machine as root installs in one step", missing: fresh, host: Host{Root: true, Apt: true}, action: Install,
			commands: []string{"apt-get update -q ; apt-get install -y -q --no-install-recommends " + wantPkgs},
			message:  []string{"installing: " + wantPkgs, "mosquitto_sub", "(mosquitto-clients)"}},
		{name: "user with passwordless sudo installs through sudo", missing: tools("mosquitto", "shellcheck"), host: Host{Apt: true, Sudo: true}, action: Install,
			commands: []string{"sudo -n apt-get update -q ; sudo -n apt-get install -y -q --no-install-recommends mosquitto shellcheck"}},
		{name: "user without sudo gets the one line", missing: fresh, host: Host{Apt: true}, action: Stop,
			message: []string{"sudo apt-get install -y --no-install-recommends " + wantPkgs, "then run make test again"}},
		{name: "check only as root prints the line without sudo", missing: tools("gcc"), host: Host{Root: true, Apt: true, CheckOnly: true}, action: Stop,
			message: []string{"\n  apt-get install -y --no-install-recommends gcc"}},
		{name: "no apt-get names the Debian packages", missing: tools("qemu-aarch64-static"), host: Host{Root: true}, action: Stop,
			message: []string{"qemu-user-static", "no apt-get"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Decide(c.missing, c.host)
			if p.Action != c.action {
				t.Fatalf("action %d, want %d; message:\n%s", p.Action, c.action, p.Message)
			}
			var cmds []string
			for _, cmd := range p.Commands {
				cmds = append(cmds, strings.Join(cmd, " "))
			}
			if got, want := strings.Join(cmds, " ; "), strings.Join(c.commands, " ; "); got != want {
				t.Errorf("commands:\n got %q\nwant %q", got, want)
			}
			for _, m := range c.message {
				if !strings.Contains(p.Message, m) {
					t.Errorf("message lacks %q:\n%s", m, p.Message)
				}
			}
			if c.action == Stop && strings.Count(p.Message, "apt-get install") > 1 {
				t.Errorf("more than one install line:\n%s", p.Message)
			}
		})
	}
}

func TestPackagesDistinctInOrder(t *testing.T) {
	got := Packages(tools("mosquitto_sub", "mosquitto", "mosquitto_pub", "qemu-arm-static", "qemu-aarch64-static"))
	if want := []string{"mosquitto-clients", "mosquitto", "qemu-user-static"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestFindSearchesExtraDirs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-fake-daemon")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	tool := Tool{Name: "fleet-fake-daemon", Package: "fake", Dirs: []string{dir}, For: "this test"}
	if p, err := tool.Find(); err != nil || p != bin {
		t.Fatalf("Find = %q, %v; want %q", p, err, bin)
	}
	tool.Dirs = nil
	_, err := tool.Find()
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y --no-install-recommends fake") {
		t.Fatalf("missing tool error %v does not give the install line", err)
	}
}

func TestEveryToolHasAPackageAndAReason(t *testing.T) {
	seen := map[string]bool{}
	for _, tool := range Tools {
		if tool.Package == "" || tool.For == "" {
			t.Errorf("%s: package %q, for %q", tool.Name, tool.Package, tool.For)
		}
		if seen[tool.Name] {
			t.Errorf("%s listed twice", tool.Name)
		}
		seen[tool.Name] = true
	}
	if _, err := Path("no-such-tool"); err == nil {
		t.Error("Path of an unlisted tool succeeded")
	}
}

// TestPrometheusTools: the alert-rule tests find Prometheus and promtool
// through the list, both from Debian's prometheus package (one install).
func TestPrometheusTools(t *testing.T) {
	got := Packages(tools("prometheus", "promtool"))
	if want := []string{"prometheus"}; !slices.Equal(got, want) {
		t.Errorf("packages %v, want %v", got, want)
	}
	p := Decide(tools("promtool"), Host{Apt: true})
	if !strings.Contains(p.Message, "apt-get install -y --no-install-recommends prometheus") {
		t.Errorf("a missing promtool does not give the prometheus install line:\n%s", p.Message)
	}
}

// The store conformance suite's etcd cluster runs Debian's etcd-server:
// the tool is listed under that package and found in the usual places.
func TestEtcdServerIsListed(t *testing.T) {
	tool, ok := Lookup("etcd")
	if !ok {
		t.Fatal("etcd is not in the list of test tools")
	}
	if tool.Package != "etcd-server" || !strings.Contains(tool.For, "etcd") {
		t.Fatalf("etcd listed as %+v, want package etcd-server", tool)
	}
	if !slices.Contains(tool.Dirs, "/usr/sbin") {
		t.Fatalf("etcd is not looked for in /usr/sbin: %v", tool.Dirs)
	}
}
