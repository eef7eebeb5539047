package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// MaxManifestBytes bounds a manifest file or request body.
const MaxManifestBytes = 4 << 20

// maxDocuments bounds the documents in one manifest stream.
const maxDocuments = 1000

// Decode parses a stream of YAML or JSON documents ("---"-separated) into
// typed objects, strictly: unknown fields, duplicate keys, a wrong apiVersion
// or an unknown kind are errors. It neither defaults nor validates; see
// DecodeManifests.
func Decode(data []byte) ([]Object, error) {
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest is %d bytes, more than the %d allowed", ErrInvalid, len(data), MaxManifestBytes)
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: manifest is not text (NUL bytes or invalid UTF-8): want YAML or JSON", ErrInvalid)
	}
	docs := splitDocuments(data)
	if len(docs) > maxDocuments {
		return nil, fmt.Errorf("%w: %d documents, more than the %d allowed in one manifest", ErrInvalid, len(docs), maxDocuments)
	}
	var objs []Object
	for i, doc := range docs {
		obj, err := decodeDocument(doc)
		if err != nil {
			if len(docs) > 1 {
				return nil, fmt.Errorf("document %d: %w", i+1, err)
			}
			return nil, err
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%w: no objects in manifest", ErrInvalid)
	}
	return objs, nil
}

// DecodeManifests decodes, defaults and validates every object in data.
// Validation errors of all objects are reported together.
func DecodeManifests(data []byte) ([]Object, error) {
	objs, err := Decode(data)
	if err != nil {
		return nil, err
	}
	var msgs []string
	var first error
	for _, o := range objs {
		Default(o)
		if err := Validate(o); err != nil {
			if first == nil {
				first = err
			}
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 1 {
		return nil, first
	}
	if len(msgs) > 1 {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "\n"))
	}
	return objs, nil
}

// DecodeObject decodes exactly one object (the body of a PUT, say),
// defaults and validates it.
func DecodeObject(data []byte) (Object, error) {
	objs, err := DecodeManifests(data)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%w: want exactly one object, got %d", ErrInvalid, len(objs))
	}
	return objs[0], nil
}

// NewObject returns an empty object of the kind, or nil for an unknown kind.
func NewObject(kind string) Object {
	switch kind {
	case KindDevice:
		return &Device{}
	case KindDeployment:
		return &Deployment{}
	}
	return nil
}

// splitDocuments splits a YAML stream on "---" separator lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) || bytes.HasPrefix(trimmed, []byte("---\t")) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.Write(line)
	}
	return append(docs, cur.Bytes())
}

// decodeDocument returns nil, nil for an empty document.
func decodeDocument(doc []byte) (Object, error) {
	if isBlankYAML(doc) {
		return nil, nil
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid YAML or JSON: %s", ErrInvalid, cleanYAMLError(err))
	}
	js = bytes.TrimSpace(js)
	if bytes.Equal(js, []byte("null")) {
		return nil, nil
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%w: a manifest document must be a mapping with apiVersion, kind, metadata and spec", ErrInvalid)
	}
	var tm TypeMeta
	tm.APIVersion, _ = raw["apiVersion"].(string)
	tm.Kind, _ = raw["kind"].(string)
	var errs errList
	if tm.APIVersion != APIVersion {
		errs.add("apiVersion", "must be %q, got %q", APIVersion, truncate(fmt.Sprint(valueOr(raw["apiVersion"]))))
	}
	obj := NewObject(tm.Kind)
	if obj == nil {
		errs.add("kind", "must be %q or %q, got %q", KindDeployment, KindDevice, truncate(fmt.Sprint(valueOr(raw["kind"]))))
		return nil, errs.err("", nameOf(raw))
	}
	checkUnknownFields(raw, reflect.TypeOf(obj).Elem(), "", &errs)
	if len(errs) > 0 {
		return nil, errs.err(tm.Kind, nameOf(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, (errList{typeError(err)}).err(tm.Kind, nameOf(raw))
	}
	return obj, nil
}

func valueOr(v any) any {
	if v == nil {
		return ""
	}
	return v
}

func nameOf(raw map[string]any) string {
	if md, ok := raw["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok {
			return truncate(n)
		}
	}
	return ""
}

func isBlankYAML(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "error converting YAML to JSON: ")
	return s
}

// typeError turns a json type error into a field error.
func typeError(err error) FieldError {
	var te *json.UnmarshalTypeError
	if ok := asErr(err, &te); ok {
		field := te.Field
		return FieldError{Field: field, Message: fmt.Sprintf("wrong type: got %s, want %s", te.Value, jsonTypeName(te.Type))}
	}
	return FieldError{Message: err.Error()}
}

func asErr(err error, target **json.UnmarshalTypeError) bool {
	te, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*target = te
	}
	return ok
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64, reflect.Uint32:
		return "integer"
	case reflect.Slice:
		return "list"
	case reflect.Map, reflect.Struct:
		return "mapping"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return t.String()
}

// checkUnknownFields walks raw JSON against the Go type t and reports every
// key the type does not have, with its full path.
func checkUnknownFields(v any, t reflect.Type, path string, errs *errList) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return // null is the zero value
	}
	if t.String() == "time.Time" {
		if _, ok := v.(string); !ok {
			errs.add(path, "wrong type: got %s, want a RFC 3339 time string", jsonValueName(v))
		}
		return
	}
	if !kindMatches(v, t) {
		errs.add(path, "wrong type: got %s, want %s", jsonValueName(v), jsonTypeName(t))
		return
	}
	switch t.Kind() {
	case reflect.Map:
		for k, item := range v.(map[string]any) {
			checkUnknownFields(item, t.Elem(), path+"["+k+"]", errs)
		}
	case reflect.Struct:
		m := v.(map[string]any)
		fields := jsonFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			p := joinPath(path, k)
			if !ok {
				errs.add(p, "unknown field")
				continue
			}
			checkUnknownFields(m[k], ft, p, errs)
		}
	case reflect.Slice:
		for i, it := range v.([]any) {
			checkUnknownFields(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

// kindMatches reports whether a decoded JSON value fits the Go type.
func kindMatches(v any, t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String:
		_, ok := v.(string)
		return ok
	case reflect.Bool:
		_, ok := v.(bool)
		return ok
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64, reflect.Uint32, reflect.Float64:
		_, ok := v.(float64)
		return ok
	case reflect.Slice:
		_, ok := v.([]any)
		return ok
	case reflect.Map, reflect.Struct:
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

func jsonValueName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case []any:
		return "list"
	case map[string]any:
		return "mapping"
	}
	return "null"
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonFields maps JSON names to field types, flattening embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
