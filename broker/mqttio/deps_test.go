package mqttio

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf guards what makes this package usable by every MQTT client of
// Fleet, the edge agent included: it imports the standard library and
// paho, nothing of Fleet's (the rest of broker/ links mochi-mqtt) and
// nothing else.
func TestLeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") || strings.HasPrefix(imp, "github.com/eclipse/paho.mqtt.golang") {
			continue // the standard library, or paho
		}
		t.Errorf("mqttio imports %s: it must stay a leaf (standard library and paho only)", imp)
	}
}
