package schema_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/fielddoc"
)

// TestFieldDocsUpToDate regenerates the doc table and the field reference
// into a temporary directory and compares them with the committed ones.
func TestFieldDocsUpToDate(t *testing.T) {
	dir := t.TempDir()
	_, err := fielddoc.Generate(fielddoc.Options{
		Dir:          ".",
		GoFile:       filepath.Join(dir, "zz_fielddocs.go"),
		MarkdownFile: filepath.Join(dir, "reference.md"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ committed, fresh string }{
		{"zz_fielddocs.go", filepath.Join(dir, "zz_fielddocs.go")},
		{"../docs/reference.md", filepath.Join(dir, "reference.md")},
	} {
		want, err := os.ReadFile(f.fresh)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.committed)
		if err != nil {
			t.Errorf("%v: run `go generate ./schema/`", err)
			continue
		}
		if !bytes.Equal(got, want) {
			line, gotLine, wantLine := firstDifference(got, want)
			t.Errorf("%s is out of date with the doc comments in schema/: run `go generate ./schema/`\nfirst difference, line %d:\n  committed: %q\n  generated: %q", f.committed, line, gotLine, wantLine)
		}
	}
}

// firstDifference returns the first line (from 1) where a and b differ.
func firstDifference(a, b []byte) (int, string, string) {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return i + 1, x, y
		}
	}
	return 0, "", ""
}

func TestFieldDocLookups(t *testing.T) {
	for _, tt := range []struct {
		typ, field string
		ok         bool
		required   bool
		def        string
		docHas     string
	}{
		{"TypeMeta", "apiVersion", true, false, "", "fleet/v1"},
		{"ObjectMeta", "name", true, true, "", "DNS-1123"},
		{"ObjectMeta", "uid", true, false, "", "Set by the hub"},
		{"PodSpec", "restartPolicy", true, false, "Always", "OnFailure"},
		{"RollingUpdate", "maxUnavailable", true, false, "25%", "percentage"},
		{"Container", "image", true, true, "", "image reference"},
		{"Container", "Image", false, false, "", ""}, // JSON names only
		{"Device", "apiVersion", false, false, "", ""},
		{"NoSuchType", "name", false, false, "", ""},
	} {
		f, ok := schema.FieldDoc(tt.typ, tt.field)
		if ok != tt.ok || f.Required != tt.required || f.Default != tt.def || !strings.Contains(f.Doc, tt.docHas) {
			t.Errorf("FieldDoc(%q, %q) = %+v, %v; want ok %v, required %v, default %q, doc with %q", tt.typ, tt.field, f, ok, tt.ok, tt.required, tt.def, tt.docHas)
		}
	}
	if d := schema.TypeDoc("Deployment"); !strings.HasPrefix(d, "Deployment runs one pod") {
		t.Errorf("TypeDoc(Deployment) = %q", d)
	}
	if d := schema.TypeDoc("errList"); d != "" {
		t.Errorf("TypeDoc of an unexported type = %q, want none", d)
	}
	enum := schema.EnumValues("RestartPolicy")
	want := []string{string(schema.RestartAlways), string(schema.RestartOnFailure), string(schema.RestartNever)}
	if !slices.Equal(enum, want) {
		t.Errorf("EnumValues(RestartPolicy) = %q, want %q", enum, want)
	}
	enum[0] = "Sometimes"
	if schema.EnumValues("RestartPolicy")[0] != string(schema.RestartAlways) {
		t.Error("EnumValues shares its slice with the table")
	}
	var stored []string
	for _, k := range schema.StoredKinds() {
		stored = append(stored, k.Kind)
	}
	slices.Sort(stored)
	if kinds := schema.DocumentedKinds(); len(kinds) < len(stored) || !slices.Equal(kinds[:len(stored)], stored) {
		t.Errorf("DocumentedKinds() = %q, want the stored kinds %q first", kinds, stored)
	}
}

// TestFieldDocsMatchReflection walks every documented kind as
// encoding/json sees it, by reflection, and checks that the generator,
// which reads the source instead, found the same fields under the same
// JSON names.
func TestFieldDocsMatchReflection(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(st reflect.Type, path string)
	walk = func(st reflect.Type, path string) {
		if seen[st] {
			return
		}
		seen[st] = true
		for _, f := range reflect.VisibleFields(st) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || f.Anonymous && name == "" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			owner := st
			if len(f.Index) > 1 { // promoted from an embedded struct
				owner = st.FieldByIndex(f.Index[:len(f.Index)-1]).Type
				if owner.Kind() == reflect.Pointer {
					owner = owner.Elem()
				}
			}
			if _, ok := schema.FieldDoc(owner.Name(), name); !ok {
				t.Errorf("%s.%s: no entry for %s.%s in the doc table", path, name, owner.Name(), name)
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == st.PkgPath() {
				walk(ft, path+"."+name)
			}
		}
	}
	for _, k := range schema.Kinds() {
		if schema.TypeDoc(k.Type.Name()) == "" {
			t.Errorf("kind %s has no doc comment", k.Kind)
		}
		walk(k.Type, k.Singular)
	}
}
