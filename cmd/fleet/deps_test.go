package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDependencies pins what the CLI may link: it talks to the hub over
// HTTP only (through client/), so it must not pull in any of the hub's
// packages, the broker, MQTT or the container runtime; of client-go, only the JSONPath of -o jsonpath,
// custom-columns and --sort-by (and the template code it uses), never the
// API machinery of a Kubernetes client.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/dgraph-io/badger",
		"go.etcd.io/",
		"github.com/mochi-mqtt/",
		"github.com/eclipse/paho.mqtt.golang",
		"github.com/containerd/",
		"github.com/fleetmq/fleet/hub",
		"github.com/fleetmq/fleet/client/fakehubtest",
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

// TestFakeHubIsTestOnly: client/fakehubtest, the in-memory hub, is for
// tests. No non-test file in the module may import it, so that no binary
// and no library a user imports carries a fake hub.
func TestFakeHubIsTestOnly(t *testing.T) {
	const fake = "github.com/fleetmq/fleet/client/fakehubtest"
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == fake {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: only _test.go files may", rel, fake)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d non-test .go files under %s: expected the whole module", files, root)
	}
}
