package store

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestKeysOfEveryKind: every stored kind of schema's table has its own
// key prefix and resource, both ways; a payload has none.
func TestKeysOfEveryKind(t *testing.T) {
	prefixes := map[string]string{}
	for _, k := range schema.Kinds() {
		key := ObjectKey(k.Kind, "x")
		if !k.Stored() {
			if key != "" {
				t.Errorf("payload %s has the key %q", k.Kind, key)
			}
			continue
		}
		prefix, ok := strings.CutSuffix(key, "x")
		if !ok || !strings.HasPrefix(prefix, prefixObjects) || prefix != objectPrefix(k.Resource) {
			t.Errorf("kind %s: key %q, want %sx", k.Kind, key, objectPrefix(k.Resource))
		}
		if other, dup := prefixes[prefix]; dup {
			t.Errorf("kinds %s and %s share the key prefix %q", other, k.Kind, prefix)
		}
		prefixes[prefix] = k.Kind
		if checkWritableKey(key) == nil {
			t.Errorf("kind %s: its key %q is writable without the object methods", k.Kind, key)
		}
		if got, ok := KindForResource(k.Resource); !ok || got != k.Kind {
			t.Errorf("KindForResource(%q) = %q, %v", k.Resource, got, ok)
		}
		if out, err := cloneObject(k.New()); err != nil || out.GetTypeMeta().Kind != k.Kind {
			t.Errorf("kind %s: cloneObject = %v, %v", k.Kind, out, err)
		}
		for _, status := range []bool{false, true} {
			if _, err := specJSON(k.New(), status); err != nil {
				t.Errorf("kind %s: specJSON: %v", k.Kind, err)
			}
		}
		if got := ListKindFor(k.Kind); got != k.ListKind || got == "" {
			t.Errorf("ListKindFor(%q) = %q", k.Kind, got)
		}
	}
	if got, want := strings.Join(Resources(), ", "), "devices, deployments, configmaps, secrets"; !strings.HasPrefix(got, want) {
		t.Errorf("Resources() = %s, want %s first", got, want)
	}
	if _, ok := ResourceForKind(schema.KindDesiredState); ok {
		t.Error("a payload has a resource")
	}
}
