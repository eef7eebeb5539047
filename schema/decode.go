package schema

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// MaxManifestBytes bounds a manifest file or request body.
const MaxManifestBytes = 4 << 20

// maxDocuments bounds the documents in one manifest stream.
const maxDocuments = 1000

// Decode parses a stream of YAML or JSON documents ("---"-separated) into
// typed objects, strictly: unknown fields, duplicate keys, a wrong apiVersion
// or an unknown kind are errors. It neither defaults nor validates a good
// object; see DecodeManifests. A bad document's error also lists what
// validation finds wrong in the rest of it, so one round of fixes suffices,
// and may carry hints (see Hints), such as how a Kubernetes manifest
// converts. Every bad document is reported, each prefixed "document N: "
// when the stream has several.
func Decode(data []byte) ([]Object, error) {
	docs, total, err := decodeStream(data)
	if err != nil {
		return nil, err
	}
	var objs []Object
	var errs []error
	for _, d := range docs {
		if d.err != nil {
			errs = append(errs, d.error(total))
			continue
		}
		objs = append(objs, d.obj)
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return objs, nil
}

// DecodeManifests decodes, defaults and validates every object in data.
// Validation errors of all objects are reported together.
func DecodeManifests(data []byte) ([]Object, error) {
	docs, total, err := decodeStream(data)
	if err != nil {
		return nil, err
	}
	failed := false
	for _, d := range docs {
		failed = failed || d.err != nil
	}
	if failed {
		// Some document does not decode: report it with every other
		// document that does not validate, each by its number.
		var errs []error
		for _, d := range docs {
			if d.err == nil {
				Default(d.obj)
				d.err = Validate(d.obj)
			}
			if d.err != nil {
				errs = append(errs, d.error(total))
			}
		}
		return nil, joinErrors(errs)
	}
	var msgs []string
	var first error
	objs := make([]Object, 0, len(docs))
	for _, d := range docs {
		o := d.obj
		Default(o)
		if err := Validate(o); err != nil {
			if first == nil {
				first = err
			}
			msgs = append(msgs, err.Error())
		}
		objs = append(objs, o)
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

// document is the outcome of decoding one document of a stream: an object
// or an error.
type document struct {
	n   int // position in the stream, from 1
	obj Object
	err error
}

// error is the document's error, prefixed with its number when the stream
// has several documents.
func (d document) error(total int) error {
	if total > 1 {
		return fmt.Errorf("document %d: %w", d.n, d.err)
	}
	return d.err
}

// decodeStream decodes every document of data, skipping empty ones. It
// fails as a whole only when data cannot be a manifest at all; total is
// the number of documents, empty ones included.
func decodeStream(data []byte) (docs []document, total int, err error) {
	if len(data) > MaxManifestBytes {
		return nil, 0, fmt.Errorf("%w: manifest is %d bytes, more than the %d allowed", ErrInvalid, len(data), MaxManifestBytes)
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return nil, 0, fmt.Errorf("%w: manifest is not text (NUL bytes or invalid UTF-8): want YAML or JSON", ErrInvalid)
	}
	raws := splitDocuments(data)
	if len(raws) > maxDocuments {
		return nil, 0, fmt.Errorf("%w: %d documents, more than the %d allowed in one manifest", ErrInvalid, len(raws), maxDocuments)
	}
	for i, raw := range raws {
		obj, err := decodeDocument(raw)
		if obj != nil || err != nil {
			docs = append(docs, document{n: i + 1, obj: obj, err: err})
		}
	}
	if len(docs) == 0 {
		return nil, 0, fmt.Errorf("%w: no objects in manifest", ErrInvalid)
	}
	return docs, len(raws), nil
}

// joinErrors returns the only error of errs as it is, several joined.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
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
	// Numbers stay json.Numbers, so that an integer field is checked, and
	// re-encoded, exactly as written.
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: a manifest document must be a mapping with apiVersion, kind, metadata and spec", ErrInvalid)
	}
	var tm TypeMeta
	tm.APIVersion, _ = raw["apiVersion"].(string)
	tm.Kind, _ = raw["kind"].(string)
	name := nameOf(raw)
	var c fieldCheck
	if tm.APIVersion != APIVersion {
		c.errs.add("apiVersion", "must be %q, got %q", APIVersion, truncate(fmt.Sprint(valueOr(raw["apiVersion"]))))
	}
	c.hints.add(kindHints(tm.APIVersion, tm.Kind, raw)...)
	obj := NewObject(tm.Kind)
	if obj == nil {
		c.errs.add("kind", "must be %s, got %q", quotedKinds(), truncate(fmt.Sprint(valueOr(raw["kind"]))))
		conversionHints(raw, tm.Kind, &c.hints)
		return nil, withHints(c.errs.err("", name), c.hints)
	}
	checkUnknownFields(raw, reflect.TypeOf(obj).Elem(), "", &c)
	if len(c.errs) == 0 {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			return nil, withHints((errList{typeError(err)}).err(tm.Kind, name), c.hints)
		}
		return obj, nil
	}
	// checkUnknownFields removed from raw what it reported: decode the
	// rest and validate it too, so that the user sees every problem of the
	// document at once rather than one round at a time.
	if rest, err := json.Marshal(raw); err == nil && json.Unmarshal(rest, obj) == nil {
		Default(obj)
		var ve *ValidationError
		if errors.As(Validate(obj), &ve) {
			c.errs = mergeFieldErrors(c.errs, ve.Errors, c.suggested)
		}
	}
	return nil, withHints(c.errs.err(tm.Kind, name), c.hints)
}

