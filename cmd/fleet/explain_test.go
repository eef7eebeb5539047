package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/fielddoc/explain"
)

// updateGolden is -update: rewrite the golden files in testdata/ with what
// the code prints. It is registered once, whichever test file of the
// package does it first.
var updateGolden = func() func() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files in testdata/ with what the code prints")
	}
	return func() bool { return flag.Lookup("update").Value.String() == "true" }
}()

// offline is an environment without any hub: no flags, variables or
// config files name one.
func offline(t *testing.T) *env {
	dir := t.TempDir()
	return &env{t: t, dir: dir, vars: map[string]string{"HOME": filepath.Join(dir, "home")}}
}

// golden compares got with testdata/explain/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "explain", name)
	if updateGolden() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -run %s -update if the change is right):\ngot:\n%s\nwant:\n%s", path, t.Name(), got, want)
	}
}

func TestExplainGolden(t *testing.T) {
	e := offline(t)
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"deployment.golden", []string{"explain", "deployment"}},
		{"containers.golden", []string{"explain", "deployment.spec.template.spec.containers"}},
		{"restartpolicy.golden", []string{"explain", "deploy.spec.template.spec.restartPolicy"}},
		{"device-labels.golden", []string{"explain", "device.metadata.labels"}},
		{"device-recursive.golden", []string{"explain", "devices", "--recursive"}},
		{"pods.golden", []string{"explain", "pods"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			r := e.run("", tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("fleet %s: %+v", strings.Join(tt.args, " "), r)
			}
			golden(t, tt.golden, r.stdout)
		})
	}
}

