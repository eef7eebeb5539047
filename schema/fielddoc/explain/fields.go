package explain

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Field is one JSON field of a struct.
type Field struct {
	Name string
	// Type is the field's as declared: pointers, lists and maps included.
	Type reflect.Type
	// Owner is the struct that declares it, whose docs say what it is.
	Owner reflect.Type
}

// Fields lists the JSON fields of struct t by name, those of embedded
// structs without a JSON name of their own inlined, as encoding/json does.
func Fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, Fields(et)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, Field{Name: name, Type: f.Type, Owner: t})
	}
	slices.SortFunc(out, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	return out
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshaler     = reflect.TypeFor[encoding.TextMarshaler]()
	schemaPackagePath = reflect.TypeFor[schema.TypeMeta]().PkgPath()
)

// StructOf returns the struct whose fields are those of a value of type
// t: t's own, or those of the items of a list or map. ok is false for a
// scalar, or a list or map of them.
func StructOf(t reflect.Type) (reflect.Type, bool) { return structOf(t) }

func structOf(t reflect.Type) (reflect.Type, bool) {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Map:
			t = t.Elem()
			continue
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Uint8 {
				return nil, false // []byte: a base64 string
			}
			t = t.Elem()
			continue
		}
		break
	}
	if t.Kind() != reflect.Struct || isScalarStruct(t) {
		return nil, false
	}
	return t, true
}

// isScalarStruct reports whether JSON sees a struct as one value
// (time.Time is an RFC 3339 string).
func isScalarStruct(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t == timeType || p.Implements(jsonMarshaler) || p.Implements(textMarshaler)
}

// typeName names a field's type as kubectl explain does: string, integer,
// boolean, []Container, map[string]string, ObjectMeta.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string"
		}
		return "[]" + typeName(t.Elem())
	case reflect.Map:
		return "map[string]" + typeName(t.Elem())
	case reflect.Struct:
		if t == timeType {
			return "string"
		}
		if t.Name() != "" && !isScalarStruct(t) {
			return t.Name()
		}
	}
	return "object"
}

// typeDoc is the doc comment of the struct or named type t stands for.
func typeDoc(t reflect.Type) string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.PkgPath() != schemaPackagePath {
		return ""
	}
	return schema.TypeDoc(t.Name())
}

// enumOf returns the values a field of type t allows, if its type says.
func enumOf(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != schemaPackagePath || t.Kind() != reflect.String {
		return nil
	}
	return schema.EnumValues(t.Name())
}

// FieldInfo documents a field of the resource from its declaring struct's
// doc comments, or the resource's FieldDocs.
func (r Resource) FieldInfo(f Field) schema.FieldInfo {
	if f.Owner == r.Type && r.FieldDocs != nil {
		return schema.FieldInfo{Doc: r.FieldDocs[f.Name]}
	}
	if f.Owner.PkgPath() != schemaPackagePath {
		return schema.FieldInfo{}
	}
	info, _ := schema.FieldDoc(f.Owner.Name(), f.Name)
	return info
}
