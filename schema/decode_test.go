package schema

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the code produces")

const validDeployment = `
apiVersion: fleet/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  selector:
    matchLabels: {role: kiosk}
  template:
    spec:
      containers:
      - name: nginx
        image: docker.io/library/nginx:1.27
        env: [{name: MODE, value: "on"}]
        resources: {limits: {memory: 64Mi, cpu: 500m}}
`

func TestDecodeValid(t *testing.T) {
	objs, err := DecodeManifests([]byte(validDeployment + "---\n# a comment only\n---\napiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi-1, labels: {role: kiosk}}\n"))
	if err != nil {
		t.Fatalf("DecodeManifests: %v", err)
	}
	if len(objs) != 2 {
		t.Fatalf("got %d objects, want 2", len(objs))
	}
	d, ok := objs[0].(*Deployment)
	if !ok {
		t.Fatalf("first object is %T, want *Deployment", objs[0])
	}
	spec := d.Spec.Template.Spec
	if spec.RestartPolicy != RestartAlways || spec.HostNetwork == nil || !*spec.HostNetwork ||
		spec.Containers[0].ImagePullPolicy != PullIfNotPresent || d.Spec.Strategy.Type != StrategyAllAtOnce {
		t.Errorf("defaults not applied: %+v", spec)
	}
	if got := spec.Containers[0].Env[0].Value; got != "on" {
		t.Errorf("env value = %q, want the string \"on\"", got)
	}
	if _, ok := objs[1].(*Device); !ok {
		t.Errorf("second object is %T, want *Device", objs[1])
	}
}

func TestDecodeJSON(t *testing.T) {
	js := `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-2"}}`
	if _, err := DecodeObject([]byte(js)); err != nil {
		t.Fatalf("DecodeObject(json): %v", err)
	}
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string
	}{
		{"bad name", strings.Replace(validDeployment, "name: web", "name: Web_Server", 1), "metadata.name"},
		{"missing image", strings.Replace(validDeployment, "image: docker.io/library/nginx:1.27", "image: \"\"", 1), "spec.template.spec.containers[0].image"},
		{"bad image", strings.Replace(validDeployment, "docker.io/library/nginx:1.27", "UPPER/Case::x", 1), "spec.template.spec.containers[0].image"},
		{"negative memory", strings.Replace(validDeployment, "64Mi", "-64Mi", 1), "spec.template.spec.containers[0].resources.limits.memory"},
		{"malformed memory", strings.Replace(validDeployment, "64Mi", "lots", 1), "spec.template.spec.containers[0].resources.limits.memory"},
		{"unknown field", strings.Replace(validDeployment, "        env:", "        imagee: x\n        env:", 1), "spec.template.spec.containers[0].imagee"},
		{"unknown top field", validDeployment + "extra: 1\n", "extra"},
		{"wrong apiVersion", strings.Replace(validDeployment, "fleet/v1", "apps/v1", 1), "apiVersion"},
		{"wrong kind", strings.Replace(validDeployment, "kind: Deployment", "kind: DaemonSet", 1), "kind"},
		{"bad restart policy", strings.Replace(validDeployment, "    spec:\n      containers:", "    spec:\n      restartPolicy: Sometimes\n      containers:", 1), "spec.template.spec.restartPolicy"},
		{"wrong type", strings.Replace(validDeployment, "env: [{name: MODE, value: \"on\"}]", "env: 3", 1), "spec.template.spec.containers[0].env"},
		{"no containers", "apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {containers: []}}}\n", "spec.template.spec.containers"},
		{"relative mount", strings.Replace(validDeployment, "        env:", "        mounts: [{hostPath: data, mountPath: /data}]\n        env:", 1), "spec.template.spec.containers[0].mounts[0].hostPath"},
		{"reserved device label", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, labels: {fleet/role: x}}\n", "metadata.labels[fleet/role]"},
		{"bad label value", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, labels: {role: \"a b\"}}\n", "metadata.labels[role]"},
		{"fractional integer", strings.Replace(validDeployment, "  name: web\n", "  name: web\n  generation: 1.5\n", 1), "metadata.generation: wrong type: got number 1.5, want integer"},
		{"integer out of range", strings.Replace(validDeployment, "  name: web\n", "  name: web\n  generation: 9223372036854775808\n", 1), "metadata.generation: 9223372036854775808 is out of range"},
		{"bad time", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, creationTimestamp: yesterday}\n", "metadata.creationTimestamp: \"yesterday\" is not a RFC 3339 time"},
		{"case typo", strings.Replace(validDeployment, "    spec:\n      containers:", "    spec:\n      restartpolicy: Never\n      containers:", 1), "spec.template.spec.restartpolicy: unknown field \"restartpolicy\", did you mean \"restartPolicy\"?"},
		{"kubernetes deployment", strings.Replace(validDeployment, "fleet/v1", "apps/v1", 1), "hint: Fleet's Deployment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeManifests([]byte(tt.in))
			if err == nil {
				t.Fatal("DecodeManifests succeeded, want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name %q", err, tt.wantField)
			}
		})
	}
}

