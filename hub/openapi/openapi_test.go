package openapi

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/fleetmq/fleet/hub/api"
)

const srcPath = "../api/openapi-paths.yaml"

// load parses and validates the description the hub serves.
func load(t *testing.T, b []byte) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	if err != nil {
		t.Fatalf("load the OpenAPI description: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI description does not validate: %v", err)
	}
	return doc
}

func TestServedDescriptionIsGenerated(t *testing.T) {
	src, err := os.ReadFile(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(src, "../..")
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	if !bytes.Equal(api.OpenAPIYAML(), want) {
		t.Fatal("hub/api/openapi.yaml is stale (a Go type or openapi-paths.yaml changed): run go generate ./hub/api/")
	}
}

func TestDescriptionValidates(t *testing.T) {
	doc := load(t, api.OpenAPIYAML())
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	js, err := api.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := load(t, js)
	if a, b := len(doc.Paths.Map()), len(fromJSON.Paths.Map()); a != b || a == 0 {
		t.Errorf("YAML has %d paths, JSON %d", a, b)
	}
	if _, ok := doc.Components.SecuritySchemes["bearerToken"]; !ok {
		t.Error("no bearerToken security scheme")
	}
	// Every operation names the roles that may call it, and one that
	// takes no token says so.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			roles, ok := op.Extensions["x-fleet-roles"].([]any)
			if !ok || len(roles) == 0 {
				t.Errorf("%s %s: no x-fleet-roles", method, path)
				continue
			}
			public := op.Security != nil && len(*op.Security) == 0
			if anyone := slices.Contains(roles, any("anyone")); anyone != public {
				t.Errorf("%s %s: x-fleet-roles %v but security %v", method, path, roles, op.Security)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", method, path)
			}
		}
	}
}

// TestSchemasHaveEveryGoField walks the Go types on its own and looks
// for each JSON field in the served description's component schemas.
func TestSchemasHaveEveryGoField(t *testing.T) {
	doc := load(t, api.OpenAPIYAML())
	names := map[reflect.Type]string{}
	for _, r := range Roots() {
		names[r.Type] = r.Name
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	var walkStruct func(st reflect.Type, props openapi3.Schemas, owner string)
	walkStruct = func(st reflect.Type, props openapi3.Schemas, owner string) {
		for f := range st.Fields() {
			name, _, skip := jsonName(f)
			if skip {
				continue
			}
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walkStruct(f.Type, props, owner)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, ok := props[name]; !ok {
				t.Errorf("field %s of %v (json %q) is missing from components.schemas.%s: run go generate ./hub/api/", f.Name, st, name, owner)
			}
			walk(f.Type)
		}
	}
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map || ty.Kind() == reflect.Array {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || ty == timeType || seen[ty] {
			return
		}
		seen[ty] = true
		name, ok := names[ty]
		if !ok {
			name = ComponentName(ty)
		}
		s := doc.Components.Schemas[name]
		if s == nil || s.Value == nil {
			t.Errorf("%v has no component schema %s: run go generate ./hub/api/", ty, name)
			return
		}
		walkStruct(ty, s.Value.Properties, name)
	}
	for _, r := range Roots() {
		walk(r.Type)
	}
	if len(seen) < 50 {
		t.Errorf("walked %d struct types: the walk is broken", len(seen))
	}
}

// TestEveryRootIsUsed: a type listed in Roots is an answer or a body of
// some route, so the paths refer to it.
func TestEveryRootIsUsed(t *testing.T) {
	src, err := os.ReadFile(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := load(t, api.OpenAPIYAML())
	const prefix = "'#/components/schemas/"
	for rest := string(src); ; {
		_, after, ok := strings.Cut(rest, prefix)
		if !ok {
			break
		}
		name, _, _ := strings.Cut(after, "'")
		if doc.Components.Schemas[name] == nil {
			t.Errorf("hub/api/openapi-paths.yaml refers to %s%s', which does not exist", prefix, name)
		}
		rest = after
	}
	for _, r := range Roots() {
		if !strings.Contains(string(src), prefix+r.Name+"'") {
			t.Errorf("components.schemas.%s (%v) is in Roots but no path in hub/api/openapi-paths.yaml refers to it", r.Name, r.Type)
		}
	}
}

// TestGenerateRefusesAClash: a hand-written schema may not shadow a
// generated one.
func TestGenerateRefusesAClash(t *testing.T) {
	src := []byte("openapi: 3.0.3\ninfo: {title: t, version: v1}\npaths: {}\ncomponents:\n  schemas:\n    Status: {type: string}\n")
	_, err := Generate(src, "")
	if err == nil || !strings.Contains(err.Error(), "components.schemas.Status") {
		t.Fatalf("Generate = %v, want an error naming components.schemas.Status", err)
	}
	if _, err := Generate([]byte("openapi: ["), ""); err == nil {
		t.Fatal("Generate of malformed YAML: no error")
	}
}
