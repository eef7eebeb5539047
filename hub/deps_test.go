package hub

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies pins what the hub may link: not the client package
// (the CLI's library; hub/adminconf keeps admin.conf's format itself) nor
// anything under it, and not the edge agent. The leaves the root wires (hub/pki, hub/enrollment,
// hub/mosquitto, hub/adminconf, hub/memtrim) must never import the root.
func TestDependencies(t *testing.T) {
	const module = "github.com/fleetmq/fleet/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, f := range []string{"client", "edgeagent", "cmd"} {
			if under(dep, module+f) {
				t.Errorf("hub links %s", dep)
			}
		}
	}
	leaves := []string{"hub/pki", "hub/enrollment", "hub/mosquitto", "hub/adminconf", "hub/memtrim"}
	for _, leaf := range leaves {
		found := false
		for _, dep := range deps {
			found = found || dep == module+leaf
		}
		if !found {
			t.Errorf("hub does not link %s: update this test", leaf)
		}
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+strings.TrimPrefix(leaf, "hub/")).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", leaf, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"hub" || under(dep, module+"client") {
				t.Errorf("%s links %s", leaf, dep)
			}
		}
	}
}

// under reports whether package dep is pkg or one of its sub-packages.
func under(dep, pkg string) bool { return dep == pkg || strings.HasPrefix(dep, pkg+"/") }