// TestDecodeUnknownFields checks the errors of unknown fields one by one:
// each names the field by its full path, as the hub's 400 details do.
func TestDecodeUnknownFields(t *testing.T) {
	tests := []struct {
		name    string
		old     string
		new     string
		field   string
		message string
	}{
		{"typo", "        env:", "        enviroment:", "spec.template.spec.containers[0].enviroment", `unknown field "enviroment", did you mean "env"?`},
		{"case", "        image:", "        Image:", "spec.template.spec.containers[0].Image", `unknown field "Image", did you mean "image"?`},
		{"kubernetes name", "        env:", "        volumeMount: []\n        env:", "spec.template.spec.containers[0].volumeMount", `unknown field "volumeMount", did you mean "volumeMounts"?`},
		{"nothing close", "        env:", "        colour: blue\n        env:", "spec.template.spec.containers[0].colour", "unknown field"},
		{"replicas", "  selector:", "  replicas: 3\n  selector:", "spec.replicas", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(validDeployment, tt.old, tt.new, 1)
			if in == validDeployment {
				t.Fatalf("%q is not in the manifest", tt.old)
			}
			_, err := Decode([]byte(in))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a *ValidationError", err)
			}
			want := []FieldError{{Field: tt.field, Message: tt.message}}
			if !slices.Equal(ve.Errors, want) {
				t.Errorf("errors = %q, want %q", ve.Errors, want)
			}
		})
	}
}

// TestDecodeReportsUnknownAndInvalidTogether: a document with an unknown
// field is still validated, so one round of fixes is enough. Decode does
// it too, because the hub's API decodes with it.
func TestDecodeReportsUnknownAndInvalidTogether(t *testing.T) {
	in := strings.Replace(validDeployment, "    spec:\n      containers:", "    spec:\n      restartPolicy: Sometimes\n      containers:", 1)
	in = strings.Replace(in, "        env:", "        imagee: x\n        env:", 1)
	in = strings.Replace(in, "name: web", "name: Web", 1)
	want := []string{
		"metadata.name",
		"spec.template.spec.containers[0].imagee",
		"spec.template.spec.restartPolicy",
	}
	for name, decode := range map[string]func([]byte) ([]Object, error){"Decode": Decode, "DecodeManifests": DecodeManifests} {
		_, err := decode([]byte(in))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("%s: err = %v, want a *ValidationError", name, err)
		}
		var got []string
		for _, fe := range ve.Errors {
			got = append(got, fe.Field)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: fields %q, want %q (sorted, once each)", name, got, want)
		}
		if ve.Kind != KindDeployment || ve.Name != "Web" {
			t.Errorf("%s: error is about %s %q, want Deployment \"Web\"", name, ve.Kind, ve.Name)
		}
	}
}

