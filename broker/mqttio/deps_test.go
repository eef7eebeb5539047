package mqttio

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf guards what makes this package usable by every MQTT client of
// Fleet, the edge agent included: it imports the standard library and
// paho and schema (where the broker URL rules live), nothing else of
// Fleet's (the rest of broker/ links mochi-mqtt) and nothing else.
func TestLeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") || strings.HasPrefix(imp, "github.com/eclipse/paho.mqtt.golang") || imp == "github.com/fleetmq/fleet/schema" {
			continue // the standard library, paho, or schema
		}
		t.Errorf("mqttio imports %s: it must stay a leaf (standard library, paho and schema only)", imp)
	}
}
