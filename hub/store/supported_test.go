package store

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestNotYetRunRefused: what the schema accepts but the fleet does not run
// yet is refused with the field named, never stored.
func TestNotYetRunRefused(t *testing.T) {
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
		_, _, err := s.Apply(t.Context(), o, false)
		var ve *schema.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "not supported by this hub yet") {
			t.Errorf("%s: %v", o.GetTypeMeta().Kind, err)
		}
	}
	deps, _, err := s.ListDeployments(t.Context(), nil)
	if err != nil || len(deps) != 0 {
		t.Errorf("stored: %v %v", deps, err)
	}
}
