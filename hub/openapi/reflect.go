package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fleetmq/fleet/schema"
)

// obj is one JSON object of the description.
type obj = map[string]any

// schemaPkg is the import path of package schema, whose types keep their
// Go names and have field docs.
var schemaPkg = reflect.TypeFor[schema.Status]().PkgPath()

// Special types whose JSON is not what their Go kind says.
var (
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	intOrPercent  = reflect.TypeFor[schema.IntOrPercent]()
	portRef       = reflect.TypeFor[schema.PortRef]()
	bytesType     = reflect.TypeFor[[]byte]()
	stringOrCount = obj{"anyOf": []any{obj{"type": "string"}, obj{"type": "integer"}}}
)

// builder turns Go types into component schemas.
type builder struct {
	docs    *sourceDocs
	schemas obj
	// names maps a struct type to its component name, so that each is
	// described once and two types never share a name.
	names map[reflect.Type]string
	taken map[string]reflect.Type
}

func newBuilder(docs *sourceDocs) *builder {
	return &builder{docs: docs, schemas: obj{}, names: map[reflect.Type]string{}, taken: map[string]reflect.Type{}}
}

// Schemas returns the component schemas of the roots and of every struct
// type they hold, by name. root is the module's directory, whose Go
// source gives the doc comments that schema's fielddoc table lacks; ""
// for none.
func Schemas(roots []Root, root string) (map[string]any, error) {
	docs, err := newSourceDocs(root)
	if err != nil {
		return nil, err
	}
	b := newBuilder(docs)
	for _, r := range roots {
		if err := b.name(r.Type, r.Name); err != nil {
			return nil, err
		}
	}
	for _, r := range roots {
		if _, err := b.ref(r.Type); err != nil {
			return nil, err
		}
	}
	return b.schemas, nil
}

// ComponentName is the name the struct type t gets when no root names
// it: its Go name for a schema type, else its package's name and its Go
// name (DashboardRow).
func ComponentName(t reflect.Type) string {
	name := t.Name()
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	if t.PkgPath() == schemaPkg {
		return name
	}
	pkg := upperFirst(t.PkgPath()[strings.LastIndexByte(t.PkgPath(), '/')+1:])
	name = upperFirst(name)
	if strings.HasPrefix(name, pkg) {
		return name
	}
	return pkg + name
}

func upperFirst(s string) string {
	r := []rune(s)
	if len(r) > 0 {
		r[0] = unicode.ToUpper(r[0])
	}
	return string(r)
}

// name reserves name for the struct type t.
func (b *builder) name(t reflect.Type, name string) error {
	if other, ok := b.taken[name]; ok && other != t {
		return fmt.Errorf("component schema %s: both %v and %v would take the name", name, other, t)
	}
	if old, ok := b.names[t]; ok && old != name {
		return fmt.Errorf("component schema of %v: named both %s and %s", t, old, name)
	}
	b.names[t], b.taken[name] = name, t
	return nil
}

// ref returns a reference to the component schema of the struct type t,
// describing it first if it is not yet.
func (b *builder) ref(t reflect.Type) (obj, error) {
	name, ok := b.names[t]
	if !ok {
		name = ComponentName(t)
		if err := b.name(t, name); err != nil {
			return nil, err
		}
	}
	out := obj{"$ref": "#/components/schemas/" + name}
	if _, done := b.schemas[name]; done {
		return out, nil
	}
	b.schemas[name] = obj{} // described below; stops recursion
	s, err := b.object(t)
	if err != nil {
		return nil, err
	}
	doc := ""
	if t.PkgPath() == schemaPkg {
		doc = schema.TypeDoc(t.Name())
	}
	if doc == "" {
		doc = b.docs.typeDoc(t)
	}
	if doc != "" {
		s["description"] = doc
	}
	b.schemas[name] = s
	return out, nil
}

// object describes a struct type's JSON object.
func (b *builder) object(t reflect.Type) (obj, error) {
	props := obj{}
	if err := b.fields(t, props); err != nil {
		return nil, err
	}
	return obj{"type": "object", "properties": props}, nil
}

