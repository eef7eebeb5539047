package examples

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
)

// TestNodeREDFlow checks the Node-RED example without Node-RED (the real
// run is test/e2e_nodered_test.go): it reads Fleet's own topics, which a
// monitor credential may read, and the file carries no credentials.
func TestNodeREDFlow(t *testing.T) {
	raw, err := os.ReadFile("node-red/fleet-alerts.json")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(raw, &nodes); err != nil {
		t.Fatalf("fleet-alerts.json: %v", err)
	}
	var topics schema.Topics
	want := map[string]bool{topics.DeviceFilter(schema.TopicOnline): false, topics.DeploymentStatus("+"): false}
	monitor := broker.Identity{Name: "node-red", Role: broker.RoleMonitor}
	ids := map[string]bool{}
	for _, n := range nodes {
		ids[n["id"].(string)] = true
	}
	for _, n := range nodes {
		if _, ok := n["credentials"]; ok {
			t.Errorf("node %v carries credentials", n["id"])
		}
		switch n["type"] {
		case "mqtt in":
			topic, _ := n["topic"].(string)
			if _, ok := want[topic]; !ok {
				t.Errorf("mqtt in %v reads %q, not one of Fleet's alert topics", n["id"], topic)
			}
			want[topic] = true
			if !broker.Allowed(topics, monitor, topic, false) {
				t.Errorf("a monitor may not subscribe to %q", topic)
			}
			if !ids[n["broker"].(string)] {
				t.Errorf("mqtt in %v: broker %v is not in the flow", n["id"], n["broker"])
			}
		case "mqtt-broker":
			if n["broker"] != "${FLEET_MQTT_HOST}" || n["port"] != "${FLEET_MQTT_PORT}" {
				t.Errorf("broker node: %v:%v, want the FLEET_MQTT_HOST and FLEET_MQTT_PORT environment", n["broker"], n["port"])
			}
		}
		for _, wires := range asList(n["wires"]) {
			for _, w := range asList(wires) {
				if !ids[w.(string)] {
					t.Errorf("node %v wired to missing node %v", n["id"], w)
				}
			}
		}
	}
	// What the online topic feeds compares with Fleet's own payload.
	byID := map[string]map[string]any{}
	for _, n := range nodes {
		byID[n["id"].(string)] = n
	}
	for _, n := range nodes {
		if n["type"] != "mqtt in" || n["topic"] != topics.DeviceFilter(schema.TopicOnline) {
			continue
		}
		for _, wires := range asList(n["wires"]) {
			for _, w := range asList(wires) {
				if src, _ := byID[w.(string)]["func"].(string); !strings.Contains(src, `"`+schema.Offline+`"`) {
					t.Errorf("node %v, fed by the online topic, does not compare with %q", w, schema.Offline)
				}
			}
		}
	}
	for topic, seen := range want {
		if !seen {
			t.Errorf("no mqtt in node reads %s", topic)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