// mergeFieldErrors adds to decodeErrs the validation errors that say
// something new: none about a field that decodeErrs already names, or
// about a part of it (a field of the wrong type was decoded as empty, and
// its emptiness is not news), nor about a field an unknown one was
// suggested for (suggested: "image" is required because it was spelled
// "Image"). The result is sorted by field path.
func mergeFieldErrors(decodeErrs, validation errList, suggested []string) errList {
	covered := make(map[string]bool, len(decodeErrs)+len(suggested))
	for _, e := range decodeErrs {
		if e.Field != "" {
			covered[e.Field] = true
		}
	}
	for _, f := range suggested {
		covered[f] = true
	}
	seen := make(map[FieldError]bool, len(decodeErrs))
	for _, e := range decodeErrs {
		seen[e] = true
	}
	out := slices.Clone(decodeErrs)
	for _, v := range validation {
		if !seen[v] && !within(v.Field, covered) {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.SortStableFunc(out, func(a, b FieldError) int { return comparePaths(a.Field, b.Field) })
	return out
}

// within reports whether field is one of fields or a part of one
// (containers[0].image is a part of containers[0] and of containers).
func within(field string, fields map[string]bool) bool {
	for i := 1; i <= len(field); i++ {
		if (i == len(field) || field[i] == '.' || field[i] == '[') && fields[field[:i]] {
			return true
		}
	}
	return false
}

// comparePaths orders field paths as a reader expects: by name, list
// indices by number (containers[2] before containers[10]).
func comparePaths(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, nb := digitRun(a), digitRun(b)
			x, y := strings.TrimLeft(a[:na], "0"), strings.TrimLeft(b[:nb], "0")
			if c := cmp.Compare(len(x), len(y)); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[na:], b[nb:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitRun(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
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
	switch t {
	case intOrPercentType:
		return "a count or a percentage such as \"5%\""
	case portRefType:
		return "a port number or name"
	case bytesType:
		return "base64 string"
	}
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

// fieldCheck is what checkUnknownFields finds: errors, each naming its
// field by full path, hints on how to fix them, and the paths of the fields
// it suggested for unknown ones.
type fieldCheck struct {
	errs      errList
	hints     hintList
	suggested []string
}

// checkUnknownFields walks raw JSON against the Go type t and reports every
// key the type does not have, and every value of the wrong type, with its
// full path. It removes what it reports from v (a list item becomes null,
// keeping the indices of the others), so that the rest decodes. It returns
// false when v itself is to be removed.
func checkUnknownFields(v any, t reflect.Type, path string, c *fieldCheck) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return true // null is the zero value
	}
	if t == timeType {
		s, ok := v.(string)
		if !ok {
			c.errs.add(path, "wrong type: got %s, want a RFC 3339 time string", jsonValueName(v))
			return false
		}
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			c.errs.add(path, "%q is not a RFC 3339 time such as 2006-01-02T15:04:05Z", truncate(s))
			return false
		}
		return true
	}
	if !kindMatches(v, t) {
		c.errs.add(path, "wrong type: got %s, want %s", jsonValueName(v), jsonTypeName(t))
		return false
	}
	if t == bytesType {
		if _, err := base64.StdEncoding.DecodeString(v.(string)); err != nil {
			c.errs.add(path, "not valid base64: %v (use stringData for text)", err)
			return false
		}
		return true
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if msg := checkInt(v.(json.Number), t); msg != "" {
			c.errs.add(path, "%s", msg)
			return false
		}
	case reflect.Map:
		m := v.(map[string]any)
		for _, k := range sortedKeys(m) {
			if !checkUnknownFields(m[k], t.Elem(), path+"["+k+"]", c) {
				delete(m, k)
			}
		}
	case reflect.Struct:
		m := v.(map[string]any)
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := fields[k]
			p := joinPath(path, k)
			if !ok {
				if s := suggestField(t, k, fields); s != "" {
					c.errs.add(p, "unknown field %q, did you mean %q?", truncate(k), s)
					c.suggested = append(c.suggested, joinPath(path, s))
				} else {
					c.errs.add(p, "unknown field")
				}
				c.hints.add(fieldHints[fieldKey{t, k}])
				delete(m, k)
				continue
			}
			if !checkUnknownFields(m[k], ft, p, c) {
				c.hints.add(typeHints[fieldKey{t, k}])
				delete(m, k)
			}
		}
	case reflect.Slice:
		s := v.([]any)
		for i, it := range s {
			if !checkUnknownFields(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), c) {
				s[i] = nil
			}
		}
	}
	return true
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	bytesType = reflect.TypeFor[[]byte]()
)

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkInt reports what is wrong with n as a value of the integer type t.
func checkInt(n json.Number, t reflect.Type) string {
	var err error
	lo, hi := fmt.Sprint(int64(math.MinInt64)>>(64-t.Bits())), fmt.Sprint(int64(math.MaxInt64)>>(64-t.Bits()))
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, err = strconv.ParseUint(string(n), 10, t.Bits())
		lo, hi = "0", fmt.Sprint(uint64(math.MaxUint64)>>(64-t.Bits()))
	default:
		_, err = strconv.ParseInt(string(n), 10, t.Bits())
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, strconv.ErrRange):
		return fmt.Sprintf("%s is out of range: want an integer from %s to %s", truncate(string(n)), lo, hi)
	}
	return fmt.Sprintf("wrong type: got number %s, want integer", truncate(string(n)))
}

// kindMatches reports whether a decoded JSON value fits the Go type.
func kindMatches(v any, t reflect.Type) bool {
	switch t {
	case intOrPercentType, portRefType:
		_, isString := v.(string)
		_, isNumber := v.(json.Number)
		return isString || isNumber
	case bytesType:
		_, isString := v.(string)
		return isString
	}
	switch t.Kind() {
	case reflect.String:
		_, ok := v.(string)
		return ok
	case reflect.Bool:
		_, ok := v.(bool)
		return ok
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		_, ok := v.(json.Number)
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
	case json.Number:
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