func TestExplainErrors(t *testing.T) {
	e := offline(t)
	for _, tt := range []struct {
		name   string
		args   []string
		golden string   // the whole of stderr, when set
		want   []string // parts of stderr
	}{
		{name: "unknown field", args: []string{"explain", "deployment.spec.template.spec.containers.imagee"}, golden: "unknown-field.golden"},
		{name: "unknown resource", args: []string{"explain", "deploymnt"}, want: []string{`unknown resource type "deploymnt", did you mean "deployment"?`, "deployments (deployment, deploy), devices (device, dev), secrets (secret), pods (pod, po)"}},
		{name: "far from any resource", args: []string{"explain", "servicez"}, want: []string{`error: unknown resource type "servicez": valid types are ` + explainer.TypeList() + "\n"}},
		{name: "case of a field", args: []string{"explain", "deployment.Spec"}, want: []string{`field "Spec" does not exist in deployment (Deployment), did you mean "spec"?`, "The fields of deployment are: apiVersion, kind, metadata, spec, status."}},
		{name: "below a scalar", args: []string{"explain", "device.metadata.name.first"}, want: []string{`field "first" does not exist: device.metadata.name is of type <string> and has no fields`}},
		{name: "below a map of scalars", args: []string{"explain", "device.metadata.labels.site"}, want: []string{"device.metadata.labels is of type <map[string]string> and has no fields"}},
		{name: "list index", args: []string{"explain", "deployment.spec.template.spec.containers[0].image"}, want: []string{"field paths take no list index: write deployment.spec.template.spec.containers.image"}},
		{name: "empty segment", args: []string{"explain", "deployment..spec"}, want: []string{`"deployment..spec": empty field name after deployment`}},
		{name: "trailing dot", args: []string{"explain", "deployment."}, want: []string{"empty field name after deployment"}},
		{name: "pod spec", args: []string{"explain", "pod.spec"}, want: []string{"A pod's spec is its deployment's: fleet explain deployment.spec.template.spec"}},
		{name: "no argument", args: []string{"explain"}, want: []string{"want one RESOURCE[.FIELD...] argument, got 0: resource types are " + explainer.TypeList() + "\n"}},
		{name: "two arguments", args: []string{"explain", "deployment", "device"}, want: []string{"got 2"}},
		{name: "empty resource", args: []string{"explain", ""}, want: []string{"you must name a resource type: " + explainer.TypeList() + "\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.run("", tt.args...)
			if r.code != 1 || r.stdout != "" {
				t.Fatalf("fleet %q: want exit 1 and no output, got %+v", tt.args, r)
			}
			if tt.golden != "" {
				golden(t, tt.golden, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// TestExplainEveryResource checks that every kind of schema's table and
// the pods can be explained, by each of their names, down to every field,
// and that descriptions fit in 80 columns.
func TestExplainEveryResource(t *testing.T) {
	for _, k := range schema.Kinds() {
		if !slices.ContainsFunc(explainer.Resources, func(r explain.Resource) bool { return r.Kind == k.Kind }) {
			t.Errorf("kind %s is not explained", k.Kind)
		}
	}
	for _, r := range explainer.Resources {
		for _, name := range slices.Concat(r.Names, r.Aliases, []string{strings.ToUpper(r.Names[0])}) {
			got, err := explainer.Resolve(name)
			if err != nil || got.Resource.Kind != r.Kind {
				t.Errorf("Resolve(%q) = %s, %v; want kind %s", name, got.Resource.Kind, err, r.Kind)
			}
		}
		var paths []string
		var walk func(st reflect.Type, path string, depth int)
		walk = func(st reflect.Type, path string, depth int) {
			for _, f := range explain.Fields(st) {
				p := path + "." + f.Name
				paths = append(paths, p)
				if sub, ok := explain.StructOf(f.Type); ok && depth < 8 {
					walk(sub, p, depth+1)
				}
			}
		}
		walk(r.Type, r.Names[1], 0)
		if len(paths) == 0 {
			t.Errorf("%s has no fields", r.Kind)
		}
		for _, p := range append(paths, r.Names[1]) {
			tgt, err := explainer.Resolve(p)
			if err != nil {
				t.Errorf("Resolve(%q): %v", p, err)
				continue
			}
			var b bytes.Buffer
			if err := explain.Write(&b, tgt, false); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(b.String(), "KIND:       "+r.Kind+"\nVERSION:    fleet/v1\n\n") {
				t.Errorf("fleet explain %s: header\n%s", p, b.String())
			}
			for line := range strings.SplitSeq(b.String(), "\n") {
				if len(line) > explain.Width && strings.Count(strings.TrimSpace(line), " ") > 0 {
					t.Errorf("fleet explain %s: line wider than %d columns: %q", p, explain.Width, line)
				}
			}
		}
	}
}

// TestExplainPodFieldsDocumented: the fields fleet get pods adds to a
// pod's status are documented here, and only those.
func TestExplainPodFieldsDocumented(t *testing.T) {
	var own []string
	for _, f := range explain.Fields(podType) {
		if f.Owner == podType {
			own = append(own, f.Name)
			if podFieldDocs[f.Name] == "" {
				t.Errorf("pod field %q has no description in podFieldDocs", f.Name)
			}
		} else if pods.FieldInfo(f).Doc == "" {
			t.Errorf("pod field %q (of %s) has no doc comment", f.Name, f.Owner.Name())
		}
	}
	for name := range podFieldDocs {
		if !slices.Contains(own, name) {
			t.Errorf("podFieldDocs describes %q, which printers.DevicePod does not have", name)
		}
	}
}

func TestExplainCompletion(t *testing.T) {
	e := offline(t)
	for _, tt := range []struct {
		arg  string
		want []string
		not  []string
	}{
		{"dep", []string{"deployments\n", "deployment\n", "deploy\n"}, []string{"devices"}},
		{"deployment.sp", []string{"deployment.spec\t<DeploymentSpec>\n"}, []string{"status"}},
		{"deploy.spec.template.spec.containers.im", []string{"deploy.spec.template.spec.containers.image\t<string>\n", "deploy.spec.template.spec.containers.imagePullPolicy\t<string>\n"}, nil},
		{"nope.x", nil, []string{"."}},
	} {
		out := e.ok("", "__complete", "explain", tt.arg)
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("complete %q: lacks %q in\n%s", tt.arg, w, out)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(out, n) {
				t.Errorf("complete %q: has %q in\n%s", tt.arg, n, out)
			}
		}
		// No file names, and no space after a completion: a path goes on.
		if !strings.HasSuffix(out, ":6\n") {
			t.Errorf("complete %q: directive\n%s", tt.arg, out)
		}
	}
}