func TestDecodeReportsEveryDocument(t *testing.T) {
	bad := strings.Replace(validDeployment, "        env:", "        imagee: x\n        env:", 1)
	invalid := "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: Pi}\n"
	good := "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi}\n"
	tests := []struct {
		name       string
		in         string
		decode     []string // what Decode's error says, line by line
		manifests  []string // what DecodeManifests' error says
		wantObject bool     // Decode succeeds
	}{
		{
			name:      "two undecodable documents",
			in:        bad + "---\n" + good + "---\n" + strings.Replace(bad, "name: web", "name: web2", 1),
			decode:    []string{"document 1: Deployment \"web\" is invalid: ", "document 3: Deployment \"web2\" is invalid: "},
			manifests: []string{"document 1: Deployment \"web\" is invalid: ", "document 3: Deployment \"web2\" is invalid: "},
		},
		{
			name:      "an undecodable and an invalid document",
			in:        invalid + "---\n" + bad,
			decode:    []string{"document 2: Deployment \"web\" is invalid: "},
			manifests: []string{"document 1: Device \"Pi\" is invalid: metadata.name: ", "document 2: Deployment \"web\" is invalid: "},
		},
		{
			name:       "invalid documents only: the format of old",
			in:         invalid + "---\n" + strings.Replace(invalid, "Pi", "Pi2", 1),
			manifests:  []string{"invalid: Device \"Pi\" is invalid: metadata.name: ", "Device \"Pi2\" is invalid: metadata.name: "},
			wantObject: true,
		},
	}
	check := func(t *testing.T, what string, err error, want []string) {
		t.Helper()
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: err = %v, want ErrInvalid", what, err)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) && !strings.HasPrefix(err.Error(), "invalid: ") {
			t.Errorf("%s: err %v holds no *ValidationError", what, err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%s: error:\n%v\nwant %d lines", what, err, len(want))
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, want[i]) {
				t.Errorf("%s: line %d = %q, want it to start with %q", what, i+1, l, want[i])
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Decode([]byte(tt.in))
			if tt.wantObject {
				if err != nil {
					t.Errorf("Decode: %v", err)
				}
			} else {
				if objs != nil {
					t.Errorf("Decode returned objects and error %v", err)
				}
				check(t, "Decode", err, tt.decode)
			}
			_, err = DecodeManifests([]byte(tt.in))
			check(t, "DecodeManifests", err, tt.manifests)
		})
	}
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	in := "apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: BAD}\nspec: {template: {spec: {containers: [{name: c}], restartPolicy: x}}}\n"
	_, err := DecodeManifests([]byte(in))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v is not a *ValidationError", err)
	}
	if len(ve.Errors) < 3 {
		t.Errorf("got %d field errors (%v), want name, image and restartPolicy", len(ve.Errors), ve)
	}
}

// TestDecodeGolden checks the whole error text of DecodeManifests for each
// testdata/decode/NAME.yaml against NAME.golden. Run with -update to
// rewrite the golden files, then read the diff.
func TestDecodeGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "decode", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no testdata/decode/*.yaml")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeManifests(data)
			if err == nil {
				t.Fatal("DecodeManifests succeeded: every golden input is invalid")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("error is not a *ValidationError: %v", err)
			}
			got := []byte(err.Error() + "\n")
			golden := filepath.Join("testdata", "decode", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestDecodeGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("error text differs from %s (go test -run TestDecodeGolden -update rewrites it)\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

func TestDecodeHostile(t *testing.T) {
	bomb := `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	tests := map[string][]byte{
		"alias bomb":  []byte(bomb),
		"binary":      {0x7f, 'E', 'L', 'F', 0, 1, 2, 0xff, 0xfe},
		"invalid utf": {'a', ':', ' ', 0xff, 0xfe},
		"huge":        []byte(strings.Repeat("#", MaxManifestBytes+1)),
		"scalar":      []byte("just a string"),
		"list":        []byte("- a\n- b\n"),
		"empty":       []byte("\n---\n"),
		"dup keys":    []byte("apiVersion: fleet/v1\napiVersion: fleet/v1\nkind: Device\nmetadata: {name: a}\n"),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeManifests(in); !errors.Is(err, ErrInvalid) {
				t.Errorf("DecodeManifests: err = %v, want ErrInvalid", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(validDeployment))
	f.Add([]byte("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi}\n"))
	f.Add([]byte(`{"apiVersion":"fleet/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{}}`))
	f.Add([]byte("a: &a [1]\nb: [*a, *a]\n"))
	f.Add([]byte("apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: x, generation: 1e400}\nspec: {template: {spec: {containers: [\"x\", {enviroment: 1}]}}}\n"))
	inputs, _ := filepath.Glob(filepath.Join("testdata", "decode", "*.yaml"))
	for _, in := range inputs {
		if data, err := os.ReadFile(in); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := DecodeManifests(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		for _, o := range objs {
			if err := ValidateName(o.GetMetadata().Name); err != nil {
				t.Fatalf("accepted object with invalid name: %v", err)
			}
		}
	})
}
