package schema

import (
	"errors"
	"strings"
	"testing"
)

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
