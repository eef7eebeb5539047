package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies pins what the CLI may link: it talks to the hub over
// HTTP only, so it must not pull in the store, the broker, MQTT or the
// container runtime; of client-go, only the JSONPath of -o jsonpath,
// custom-columns and --sort-by (and the template code it uses), never the
// API machinery of a Kubernetes client.
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
	clientGo := []string{
		"k8s.io/client-go/util/jsonpath",
		"k8s.io/client-go/third_party/forked/golang/template",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("fleet links %s", dep)
			}
		}
		if strings.HasPrefix(dep, "k8s.io/client-go/") && !slices.Contains(clientGo, dep) {
			t.Errorf("fleet links %s: of client-go, only %v", dep, clientGo)
		}
		if strings.HasPrefix(dep, "k8s.io/api/") || strings.HasPrefix(dep, "k8s.io/apimachinery/pkg/runtime") {
			t.Errorf("fleet links %s: Kubernetes API types are not Fleet's", dep)
		}
	}
}