// fields adds the JSON fields of the struct t to props, those of
// embedded structs without a JSON name too, as encoding/json does.
func (b *builder) fields(t reflect.Type, props obj) error {
	for f := range t.Fields() {
		name, omit, skip := jsonName(f)
		if skip {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := b.fields(ft, props); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := b.schema(f.Type, !omit)
		if err != nil {
			return fmt.Errorf("%v.%s: %w", t, f.Name, err)
		}
		if t.PkgPath() == schemaPkg {
			s = documented(s, f.Type, t.Name(), name)
		}
		if _, done := s["description"]; !done {
			if doc := b.docs.fieldDoc(t, name); doc != "" {
				s = describe(s, doc)
			}
		}
		props[name] = s
	}
	return nil
}

// documented adds what the field doc of typeName's field jsonName says
// to s, the schema of a field of Go type ft: its description, readOnly
// when the hub sets it ("Set by the hub.", "Read-only"), and its default
// when the doc names one that is a value of the field's type.
func documented(s obj, ft reflect.Type, typeName, jsonName string) obj {
	fd, ok := schema.FieldDoc(typeName, jsonName)
	if !ok || fd.Doc == "" {
		return s
	}
	s = describe(s, fd.Doc)
	if strings.Contains(fd.Doc, "Set by the hub") || strings.Contains(fd.Doc, "Read-only") {
		s["readOnly"] = true
	}
	if v, ok := typedDefault(ft, fd.Default); ok {
		s["default"] = v
	}
	return s
}

// typedDefault turns a documented default into a value of the field's
// JSON type: a number, a boolean, or one of a string type's enumerated
// values; anything else ("no limit on disk") stays in the description.
func typedDefault(ft reflect.Type, def string) (any, bool) {
	if def == "" {
		return nil, false
	}
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	switch ft.Kind() {
	case reflect.Bool:
		if v, err := strconv.ParseBool(def); err == nil {
			return v, true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v, err := strconv.ParseInt(def, 0, 64); err == nil { // 0400 is octal, as in Kubernetes' file modes
			return v, true
		}
	case reflect.String:
		if ft.PkgPath() == schemaPkg && slices.Contains(schema.EnumValues(ft.Name()), def) {
			return def, true
		}
	}
	return nil, false
}

// describe adds a description to s; a reference is wrapped in allOf, as
// OpenAPI 3.0 ignores a reference's siblings.
func describe(s obj, doc string) obj {
	if _, isRef := s["$ref"]; isRef {
		s = obj{"allOf": []any{s}}
	}
	s["description"] = doc
	return s
}

// jsonName reads a field's json tag: its name ("" for none), whether it
// is omitted when empty, and whether it is never encoded.
func jsonName(f reflect.StructField) (name string, omit, skip bool) {
	tag, ok := f.Tag.Lookup("json")
	if !ok {
		return "", false, false
	}
	if tag == "-" {
		return "", false, true
	}
	name, opts, _ := strings.Cut(tag, ",")
	for o := range strings.SplitSeq(opts, ",") {
		if o == "omitempty" || o == "omitzero" {
			omit = true
		}
	}
	return name, omit, false
}

// schema describes the JSON of a value of type t. nullable says whether
// a nil value is encoded (as null) rather than left out.
func (b *builder) schema(t reflect.Type, nullable bool) (obj, error) {
	switch t {
	case timeType:
		return obj{"type": "string", "format": "date-time"}, nil
	case rawType:
		return obj{"description": "any JSON value"}, nil
	case intOrPercent, portRef:
		return obj{"anyOf": stringOrCount["anyOf"]}, nil
	case bytesType:
		return obj{"type": "string", "format": "byte"}, nil
	}
	var s obj
	switch t.Kind() {
	case reflect.Pointer:
		s, err := b.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return orNull(s, nullable), nil
	case reflect.Struct:
		return b.ref(t)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %v: only string keys are described", t.Key())
		}
		v, err := b.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return orNull(obj{"type": "object", "additionalProperties": v}, nullable), nil
	case reflect.Slice, reflect.Array:
		// A nil element of a slice of pointers is encoded as null.
		v, err := b.schema(t.Elem(), t.Elem().Kind() == reflect.Pointer)
		if err != nil {
			return nil, err
		}
		return orNull(obj{"type": "array", "items": v}, nullable), nil
	case reflect.String:
		s = obj{"type": "string"}
		if t.PkgPath() == schemaPkg {
			if vals := schema.EnumValues(t.Name()); len(vals) > 0 {
				enum := make([]any, 0, len(vals)+1)
				for _, v := range vals {
					enum = append(enum, v)
				}
				if nullable { // not omitted when empty: "" is sent
					enum = append(enum, "")
				}
				s["enum"] = enum
			}
		}
	case reflect.Bool:
		s = obj{"type": "boolean"}
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		s = obj{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		s = obj{"type": "integer", "format": "int64"}
		if t.Kind() >= reflect.Uint {
			s["minimum"] = 0
		}
	case reflect.Float32, reflect.Float64:
		s = obj{"type": "number"}
	case reflect.Interface:
		s = obj{"description": "any JSON value"}
	default:
		return nil, fmt.Errorf("type %v (%v) is not described", t, t.Kind())
	}
	return s, nil
}

// orNull marks s as admitting null when nullable.
func orNull(s obj, nullable bool) obj {
	if !nullable {
		return s
	}
	if _, isRef := s["$ref"]; isRef {
		return obj{"allOf": []any{s}, "nullable": true}
	}
	s["nullable"] = true
	return s
}
