// Package examples holds the manifests users copy; its test validates each
// one with the same decoder the hub uses.
package examples

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	demo, err := filepath.Glob("demo/*.yaml")
	if err != nil || len(demo) == 0 {
		t.Fatalf("demo manifests: %v %v", demo, err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d example manifests, want at least 4", len(files))
	}
	kinds := map[string]int{}
	for _, f := range append(files, demo...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := schema.DecodeManifests(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, o := range objs {
			kinds[o.GetTypeMeta().Kind]++
		}
	}
	if kinds[schema.KindDeployment] < 4+len(demo) {
		t.Errorf("got %d example deployments, want at least 4", kinds[schema.KindDeployment])
	}
}
