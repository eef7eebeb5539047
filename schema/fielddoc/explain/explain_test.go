package explain

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func kinds() *Explainer {
	stored, payloads := Kinds()
	return &Explainer{Resources: slices.Concat(stored, payloads)}
}

// TestKinds: the resources are schema's kinds, stored first, each named
// as the table names it.
func TestKinds(t *testing.T) {
	stored, payloads := Kinds()
	var got []string
	for _, r := range slices.Concat(stored, payloads) {
		got = append(got, r.Kind)
		k, _ := schema.LookupKind(r.Kind)
		if !slices.Equal(r.Names, k.Names()) || r.Type != k.Type || r.Names[0] != k.Resource {
			t.Errorf("resource %s: %+v, want the table's %+v", r.Kind, r, k)
		}
	}
	if want := schema.DocumentedKinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %q, want %q", got, want)
	}
	for _, r := range stored {
		if schema.NewObject(r.Kind) == nil {
			t.Errorf("%s is not stored", r.Kind)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	e := kinds()
	if list := e.TypeList(); !strings.Contains(list, "deployments (deployment, deploy), devices (device, dev), secrets (secret), ") || !strings.Contains(list, ", events (event, ev), ") {
		t.Errorf("TypeList = %s", list)
	}
	for _, tt := range []struct{ arg, want, hint string }{
		{"deploymnt", `unknown resource type "deploymnt", did you mean "deployment"? Valid types are ` + e.TypeList(), ""},
		{"", "you must name a resource type: " + e.TypeList(), ""},
		{"deployment.Spec", `field "Spec" does not exist in deployment (Deployment), did you mean "spec"?`, "The fields of deployment are: apiVersion, kind, metadata, spec, status."},
		{"deploy.spec.template.spec.containers.imagee", `field "imagee" does not exist in deploy.spec.template.spec.containers (Container), did you mean "image"?`, "The fields of deploy.spec.template.spec.containers are: args,"},
		{"device.metadata.name.first", `field "first" does not exist: device.metadata.name is of type <string> and has no fields`, ""},
		{"deployment.spec[0]", "field paths take no list index: write deployment.spec", ""},
		{"deployment..spec", `"deployment..spec": empty field name after deployment`, ""},
	} {
		_, err := e.Resolve(tt.arg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%q): %v, want %q", tt.arg, err, tt.want)
			continue
		}
		var he *HintError
		if errors.As(err, &he) != (tt.hint != "") || tt.hint != "" && !strings.HasPrefix(he.Hint, tt.hint) {
			t.Errorf("Resolve(%q): hint of %v, want %q", tt.arg, err, tt.hint)
		}
	}
}

// TestFieldHints: a resource's own docs and hints, for a type that is not
// package schema's.
func TestFieldHints(t *testing.T) {
	type thing struct {
		Size int `json:"size"`
		schema.TypeMeta
	}
	r := Resource{Kind: "Thing", Names: []string{"things", "thing"}, Type: reflect.TypeFor[thing](), Doc: "Thing is a test.",
		FieldDocs: map[string]string{"size": "Size is how big."}, FieldHints: map[string]string{"spec": "Things have no spec."}}
	e := &Explainer{Resources: []Resource{r}}
	_, err := e.Resolve("thing.spec")
	if err == nil || !strings.HasSuffix(err.Error(), "The fields of thing are: apiVersion, kind, size.\nThings have no spec.") {
		t.Errorf("Resolve(thing.spec): %v", err)
	}
	tgt, err := e.Resolve("THINGS")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, tgt, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KIND:       Thing\n", "    Thing is a test.\n", "  size\t<integer>\n    Size is how big.\n", "  kind\t<string>\n    Kind is the type"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explain thing lacks %q:\n%s", want, b.String())
		}
	}
	if got := e.TypeList(); got != "things (thing)" {
		t.Errorf("TypeList = %q", got)
	}
}

func TestComplete(t *testing.T) {
	e := kinds()
	if got := e.Complete("dep"); !slices.Equal(got, []string{"deployments", "deployment", "deploy", "deploymentrevisions", "deploymentrevision"}) {
		t.Errorf("Complete(dep) = %q", got)
	}
	if got := e.Complete("ev"); !slices.Equal(got, []string{"events", "event", "ev"}) {
		t.Errorf("Complete(ev) = %q", got)
	}
	if got := e.Complete("deployment.sp"); !slices.Equal(got, []string{"deployment.spec\t<DeploymentSpec>"}) {
		t.Errorf("Complete(deployment.sp) = %q", got)
	}
	if got := e.Complete("nope.x"); got != nil {
		t.Errorf("Complete(nope.x) = %q", got)
	}
}

func TestSuggestName(t *testing.T) {
	names := []string{"args", "command", "env", "image", "imagePullPolicy", "mounts", "name", "resources", "workingDir"}
	for _, tt := range []struct{ word, want string }{
		{"imagee", "image"},
		{"Image", "image"},
		{"IMAGEPULLPOLICY", "imagePullPolicy"},
		{"workingdir", "workingDir"},
		{"comand", "command"},
		{"mounst", "mounts"},
		{"resour", "resources"},          // the only name it starts
		{"imagePull", "imagePullPolicy"}, // the only name it starts
		{"ima", ""},                      // two names start with it
		{"nmae", ""},                     // too short for two mistakes
		{"volumeMounts", ""},
		{"x", ""},
		{"e", ""},
	} {
		if got := SuggestName(tt.word, names); got != tt.want {
			t.Errorf("SuggestName(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

func TestWrap(t *testing.T) {
	var b bytes.Buffer
	Wrap(&b, strings.Repeat("word ", 20)+"end\n\nSecond paragraph.\n  - a list item that is long enough to need wrapping onto a second line of text\n\tcode stays as it is, however long the line is, because it is code", "    ")
	want := "    word word word word word word word word word word word word word word word\n" +
		"    word word word word word end\n" +
		"\n" +
		"    Second paragraph.\n" +
		"      - a list item that is long enough to need wrapping onto a second line of\n" +
		"        text\n" +
		"        code stays as it is, however long the line is, because it is code\n"
	if b.String() != want {
		t.Errorf("Wrap:\n%s\nwant:\n%s", b.String(), want)
	}
}
