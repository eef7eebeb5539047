package printers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) *time.Time {
	t := now.Add(-d)
	return &t
}

func deployment(name string, st *schema.DeploymentStatus) *schema.Deployment {
	return &schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: name, Generation: 3, ResourceVersion: "17", CreationTimestamp: ago(90 * time.Minute)},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: map[string]string{"site": "lab", "app": "web"}},
			Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{
				{Name: "web", Image: "nginx:1.25"}, {Name: "log", Image: "busybox"},
			}}},
			Strategy: schema.Strategy{Type: schema.StrategyRollingUpdate, RollingUpdate: &schema.RollingUpdate{MaxUnavailable: "1"}},
		},
		Status: st,
	}
}

func device(name string, st *schema.DeviceObservedInfo) *schema.Device {
	return &schema.Device{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
		Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{"fleet/device": name, "site": "lab"}, CreationTimestamp: ago(3 * 24 * time.Hour)},
		Status:   st,
	}
}

func seenDevice() *schema.Device {
	return device("pi-kitchen", &schema.DeviceObservedInfo{
		Online: true, LastSeen: ago(5 * time.Second), DesiredGeneration: 4, ObservedGeneration: 4, Converged: true,
		Agent: &schema.AgentInfo{Version: "v0.3.1", OS: "linux", Arch: "arm64"},
		Pods: []schema.PodStatus{
			{Name: "web", Phase: schema.PhaseRunning, Ready: true},
			{Name: "mqtt", Phase: schema.PhasePending},
		},
	})
}

func TestJSONAndYAML(t *testing.T) {
	objs := []schema.Object{seenDevice(), device("pi-new", nil)}
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			// A list prints the typed List with its resourceVersion.
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: f}
			if err := p.PrintList(client.Devices, objs, "42"); err != nil {
				t.Fatal(err)
			}
			var l schema.DeviceList
			if err := yaml.UnmarshalStrict(b.Bytes(), &l); err != nil {
				t.Fatalf("%v in\n%s", err, b.String())
			}
			if l.Kind != "DeviceList" || l.APIVersion != schema.APIVersion || l.Metadata.ResourceVersion != "42" || len(l.Items) != 2 || l.Items[0].Status.Agent.Arch != "arm64" {
				t.Fatalf("list: %+v", l)
			}
			// An empty list is still a list.
			b.Reset()
			p.PrintList(client.Deployments, nil, "1")
			var dl map[string]any
			if err := yaml.Unmarshal(b.Bytes(), &dl); err != nil || dl["kind"] != "DeploymentList" || dl["items"] == nil {
				t.Fatalf("empty list: %s (%v)", b.String(), err)
			}
			// One object prints the object.
			b.Reset()
			if err := p.PrintObject(deployment("web", nil)); err != nil {
				t.Fatal(err)
			}
			var d schema.Deployment
			if err := yaml.UnmarshalStrict(b.Bytes(), &d); err != nil || d.Kind != "Deployment" || d.Metadata.Generation != 3 {
				t.Fatalf("object: %+v (%v)", d, err)
			}
		})
	}
}

func TestWatchOutput(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: Table, WatchEvents: true, Now: func() time.Time { return now }}
	if err := p.StartWatch(client.Devices, []schema.Object{device("pi-1", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := p.PrintEvent(client.Event{Type: schema.WatchModified, Object: seenDevice()}); err != nil {
		t.Fatal(err)
	}
	want := `EVENT      NAME   ONLINE   LAST-SEEN   GENERATION   PODS   CONVERGED   AGE
ADDED      pi-1   false    <never>     0/0          0/0    false       3d
MODIFIED   pi-kitchen   true     5s          4/4          1/2    true        3d
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}

	// -o json -w: one object per event; with WatchEvents, {type, object}.
	b.Reset()
	p = &Printer{Out: &b, Format: JSON}
	p.StartWatch(client.Devices, []schema.Object{device("pi-1", nil)})
	p.PrintEvent(client.Event{Type: schema.WatchDeleted, Object: device("pi-1", nil)})
	dec := json.NewDecoder(&b)
	for i := range 2 {
		var d schema.Device
		if err := dec.Decode(&d); err != nil || d.Metadata.Name != "pi-1" {
			t.Fatalf("object %d: %+v, %v", i, d, err)
		}
	}
	b.Reset()
	p = &Printer{Out: &b, Format: JSON, WatchEvents: true}
	p.PrintEvent(client.Event{Type: schema.WatchDeleted, Object: device("pi-1", nil)})
	var ev struct {
		Type   string        `json:"type"`
		Object schema.Device `json:"object"`
	}
	if err := json.Unmarshal(b.Bytes(), &ev); err != nil || ev.Type != "DELETED" || ev.Object.Metadata.Name != "pi-1" {
		t.Fatalf("event: %+v, %v", ev, err)
	}
}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in       string
		format   Format
		template string
		err      string
	}{
		{"", Table, "", ""},
		{"wide", Wide, "", ""},
		{"name", Name, "", ""},
		{"jsonpath={.items[*].metadata.name}", JSONPath, "{.items[*].metadata.name}", ""},
		{"jsonpath={.a}={.b}", JSONPath, "{.a}={.b}", ""},
		{"jsonpath-file=tmpl.txt", JSONPathFile, "tmpl.txt", ""},
		{"custom-columns=NAME:.metadata.name", CustomColumns, "NAME:.metadata.name", ""},
		{"jsonpath", "", "", "-o jsonpath needs an argument: jsonpath=TEMPLATE"},
		{"jsonpath=", "", "", "-o jsonpath needs an argument"},
		{"custom-columns", "", "", "custom-columns=HEADER:PATH,..."},
		{"jason", "", "", `unknown output format "jason": want one of table, wide, json, yaml, name, jsonpath=TEMPLATE, jsonpath-file=FILE or custom-columns=HEADER:PATH,...`},
		{"go-template={{.x}}", "", "", "unknown output format"},
	}
	for _, tt := range tests {
		f, tmpl, err := ParseOutput(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseOutput(%q) = %v, want an error with %q", tt.in, err, tt.err)
			}
		} else if err != nil || f != tt.format || tmpl != tt.template {
			t.Errorf("ParseOutput(%q) = %q, %q, %v; want %q, %q", tt.in, f, tmpl, err, tt.format, tt.template)
		}
		// ParseFormat takes the formats without a template only.
		f, err = ParseFormat(tt.in)
		switch {
		case tt.err != "" || tmpl != "":
			if err == nil {
				t.Errorf("ParseFormat(%q) = %q, want an error", tt.in, f)
			}
		case err != nil || f != tt.format:
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", tt.in, f, err, tt.format)
		}
	}
}
