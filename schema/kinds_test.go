package schema_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/fielddoc"
)

// TestKindTable checks each row of the table of kinds: its type is the
// kind's, a stored kind decodes from a manifest and lists as its list
// kind, and no name is two kinds'.
func TestKindTable(t *testing.T) {
	owner := map[string]string{}
	for _, k := range schema.Kinds() {
		if k.Type == nil || k.Type.Kind() != reflect.Struct || k.Type.Name() != k.Kind {
			t.Errorf("kind %s: Type %v, want the struct %s", k.Kind, k.Type, k.Kind)
		}
		if k.Resource != strings.ToLower(k.Resource) || k.Singular != strings.ToLower(k.Kind) {
			t.Errorf("kind %s: resource %q and singular %q must be lower case, the singular the kind's", k.Kind, k.Resource, k.Singular)
		}
		for _, n := range slices.Concat(k.Names(), k.Aliases) {
			if other, ok := owner[n]; ok {
				t.Errorf("name %q is both %s's and %s's", n, other, k.Kind)
			}
			owner[n] = k.Kind
			if !k.Is(strings.ToUpper(n)) {
				t.Errorf("kind %s: Is(%q) is false", k.Kind, strings.ToUpper(n))
			}
		}
		if got, ok := schema.LookupKind(k.Kind); !ok || got.Resource != k.Resource {
			t.Errorf("LookupKind(%q) = %+v, %v", k.Kind, got, ok)
		}
		if !k.Stored() {
			if k.ListKind != "" || schema.NewObject(k.Kind) != nil {
				t.Errorf("payload %s has a list kind or an object", k.Kind)
			}
			if _, ok := schema.KindOfResource(k.Resource); ok {
				t.Errorf("payload %s is a collection", k.Kind)
			}
			continue
		}
		checkStoredKind(t, k)
	}
	if _, ok := schema.KindOfObject(nil); ok {
		t.Error("KindOfObject(nil)")
	}
	if _, ok := schema.LookupKind("Pod"); ok {
		t.Error("LookupKind(Pod): pods are not a kind")
	}
}

func checkStoredKind(t *testing.T, k schema.KindInfo) {
	t.Helper()
	if got := reflect.TypeOf(k.New()); got != reflect.PointerTo(k.Type) {
		t.Errorf("kind %s: New makes a %v, want *%s", k.Kind, got, k.Type)
	}
	if got, ok := schema.KindOfResource(k.Resource); !ok || got.Kind != k.Kind {
		t.Errorf("KindOfResource(%q) = %s, %v", k.Resource, got.Kind, ok)
	}
	objs, err := schema.Decode([]byte("apiVersion: fleet/v1\nkind: " + k.Kind + "\nmetadata:\n  name: x\n"))
	if err != nil || len(objs) != 1 || objs[0].GetTypeMeta().Kind != k.Kind || objs[0].GetMetadata().Name != "x" {
		t.Errorf("kind %s does not decode: %v, %v", k.Kind, objs, err)
	}
	if got, ok := schema.KindOfObject(k.New()); !ok || got.Kind != k.Kind {
		t.Errorf("KindOfObject(new %s) = %s, %v", k.Kind, got.Kind, ok)
	}
	checkList(t, k)
	if k.ListKind != k.Kind+"List" {
		t.Errorf("kind %s: list kind %s", k.Kind, k.ListKind)
	}
}

// TestKindTableOrders: the API lists the stored kinds in the table's order,
// people see Deployment first; the docs cover exactly the table's kinds.
func TestKindTableOrders(t *testing.T) {
	var stored, listed []string
	for _, k := range schema.StoredKinds() {
		stored = append(stored, k.Resource)
	}
	for _, k := range schema.ListedKinds() {
		listed = append(listed, k.Resource)
	}
	// Today's kinds keep their places; a new one comes after them.
	if want := []string{"devices", "deployments", "configmaps", "secrets"}; !slices.Equal(stored[:len(want)], want) {
		t.Errorf("StoredKinds = %q, want %q first", stored, want)
	}
	want := slices.Insert(slices.DeleteFunc(slices.Clone(stored), func(r string) bool { return r == "deployments" }), 0, "deployments")
	if !slices.Equal(listed, want) {
		t.Errorf("ListedKinds = %q, want %q", listed, want)
	}
	p, err := fielddoc.Parse(".")
	if err != nil {
		t.Fatal(err)
	}
	if got := schema.DocumentedKinds(); !slices.Equal(got, p.Kinds) {
		t.Errorf("DocumentedKinds() = %q, but the Kind constants name %q: add the kind to the table in kinds.go", got, p.Kinds)
	}
}

func TestDecodeUnknownKind(t *testing.T) {
	_, err := schema.Decode([]byte("apiVersion: fleet/v1\nkind: Pod\nmetadata:\n  name: x\n"))
	// Today's kinds, in their order; a new one comes after them.
	want := `kind: must be "Deployment", "Device", "ConfigMap", "Secret"`
	if err == nil || !strings.Contains(strings.Replace(err.Error(), " or ", ", ", 1), want) || !strings.Contains(err.Error(), `, got "Pod"`) {
		t.Errorf("Decode of a Pod: %v, want %q", err, want)
	}
}

// checkList: NewList encodes as the list type does.
func checkList(t *testing.T, k schema.KindInfo) {
	t.Helper()
	a, b := k.New(), k.New()
	a.GetMetadata().Name, b.GetMetadata().Name = "a", "b"
	got, err := json.Marshal(k.NewList([]schema.Object{a, b}, "7"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":%q,"metadata":{"resourceVersion":"7"},"items":[`, k.ListKind)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if want += string(ja) + "," + string(jb) + "]}"; string(got) != want {
		t.Errorf("kind %s: NewList encodes as\n%s\nwant\n%s", k.Kind, got, want)
	}
	if got, _ := json.Marshal(k.NewList(nil, "")); !strings.HasSuffix(string(got), `"items":[]}`) {
		t.Errorf("kind %s: an empty list is %s", k.Kind, got)
	}
}

// TestNewListIsTheListType: for a kind with a list type of its own, NewList
// encodes exactly as it does.
func TestNewListIsTheListType(t *testing.T) {
	d := schema.Deployment{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment}, Metadata: schema.ObjectMeta{Name: "web"}}
	k, _ := schema.LookupKind(schema.KindDeployment)
	got, _ := json.Marshal(k.NewList([]schema.Object{&d}, "3"))
	want, _ := json.Marshal(schema.DeploymentList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentList"}, Metadata: schema.ListMeta{ResourceVersion: "3"}, Items: []schema.Deployment{d}})
	if string(got) != string(want) {
		t.Errorf("NewList:\n%s\nDeploymentList:\n%s", got, want)
	}
	if p, _ := schema.LookupKind(schema.KindEvent); p.NewList(nil, "") != nil {
		t.Error("a payload has a list")
	}
}
