package schema

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSuggestField(t *testing.T) {
	tests := []struct {
		typ  reflect.Type
		key  string
		want string
	}{
		{reflect.TypeFor[Container](), "enviroment", "env"},
		{reflect.TypeFor[Container](), "environment", "env"},
		{reflect.TypeFor[Container](), "arguments", "args"},
		{reflect.TypeFor[Container](), "imagee", "image"},
		{reflect.TypeFor[Container](), "imgae", "image"},  // swapped letters
		{reflect.TypeFor[Container](), "Image", "image"},  // case
		{reflect.TypeFor[Container](), "ENV", "env"},      // case, short
		{reflect.TypeFor[Container](), "workdir", ""},     // too far
		{reflect.TypeFor[Container](), "imagePolicy", ""}, // four edits from imagePullPolicy
		{reflect.TypeFor[Container](), "envFromm", "envFrom"},
		{reflect.TypeFor[Container](), "stdinOnce", ""}, // another word
		{reflect.TypeFor[Container](), "imagePullSecrets", ""},
		{reflect.TypeFor[Container](), "volumeMount", "volumeMounts"},
		{reflect.TypeFor[Container](), "port", "ports"},
		{reflect.TypeFor[Container](), "tty", ""}, // short keys: case only
		{reflect.TypeFor[PodSpec](), "restartpolicy", "restartPolicy"},
		{reflect.TypeFor[PodSpec](), "RestartPolcy", "restartPolicy"},
		{reflect.TypeFor[PodSpec](), "hostnetwork", "hostNetwork"},
		{reflect.TypeFor[PodSpec](), "container", "containers"},
		{reflect.TypeFor[PodSpec](), "volume", "volumes"},
		{reflect.TypeFor[DeploymentSpec](), "updateStrategy", "strategy"},
		{reflect.TypeFor[DeploymentSpec](), "replicas", ""},
		{reflect.TypeFor[DeploymentSpec](), "selectr", "selector"},
		{reflect.TypeFor[ObjectMeta](), "namespace", ""}, // not "name": Fleet has no namespaces
		{reflect.TypeFor[ObjectMeta](), "label", "labels"},
		{reflect.TypeFor[Deployment](), "apiversion", "apiVersion"},
		{reflect.TypeFor[Deployment](), "metdata", "metadata"},
		{reflect.TypeFor[Container](), strings.Repeat("x", 10000), ""},
	}
	for _, tt := range tests {
		if got := suggestField(tt.typ, tt.key, jsonFields(tt.typ)); got != tt.want {
			t.Errorf("suggestField(%s, %.20q) = %q, want %q", tt.typ.Name(), tt.key, got, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 5, 0},
		{"image", "image", 5, 0},
		{"imagee", "image", 5, 1},
		{"imgae", "image", 5, 1}, // a swap is one edit
		{"kitten", "sitting", 5, 3},
		{"kitten", "sitting", 3, 3}, // capped at the limit
		{"a", "abcdefgh", 3, 3},
		{"abc", "", 5, 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b, tt.limit); got != tt.want {
			t.Errorf("editDistance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.limit, got, tt.want)
		}
	}
}

func TestComparePaths(t *testing.T) {
	got := []string{
		"spec.template.spec.restartPolicy",
		"spec.template.spec.containers[10].image",
		"metadata.name",
		"spec.template.spec.containers[2].name",
		"spec.template.spec.containers",
		"apiVersion",
		"spec.template.spec.containers[2].env[0].name",
		"",
	}
	want := []string{
		"",
		"apiVersion",
		"metadata.name",
		"spec.template.spec.containers",
		"spec.template.spec.containers[2].env[0].name",
		"spec.template.spec.containers[2].name",
		"spec.template.spec.containers[10].image",
		"spec.template.spec.restartPolicy",
	}
	slices.SortFunc(got, comparePaths)
	if !slices.Equal(got, want) {
		t.Errorf("sorted paths:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMergeFieldErrors(t *testing.T) {
	decodeErrs := errList{
		{Field: "spec.template.spec.containers[1]", Message: "wrong type: got string, want mapping"},
		{Field: "apiVersion", Message: `must be "fleet/v1", got "apps/v1"`},
	}
	validation := errList{
		{Field: "apiVersion", Message: `must be "fleet/v1", got "apps/v1"`},                     // the same error
		{Field: "spec.template.spec.containers[1].name", Message: "required"},                   // within a bad field
		{Field: "spec.template.spec.containers[10].image", Message: "required"},                 // a neighbour, kept
		{Field: "spec.template.spec.restartPolicy", Message: `unsupported value "x"`},           // kept
		{Field: "spec.template.spec.restartPolicy", Message: `unsupported value "x"`},           // twice
		{Field: "metadata.name", Message: `"Web" must be a DNS-1123 label`},                     // kept
		{Field: "spec.template.spec.containers[1]x", Message: "not within containers[1], kept"}, // prefix, not a part
		{Field: "spec.template.spec.containers[0].image", Message: "required"},                  // suggested for a typo
	}
	var got []string
	for _, fe := range mergeFieldErrors(decodeErrs, validation, []string{"spec.template.spec.containers[0].image"}) {
		got = append(got, fe.String())
	}
	want := []string{
		`apiVersion: must be "fleet/v1", got "apps/v1"`,
		`metadata.name: "Web" must be a DNS-1123 label`,
		"spec.template.spec.containers[1]: wrong type: got string, want mapping",
		"spec.template.spec.containers[1]x: not within containers[1], kept",
		"spec.template.spec.containers[10].image: required",
		`spec.template.spec.restartPolicy: unsupported value "x"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("merged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestHints(t *testing.T) {
	k8s := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  template: {spec: {containers: [{name: c, image: nginx, ports: [{containerPort: 80}]}]}}\n"
	tests := []struct {
		name string
		in   string
		want []string // a distinctive part of each hint, in order
	}{
		{"kubernetes deployment", k8s, []string{"like a Kubernetes DaemonSet over devices", "no spec.replicas"}},
		{"replicas in a fleet deployment", strings.Replace(k8s, "apps/v1", "fleet/v1", 1), []string{"no spec.replicas"}},
		{"daemonset", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {updateStrategy: {type: OnDelete}}\n", []string{"DaemonSet maps to a Fleet Deployment", "spec.strategy"}},
		{"pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: x, namespace: default}\nspec: {containers: [{name: c, image: nginx}]}\n", []string{"{fleet/device: DEVICE}", "no namespaces"}},
		{"pod pinned to a node", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {nodeSelector: {kubernetes.io/hostname: pi-7}}\n", []string{"{fleet/device: pi-7}", "delete nodeSelector"}},
		{"each hint once", "apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: a, image: nginx, ports: [{containerPort: 80, hostPort: 80}]}, {name: b, image: nginx, ports: [{containerPort: 81, hostPort: 81}]}]}}}\n", []string{"delete hostPort"}},
		{"a typo has no hint", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, lables: {a: b}}\n", nil},
		{"an unknown kind has no hint", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeManifests([]byte(tt.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			hints := Hints(err)
			if len(hints) != len(tt.want) {
				t.Fatalf("hints:\n%s\nwant %d, saying %q", strings.Join(hints, "\n"), len(tt.want), tt.want)
			}
			for i, h := range hints {
				if !strings.Contains(h, tt.want[i]) {
					t.Errorf("hint %d = %q, want it to say %q", i, h, tt.want[i])
				}
				if !strings.Contains(err.Error(), "\n  hint: "+h) {
					t.Errorf("message %q does not show hint %q on a line of its own", err, h)
				}
			}
		})
	}
}

func TestHintsOfSeveralDocuments(t *testing.T) {
	in := "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: b}\nspec: {replicas: 1}\n"
	_, err := Decode([]byte(in))
	hints := Hints(err)
	if len(hints) != 2 || !strings.Contains(hints[0], "Pod") || !strings.Contains(hints[1], "replicas") {
		t.Errorf("Hints = %q, want the Pod's, then the replicas'", hints)
	}
	if Hints(nil) != nil || Hints(errors.New("x")) != nil {
		t.Error("Hints of an error without hints is not empty")
	}
}
