// Package examples holds the manifests users copy; its test validates each
// one with the same decoder the hub uses.
package examples

import (
	"os"
	"path/filepath"
	"regexp"
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

// workloadFields are the pod and config fields of real edge workloads
// (devices, config and secrets, volumes, probes, init containers, ports):
// each appears in some example, so users find one to copy.
var workloadFields = []string{
	"initContainers", "volumes", "terminationGracePeriodSeconds", "imagePullSecrets",
	"envFrom", "prefix", "valueFrom", "configMapKeyRef", "secretKeyRef", "configMapRef", "secretRef",
	"volumeMounts", "subPath", "readOnly", "devices", "containerPath", "permissions",
	"securityContext", "privileged", "capabilities", "runAsUser", "runAsGroup", "readOnlyRootFilesystem",
	"ports", "containerPort", "protocol",
	"livenessProbe", "readinessProbe", "startupProbe", "exec", "httpGet", "tcpSocket", "scheme", "httpHeaders",
	"initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold",
	"lifecycle", "preStop",
	"hostPath", "emptyDir", "medium", "sizeLimit", "persistent", "reclaimPolicy",
	"configMap", "secret", "secretName", "items", "defaultMode", "optional",
	"stringData", "binaryData",
}

func TestExamplesShowEveryWorkloadField(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	for _, k := range workloadFields {
		if !regexp.MustCompile(`(^|[\s{,-])` + regexp.QuoteMeta(k) + `:`).Match(all) {
			t.Errorf("no example manifest uses %s", k)
		}
	}
}
