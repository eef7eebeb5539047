package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// templateDevices: names that sort differently as text and naturally, a
// device that never reported (no status at all) and one with a big
// generation.
func templateDevices() []schema.Object {
	d10 := device("pi-10", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Minute), DesiredGeneration: 1000000, ObservedGeneration: 1000000})
	d10.Metadata.Labels["tier"] = "edge"
	d2 := device("pi-2", &schema.DeviceObservedInfo{Online: false, LastSeen: ago(time.Hour), DesiredGeneration: 9, ObservedGeneration: 7})
	return []schema.Object{seenDevice(), d10, device("pi-new", nil), d2}
}

func TestTemplateFormats(t *testing.T) {
	// web runs nginx:1.25 and busybox, db mysql.
	db := deployment("db", &schema.DeploymentStatus{Targeted: 9})
	db.Spec.Template.Spec.Containers = []schema.Container{{Name: "db", Image: "mysql:8"}}
	deps := []schema.Object{
		deployment("web", &schema.DeploymentStatus{Targeted: 12}),
		db,
		deployment("cache", &schema.DeploymentStatus{Targeted: 100}),
	}
	tests := []struct {
		name      string
		format    Format
		template  string
		sortBy    string
		noHeaders bool
		kind      client.Kind
		objs      []schema.Object
		want      string
	}{
		// -o jsonpath runs over the List, as -o json prints it.
		{"jsonpath names", JSONPath, "{.items[*].metadata.name}", "", false, client.Devices, templateDevices(),
			"pi-kitchen pi-10 pi-new pi-2"},
		{"jsonpath list metadata", JSONPath, "{.kind} at {.metadata.resourceVersion}", "", false, client.Devices, templateDevices(),
			"DeviceList at 17"},
		{"jsonpath range, a missing field prints nothing", JSONPath,
			`{range .items[*]}{.metadata.name}{"\t"}{.status.online}{"\n"}{end}`, "", false, client.Devices, templateDevices(),
			"pi-kitchen\ttrue\npi-10\ttrue\npi-new\t\npi-2\tfalse\n"},
		{"jsonpath filter", JSONPath, "{.items[?(@.status.online==true)].metadata.name}", "", false, client.Devices, templateDevices(),
			"pi-kitchen pi-10"},
		{"jsonpath whole numbers stay whole", JSONPath, "{.items[*].status.desiredGeneration}", "", false, client.Devices, templateDevices(),
			"4 1000000 9"},
		{"jsonpath object as JSON", JSONPath, "{.items[1].metadata.labels}", "", false, client.Devices, templateDevices(),
			`{"fleet/device":"pi-10","site":"lab","tier":"edge"}`},
		{"jsonpath of an empty list", JSONPath, "{.items[*].metadata.name}", "", false, client.Devices, nil, ""},
		{"jsonpath sorted", JSONPath, "{.items[*].metadata.name}", ".metadata.name", false, client.Devices, templateDevices(),
			"pi-2 pi-10 pi-kitchen pi-new"},

		// -o custom-columns: a table, <none> where a path finds nothing.
		{"custom-columns", CustomColumns, "NAME:.metadata.name,ONLINE:.status.online,ARCH:.status.agent.arch,TIER:.metadata.labels.tier", "", false,
			client.Devices, templateDevices(), `
NAME         ONLINE   ARCH     TIER
pi-kitchen   true     arm64    <none>
pi-10        true     <none>   edge
pi-new       <none>   <none>   <none>
pi-2         false    <none>   <none>
`},
		{"custom-columns, relaxed paths and no headers", CustomColumns, "NAME:metadata.name,GEN:{.status.observedGeneration}", "", true,
			client.Devices, templateDevices()[:2], `
pi-kitchen   4
pi-10        1000000
`},
		{"custom-columns, several values and commas in a path", CustomColumns,
			"NAME:.metadata.name,IMAGES:.spec.template.spec.containers[*].image,FIRST:{.spec.template.spec.containers[0,1].name}", "", false,
			client.Deployments, deps[:1], `
NAME   IMAGES               FIRST
web    nginx:1.25,busybox   web,log
`},
		{"custom-columns, a map as JSON", CustomColumns, "NAME:.metadata.name,SELECTOR:.spec.selector.matchLabels", "", false,
			client.Deployments, deps[:1], `
NAME   SELECTOR
web    {"app":"web","site":"lab"}
`},
		{"custom-columns of an empty list print nothing", CustomColumns, "NAME:.metadata.name", "", false, client.Devices, nil, ""},

		// --sort-by, in every format: numbers by value, strings naturally,
		// missing values first.
		{"sort table by name", Table, "", "{.metadata.name}", false, client.Devices, templateDevices(), `
NAME         ONLINE   LAST-SEEN   GENERATION        PODS   CONVERGED   AGE
pi-2         false    60m         7/9               0/0    false       3d
pi-10        true     60s         1000000/1000000   0/0    false       3d
pi-kitchen   true     5s          4/4               1/2    true        3d
pi-new       false    <never>     0/0               0/0    false       3d
`},
		{"sort numbers numerically", CustomColumns, "NAME:.metadata.name,TARGETED:.status.targeted", ".status.targeted", false,
			client.Deployments, deps, `
NAME    TARGETED
db      9
web     12
cache   100
`},
		{"sort missing values first", Name, "", ".status.lastSeen", false, client.Devices, templateDevices(), `
device/pi-new
device/pi-2
device/pi-10
device/pi-kitchen
`},
		{"sort booleans, false first, stable", Name, "", "status.online", false, client.Devices, templateDevices(), `
device/pi-new
device/pi-2
device/pi-kitchen
device/pi-10
`},
		{"sort by a multi-valued path uses the first value", Name, "", ".spec.template.spec.containers[*].image", false, client.Deployments, deps[:2], `
deployment/db
deployment/web
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Template: tt.template, SortBy: tt.sortBy, NoHeaders: tt.noHeaders, Now: func() time.Time { return now }}
			if err := p.PrintList(tt.kind, tt.objs, "17"); err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tt.want, "\n"); b.String() != want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}

func TestTemplateSortJSON(t *testing.T) {
	// The sorted list is what -o json prints, too.
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: JSON, SortBy: ".metadata.name"}
	if err := p.PrintList(client.Devices, templateDevices(), "1"); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	order := []string{`"name": "pi-2"`, `"name": "pi-10"`, `"name": "pi-kitchen"`, `"name": "pi-new"`}
	last := -1
	for _, o := range order {
		i := strings.Index(s, o)
		if i < last {
			t.Fatalf("%s out of order in\n%s", o, s)
		}
		last = i
	}
}

func TestTemplateErrors(t *testing.T) {
	tests := []struct {
		name     string
		format   Format
		template string
		sortBy   string
		objs     []schema.Object
		want     string
	}{
		{"jsonpath parse", JSONPath, "{.items[*", "", nil, "error parsing jsonpath {.items[*"},
		{"jsonpath unclosed", JSONPath, "{.metadata.name", "", nil, "error parsing jsonpath {.metadata.name: unclosed action"},
		{"jsonpath empty", JSONPath, " ", "", nil, "the template is empty"},
		{"jsonpath execution", JSONPath, "{.items[9].metadata.name}", "", templateDevices(), `error executing jsonpath "{.items[9].metadata.name}"`},
		{"no columns", CustomColumns, "", "", nil, "custom-columns format specified but no custom columns given"},
		{"column without a path", CustomColumns, "NAME", "", nil, "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"},
		{"column without a header", CustomColumns, "NAME:.metadata.name,:.status.online", "", nil, `column 2 (":.status.online") has no header`},
		{"column with an empty path", CustomColumns, "NAME:", "", nil, `column NAME: "": want a path such as .metadata.name`},
		{"column with a bad path", CustomColumns, "NAME:.items[", "", nil, "custom-columns: column NAME: error parsing jsonpath .items["},
		{"column with braces inside", CustomColumns, "NAME:{.a}{.b}", "", nil, "unexpected path string"},
		{"bad sort path", Table, "", ".metadata[", nil, `--sort-by ".metadata[": error parsing jsonpath {.metadata[}`},
		{"sort path nowhere", Table, "", ".spec.nothing", templateDevices(), `couldn't find any field with path ".spec.nothing" in the list of objects`},
		{"jsonpath-file unread", JSONPathFile, "x.txt", "", nil, "read the file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Template: tt.template, SortBy: tt.sortBy}
			err := p.Compile()
			if err == nil {
				err = p.PrintList(client.Devices, tt.objs, "")
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestTemplateObjectAndMixed(t *testing.T) {
	// One object: the template runs over it, not over a list.
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: JSONPath, Template: "{.kind}/{.metadata.name} {.spec.strategy.type}"}
	if err := p.PrintObject(deployment("web", nil)); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "Deployment/web RollingUpdate" {
		t.Errorf("object: %q", got)
	}
	// Custom columns of one object: a table of one row.
	b.Reset()
	p = &Printer{Out: &b, Format: CustomColumns, Template: "KIND:.kind,NAME:.metadata.name"}
	if err := p.PrintObject(deployment("web", nil)); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "KIND         NAME\nDeployment   web\n" {
		t.Errorf("object columns: %q", got)
	}
	// Objects of both kinds: one List for jsonpath, sorted as a whole.
	b.Reset()
	p = &Printer{Out: &b, Format: JSONPath, Template: "{.kind}:{range .items[*]} {.kind}/{.metadata.name}{end}", SortBy: ".metadata.name"}
	if err := p.PrintMixed([]schema.Object{deployment("web", nil), device("pi-1", nil), deployment("db", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "List: Deployment/db Device/pi-1 Deployment/web" {
		t.Errorf("mixed: %q", got)
	}
	// Custom columns of both kinds: a table per kind.
	b.Reset()
	p = &Printer{Out: &b, Format: CustomColumns, Template: "NAME:.metadata.name"}
	if err := p.PrintMixed([]schema.Object{deployment("web", nil), device("pi-1", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "NAME\nweb\n\nNAME\npi-1\n" {
		t.Errorf("mixed columns: %q", got)
	}
}

func TestTemplateWatch(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: CustomColumns, Template: "NAME:.metadata.name,ONLINE:.status.online", SortBy: ".metadata.name", WatchEvents: true}
	if err := p.StartWatch(client.Devices, templateDevices()[:2]); err != nil {
		t.Fatal(err)
	}
	if err := p.PrintEvent(client.Event{Type: schema.WatchDeleted, Object: device("pi-new", nil)}); err != nil {
		t.Fatal(err)
	}
	want := `EVENT      NAME         ONLINE
ADDED      pi-10        true
ADDED      pi-kitchen   true
DELETED    pi-new       <none>
`
	if b.String() != want {
		t.Errorf("custom-columns watch: got\n%s\nwant\n%s", b.String(), want)
	}

	// jsonpath: the template per object (per event with WatchEvents).
	b.Reset()
	p = &Printer{Out: &b, Format: JSONPath, Template: `{.metadata.name}{"\n"}`}
	if err := p.StartWatch(client.Devices, templateDevices()[:2]); err != nil {
		t.Fatal(err)
	}
	if err := p.PrintEvent(client.Event{Type: schema.WatchModified, Object: device("pi-new", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "pi-kitchen\npi-10\npi-new\n" {
		t.Errorf("jsonpath watch: %q", got)
	}
	b.Reset()
	p = &Printer{Out: &b, Format: JSONPath, Template: `{.type} {.object.metadata.name}{"\n"}`, WatchEvents: true}
	if err := p.PrintEvent(client.Event{Type: schema.WatchModified, Object: device("pi-new", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "MODIFIED pi-new\n" {
		t.Errorf("jsonpath watch events: %q", got)
	}
}

func TestTemplatePods(t *testing.T) {
	tests := []struct {
		name     string
		format   Format
		template string
		sortBy   string
		want     string
	}{
		{"jsonpath over the PodList", JSONPath, "{.kind}: {.items[*].name}", "", "PodList: cam mqtt web web"},
		{"custom-columns", CustomColumns, "DEVICE:.device,POD:.name,REACHABLE:.reachable,RESTARTS:.restarts", "", `
DEVICE       POD    REACHABLE   RESTARTS
pi-kitchen   cam    true        0
pi-kitchen   mqtt   true        4
pi-kitchen   web    true        0
pi-shed      web    false       0
`},
		{"table sorted by restarts, then as listed", Table, "", ".restarts", `
DEVICE       POD    READY   STATUS             RESTARTS   AGE
pi-kitchen   cam    0/1     ImagePullBackOff   0          <unknown>
pi-kitchen   web    2/2     Running            0          120m
pi-shed      web    0/1     Unknown            0          26h
pi-kitchen   mqtt   0/1     CrashLoopBackOff   4          3m
`},
		{"name sorted by the first container's image", Name, "", ".containers[0].image", `
pod/pi-kitchen/cam
pod/pi-kitchen/mqtt
pod/pi-kitchen/web
pod/pi-shed/web
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Template: tt.template, SortBy: tt.sortBy, Now: func() time.Time { return now }}
			if err := p.PrintPods(allPods()); err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tt.want, "\n"); b.String() != want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}

func TestTemplatePodWatch(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: CustomColumns, Template: "POD:.name,DEVICE:.device,RESTARTS:.restarts", SortBy: ".restarts", Now: func() time.Time { return now }}
	w := p.NewPodWatch(nil)
	if err := w.List(podDevices()); err != nil {
		t.Fatal(err)
	}
	want := `POD    DEVICE       RESTARTS
cam    pi-kitchen   0
web    pi-kitchen   0
web    pi-shed      0
mqtt   pi-kitchen   4
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestNaturalCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"pi-2", "pi-10", -1},
		{"pi-10", "pi-2", 1},
		{"pi-2", "pi-2", 0},
		{"pi-02", "pi-2", 1},
		{"a", "b", -1},
		{"pi", "pi-1", -1},
		{"10", "9a", 1},
		{"x99999999999999999999999", "x100000000000000000000000", -1},
		{"", "", 0},
	}
	for _, tt := range tests {
		if got := naturalCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("naturalCompare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
