package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// addManifestSeeds adds the manifests of testdata/decode and the repo's
// examples to a fuzz target's seed corpus.
func addManifestSeeds(f *testing.F) {
	f.Helper()
	f.Add([]byte(validDeployment))
	f.Add([]byte("apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi, labels: {site: lab}}\n"))
	f.Add([]byte("apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: b}\n"))
	f.Add([]byte("apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\nstringData: {a: b}\n"))
	f.Add([]byte(`{"apiVersion":"fleet/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{}}`))
	for _, glob := range []string{"testdata/decode/*.yaml", "testdata/*.yaml", "../fleet-examples/*.yaml", "../fleet-examples/*/*.yaml"} {
		files, _ := filepath.Glob(filepath.FromSlash(glob))
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil && len(data) <= 64<<10 {
				f.Add(data)
			}
		}
	}
}

// FuzzDecodeRoundTrip: whatever DecodeManifests accepts re-encodes, as
// JSON and as YAML, to an object that decodes, defaults and validates to
// the same bytes again (decode→encode→decode is a fixed point), and
// DecodeObject agrees with it on single objects. Decode (no defaults, no
// validation) round-trips the same way. Every refusal wraps ErrInvalid.
func FuzzDecodeRoundTrip(f *testing.F) {
	addManifestSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode: error does not wrap ErrInvalid: %v", err)
			}
		}
		for _, o := range raw {
			js := mustJSON(t, o)
			again, err := Decode(js)
			if err != nil || len(again) != 1 {
				t.Fatalf("Decode of the re-encoded %s %s: %v (%d objects)\n%s", o.GetTypeMeta().Kind, o.GetMetadata().Name, err, len(again), js)
			}
			if js2 := mustJSON(t, again[0]); !bytes.Equal(js, js2) {
				t.Fatalf("Decode round trip changed the object:\n%s\n%s", js, js2)
			}
		}

		objs, err := DecodeManifests(data)
		one, oneErr := DecodeObject(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("DecodeManifests: error does not wrap ErrInvalid: %v", err)
			}
			if oneErr == nil {
				t.Fatalf("DecodeObject accepts what DecodeManifests refuses: %v", err)
			}
			return
		}
		if (len(objs) == 1) != (oneErr == nil) {
			t.Fatalf("DecodeObject: %v for %d objects", oneErr, len(objs))
		}
		if oneErr == nil && !bytes.Equal(mustJSON(t, one), mustJSON(t, objs[0])) {
			t.Fatal("DecodeObject and DecodeManifests decode the same object differently")
		}
		for _, o := range objs {
			if err := ValidateName(o.GetMetadata().Name); err != nil {
				t.Fatalf("accepted an object with an invalid name: %v", err)
			}
			js := mustJSON(t, o)
			back, err := DecodeObject(js)
			if err != nil {
				t.Fatalf("the re-encoded object does not decode: %v\n%s", err, js)
			}
			if js2 := mustJSON(t, back); !bytes.Equal(js, js2) {
				t.Fatalf("JSON round trip changed the object:\n%s\n%s", js, js2)
			}
			y, err := yaml.Marshal(o)
			if err != nil {
				t.Fatalf("encode as YAML: %v", err)
			}
			back, err = DecodeObject(y)
			if err != nil {
				t.Fatalf("the object re-encoded as YAML does not decode: %v\n%s", err, y)
			}
			if js2 := mustJSON(t, back); !bytes.Equal(js, js2) {
				t.Fatalf("YAML round trip changed the object:\n%s\n%s", js, js2)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return b
}
