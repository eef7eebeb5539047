package homeassistant_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/homeassistant"
	"github.com/fleetmq/fleet/hub/homeassistant/hatest"
	"github.com/fleetmq/fleet/schema"
)

// statusJSON is a DeviceStatus as an agent publishes it, with the figures
// a Raspberry Pi reports (temperature and throttling are in the JSON as
// raw keys: the configs follow whatever node keys a status carries).
const statusJSON = `{"apiVersion":"fleet/v1","kind":"DeviceStatus","device":"pi-1","observedGeneration":4,
"time":"2026-12-02T05:00:00Z","agent":{"version":"v1.4.0","os":"linux","arch":"arm64"},
"node":{"hostname":"pi-1","memoryTotalBytes":4000000000,"memoryAvailableBytes":2500000000,
"diskTotalBytes":32000000000,"diskFreeBytes":12000000000,"temperatureCelsius":48.3,"throttled":"0x50005"},
"pods":[{"name":"web","phase":"Running","ready":true,"restarts":2,"containers":[]},
{"name":"job","phase":"Succeeded","ready":false,"restarts":0,"containers":[]},
{"name":"cam","phase":"Pending","ready":false,"restarts":3,"containers":[]}]}`

func nodeKeys(t *testing.T, status string) map[string]bool {
	t.Helper()
	var st struct {
		Node map[string]json.RawMessage `json:"node"`
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for k := range st.Node {
		keys[k] = true
	}
	return keys
}

func TestConfigsEntities(t *testing.T) {
	full := homeassistant.Device{Name: "pi-1", UID: "0c1d", AgentVersion: "v1.4.0", OS: "linux", Arch: "arm64", Node: nodeKeys(t, statusJSON)}
	cases := []struct {
		name string
		dev  homeassistant.Device
		want []string // object ids
	}{
		{"before the first report", homeassistant.Device{Name: "new", UID: "9"},
			[]string{"online", "pods_running", "pods_desired", "converged", "restarts"}},
		{"x86 without temperature", homeassistant.Device{Name: "box", UID: "7", Node: map[string]bool{"memoryAvailableBytes": true, "diskFreeBytes": true}},
			[]string{"online", "pods_running", "pods_desired", "converged", "restarts", "memory_available", "disk_free"}},
		{"raspberry pi", full,
			[]string{"online", "pods_running", "pods_desired", "converged", "restarts", "memory_available", "disk_free", "temperature", "throttled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			configs, err := homeassistant.Configs(homeassistant.Options{Version: "v9"}, tc.dev)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range configs {
				hc, err := hatest.Check(homeassistant.DefaultPrefix, c.Topic, c.Payload)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, hc.ObjectID)
				if hc.NodeID != "fleet_"+tc.dev.Name {
					t.Errorf("%s: node_id %q", c.Topic, hc.NodeID)
				}
				if av := hc.AvailabilityTopics(); len(av) != 1 || av[0] != "fleet/v1/devices/"+tc.dev.Name+"/online" {
					t.Errorf("%s: availability %v", c.Topic, av)
				}
				if uid := hc.String("unique_id"); uid != "fleet_"+tc.dev.UID+"_"+hc.ObjectID {
					t.Errorf("%s: unique_id %q", c.Topic, uid)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("entities %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConfigsTemplatesRender(t *testing.T) {
	dev := homeassistant.Device{Name: "pi-1", UID: "u1", Node: nodeKeys(t, statusJSON)}
	configs, err := homeassistant.Configs(homeassistant.Options{}, dev)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pods_running":     "1",
		"pods_desired":     "3",
		"converged":        "False", // cam is pending
		"restarts":         "5",
		"memory_available": "2500000000",
		"disk_free":        "12000000000",
		"temperature":      "48.3",
		"throttled":        "0x50005",
	}
	for _, c := range configs {
		hc, err := hatest.Check(homeassistant.DefaultPrefix, c.Topic, c.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if hc.ObjectID == "online" {
			if hc.String("state_topic") != "fleet/v1/devices/pi-1/online" || hc.String("payload_on") != schema.Online || hc.String("payload_off") != schema.Offline {
				t.Errorf("online: %s", c.Payload)
			}
			continue
		}
		if hc.String("state_topic") != "fleet/v1/devices/pi-1/status" {
			t.Errorf("%s: state_topic %q", hc.ObjectID, hc.String("state_topic"))
		}
		got, err := hatest.Render(hc.String("value_template"), []byte(statusJSON))
		if err != nil {
			t.Fatalf("%s: %v", hc.ObjectID, err)
		}
		if got != want[hc.ObjectID] {
			t.Errorf("%s: %s renders %q, want %q", hc.ObjectID, hc.String("value_template"), got, want[hc.ObjectID])
		}
		if on := hc.String("payload_on"); on != "" && got != on && got != hc.String("payload_off") {
			t.Errorf("%s renders %q, neither payload_on nor payload_off", hc.ObjectID, got)
		}
	}
}

func TestConfigsConvergedWhenEveryPodIsDone(t *testing.T) {
	configs, err := homeassistant.Configs(homeassistant.Options{}, homeassistant.Device{Name: "a", UID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range configs {
		if !strings.Contains(c.Topic, "/converged/") {
			continue
		}
		var p homeassistant.Payload
		if err := json.Unmarshal(c.Payload, &p); err != nil {
			t.Fatal(err)
		}
		for status, want := range map[string]string{
			`{"pods":[]}`: "True",
			`{"pods":[{"name":"a","phase":"Running","ready":true,"restarts":0},{"name":"b","phase":"Succeeded","ready":false,"restarts":0}]}`: "True",
			`{"pods":[{"name":"a","phase":"Failed","ready":false,"restarts":4}]}`:                                                             "False",
		} {
			if got, err := hatest.Render(p.ValueTemplate, []byte(status)); err != nil || got != want {
				t.Errorf("converged on %s: %q, %v; want %q", status, got, err, want)
			}
		}
		return
	}
	t.Fatal("no converged config")
}

func TestConfigsStableAndSecretFree(t *testing.T) {
	dev := homeassistant.Device{Name: "pi-1", UID: "u1", AgentVersion: "v1", OS: "linux", Arch: "arm"}
	opts := homeassistant.Options{Topics: schema.Topics{Prefix: "site/a"}, Prefix: "ha", Version: "v2"}
	a, err := homeassistant.Configs(opts, dev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := homeassistant.Configs(opts, dev)
	for i := range a {
		if a[i].Topic != b[i].Topic || string(a[i].Payload) != string(b[i].Payload) {
			t.Fatalf("configs differ between two calls: %s", a[i].Topic)
		}
		if !strings.HasPrefix(a[i].Topic, "ha/") {
			t.Errorf("topic %q not under the prefix ha", a[i].Topic)
		}
		hc, err := hatest.Check("ha", a[i].Topic, a[i].Payload)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(hc.String("state_topic"), "site/a/devices/pi-1/") {
			t.Errorf("state_topic %q", hc.String("state_topic"))
		}
		for _, bad := range []string{"token", "password", "secret", "publicKey"} {
			if strings.Contains(strings.ToLower(string(a[i].Payload)), strings.ToLower(bad)) {
				t.Errorf("%s mentions %s: %s", a[i].Topic, bad, a[i].Payload)
			}
		}
	}
	var p homeassistant.Payload
	json.Unmarshal(a[0].Payload, &p)
	if p.Device.SWVersion != "v1" || p.Device.Model != "fleet-agent linux/arm" || p.Device.Manufacturer != "Fleet" || p.Origin.SWVersion != "v2" {
		t.Errorf("device block %+v origin %+v", p.Device, p.Origin)
	}
}

func TestConfigsRefusesBadName(t *testing.T) {
	for _, name := range []string{"", "a/b", "+", "#", "UPPER"} {
		if _, err := homeassistant.Configs(homeassistant.Options{}, homeassistant.Device{Name: name}); err == nil {
			t.Errorf("device name %q accepted", name)
		}
	}
}

func TestDeviceFromStatus(t *testing.T) {
	var st schema.DeviceStatus
	if err := json.Unmarshal([]byte(statusJSON), &st); err != nil {
		t.Fatal(err)
	}
	d := homeassistant.DeviceFromStatus("pi-1", "u", &st)
	if d.AgentVersion != "v1.4.0" || d.OS != "linux" || d.Arch != "arm64" {
		t.Errorf("agent %+v", d)
	}
	if !d.Node["memoryAvailableBytes"] || !d.Node["diskFreeBytes"] {
		t.Errorf("node keys %v", d.Node)
	}
	if d := homeassistant.DeviceFromStatus("x", "u", nil); d.Name != "x" || d.Node != nil {
		t.Errorf("no status: %+v", d)
	}
}
