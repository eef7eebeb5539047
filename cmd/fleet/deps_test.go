package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies pins what the CLI may link: it talks to the hub over
// HTTP only, so it must not pull in the store, the broker, MQTT or the
// container runtime.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/dgraph-io/badger",
		"github.com/mochi-mqtt/",
		"github.com/eclipse/paho.mqtt.golang",
		"github.com/containerd/",
		"github.com/fleetmq/fleet/hub/store",
		"github.com/fleetmq/fleet/hub/api",
		"github.com/fleetmq/fleet/broker",
		"github.com/fleetmq/fleet/edgeagent",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("fleet links %s", dep)
			}
		}
	}
}
