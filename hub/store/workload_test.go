package store

import (
	"os"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestWorkloadExampleStored: the workload example of the issue (a Secret,
// a ConfigMap, and a Deployment with init containers, devices, a
// securityContext, volumes, probes and ports) is stored as written, every
// field intact; the Secret's values are not returned.
func TestWorkloadExampleStored(t *testing.T) {
	s := openTest(t, Options{})
	data, err := os.ReadFile("../../schema/testdata/issue26-sensor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := schema.DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, _, err := s.Apply(t.Context(), o, false); err != nil {
			t.Fatalf("%s: %v", o.GetTypeMeta().Kind, err)
		}
	}
	got, err := s.Get(t.Context(), schema.KindDeployment, "sensor")
	if err != nil {
		t.Fatal(err)
	}
	spec := got.(*schema.Deployment).Spec.Template.Spec
	c := spec.Containers[0]
	if len(spec.InitContainers) != 1 || len(spec.Volumes) != 3 || len(c.Devices) != 1 || c.SecurityContext == nil ||
		c.LivenessProbe == nil || c.ReadinessProbe == nil || len(c.Ports) != 1 || len(c.VolumeMounts) != 3 || c.Env[0].ValueFrom == nil {
		t.Errorf("stored spec lost fields: %+v", spec)
	}
	sec, err := s.Get(t.Context(), schema.KindSecret, "gateway-creds")
	if err != nil {
		t.Fatal(err)
	}
	if d := sec.(*schema.Secret).Data; len(d) != 0 {
		t.Errorf("the store returned the Secret's values: %v", d)
	}
}
