package printers

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// The JSONPath dialect is client-go's (util/jsonpath), the one kubectl's
// -o jsonpath, -o custom-columns and --sort-by use: {.items[*].metadata.name},
// ranges, filters such as {.items[?(@.status.online==true)]}, unions and
// recursive descent. Templates run over the JSON form of what -o json
// prints, with numbers as integers where they are whole.

// compiled is what a Printer prepares from its Template and SortBy.
type compiled struct {
	jsonPath *jsonpath.JSONPath // -o jsonpath
	columns  []column           // -o custom-columns
	sortBy   *jsonpath.JSONPath // --sort-by
	sortExpr string             // --sort-by as given, for errors
}

// column is one column of -o custom-columns.
type column struct {
	header string
	expr   string // as given, for errors
	path   *jsonpath.JSONPath
}

// Compile checks the printer's Template (for JSONPath and CustomColumns)
// and SortBy and prepares them; errors name the bad template. Printing
// compiles on first use, so calling Compile first only moves the error
// before any request.
func (p *Printer) Compile() error {
	if p.compiled != nil {
		return nil
	}
	var c compiled
	var err error
	switch p.Format {
	case JSONPath:
		if c.jsonPath, err = parseJSONPath(p.Template); err != nil {
			return err
		}
	case CustomColumns:
		if c.columns, err = parseColumns(p.Template); err != nil {
			return err
		}
	case JSONPathFile:
		return errors.New("-o jsonpath-file: read the file and print with -o jsonpath and its text")
	}
	if p.SortBy != "" {
		expr, err := relaxedPath(p.SortBy)
		if err != nil {
			return fmt.Errorf("--sort-by %q: %w", p.SortBy, err)
		}
		c.sortBy = jsonpath.New("sort-by").AllowMissingKeys(true)
		if err := c.sortBy.Parse(expr); err != nil {
			return fmt.Errorf("--sort-by %q: error parsing jsonpath %s: %w", p.SortBy, expr, err)
		}
		c.sortExpr = p.SortBy
	}
	p.compiled = &c
	return nil
}

// parseJSONPath parses the template of -o jsonpath as kubectl does: text
// outside braces is printed as is, and a field missing from an object
// prints nothing.
func parseJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	if strings.TrimSpace(tmpl) == "" {
		return nil, errors.New("-o jsonpath: the template is empty: give one, as in -o jsonpath='{.items[*].metadata.name}'")
	}
	j := jsonpath.New("output").AllowMissingKeys(true)
	if err := j.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("error parsing jsonpath %s: %w", tmpl, err)
	}
	return j, nil
}

// parseColumns parses the spec of -o custom-columns:
// HEADER:PATH[,HEADER:PATH...]. A PATH may leave out the braces and the
// leading dot (metadata.name is {.metadata.name}); commas inside brackets,
// parentheses or quotes belong to the path.
func parseColumns(spec string) ([]column, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("custom-columns format specified but no custom columns given: want -o custom-columns=HEADER:PATH[,HEADER:PATH...], as in NAME:.metadata.name")
	}
	var cols []column
	for i, part := range splitColumns(spec) {
		header, expr, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("unexpected custom-columns spec: %s, expected <header>:<json-path-expr>", part)
		}
		if strings.TrimSpace(header) == "" {
			return nil, fmt.Errorf("custom-columns: column %d (%q) has no header: want HEADER:PATH", i+1, part)
		}
		path, err := relaxedPath(expr)
		if err != nil {
			return nil, fmt.Errorf("custom-columns: column %s: %w", header, err)
		}
		j := jsonpath.New(header).AllowMissingKeys(true)
		if err := j.Parse(path); err != nil {
			return nil, fmt.Errorf("custom-columns: column %s: error parsing jsonpath %s: %w", header, expr, err)
		}
		cols = append(cols, column{header: header, expr: expr, path: j})
	}
	return cols, nil
}

// splitColumns splits a custom-columns spec at the commas that are not
// inside brackets, braces, parentheses or quotes.
func splitColumns(spec string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(spec); i++ {
		c := spec[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{' || c == '(':
			depth++
		case c == ']' || c == '}' || c == ')':
			depth--
		case c == ',' && depth <= 0:
			parts = append(parts, spec[start:i])
			start = i + 1
		}
	}
	return append(parts, spec[start:])
}

// relaxedPath turns the path forms kubectl accepts for custom-columns and
// --sort-by (.a.b, a.b, {.a.b}, {a.b}) into a template: {.a.b}.
func relaxedPath(expr string) (string, error) {
	s := strings.TrimSpace(expr)
	if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
		s = s[1 : len(s)-1]
	}
	s = strings.TrimPrefix(s, ".")
	switch {
	case s == "":
		return "", fmt.Errorf("%q: want a path such as .metadata.name", expr)
	case strings.ContainsAny(s, "{}"):
		return "", fmt.Errorf("%q: unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'", expr)
	}
	return "{." + s + "}", nil
}

// jsonValue is v as its JSON decodes into plain Go values, whole numbers
// as int64 and others as float64, the form templates run over.
func jsonValue(v any) (any, error) {
	out, err := decodeJSON(v)
	if err != nil {
		return nil, err
	}
	return numbers(out), nil
}

// decodeJSON is v as its JSON decodes into plain Go values, numbers as
// json.Number.
func decodeJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode json: %w", err)
	}
	return out, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	}
	return v
}

// printJSONPath prints the template over the JSON form of v.
func (p *Printer) printJSONPath(v any) error {
	data, err := jsonValue(v)
	if err != nil {
		return err
	}
	if err := p.compiled.jsonPath.Execute(p.Out, data); err != nil {
		return fmt.Errorf("error executing jsonpath %q: %w", p.Template, err)
	}
	return nil
}

// columnHeaders are the headers of -o custom-columns (nil with NoHeaders).
func (p *Printer) columnHeaders() []string {
	if p.NoHeaders {
		return nil
	}
	h := make([]string, len(p.compiled.columns))
	for i, c := range p.compiled.columns {
		h[i] = c.header
	}
	return h
}

// columnRow is the row of -o custom-columns for v: each column's values
// joined by commas, <none> when the path finds nothing.
func (p *Printer) columnRow(v any) ([]string, error) {
	data, err := jsonValue(v)
	if err != nil {
		return nil, err
	}
	row := make([]string, len(p.compiled.columns))
	for i, c := range p.compiled.columns {
		results, err := c.path.FindResults(data)
		if err != nil {
			return nil, fmt.Errorf("custom-columns: column %s (%s): %w", c.header, c.expr, err)
		}
		var vals []string
		for _, r := range results {
			for _, v := range r {
				vals = append(vals, cellText(v))
			}
		}
		if len(vals) == 0 {
			row[i] = none
		} else {
			row[i] = strings.Join(vals, ",")
		}
	}
	return row, nil
}

// cellText is a value in a table cell: scalars as text, objects and lists
// as compact JSON, null as <none>, on one line.
func cellText(v reflect.Value) string {
	for v.IsValid() && v.Kind() == reflect.Interface {
		if v.IsNil() {
			return none
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return none
	}
	var s string
	switch v.Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return fmt.Sprint(v.Interface())
		}
		s = string(b)
	default:
		s = fmt.Sprint(v.Interface())
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// sortItems sorts items (stably) by the value at --sort-by in each: the
// items without one first, then booleans (false first), numbers by value,
// strings in natural order (pi-2 before pi-10), anything else by its JSON.
// It fails when no item has a value there.
func sortItems[T any](p *Printer, items []T) error {
	if p.compiled.sortBy == nil || len(items) == 0 {
		return nil
	}
	type keyed struct {
		item T
		key  reflect.Value // invalid: none
	}
	ks := make([]keyed, len(items))
	found := false
	for i, it := range items {
		data, err := jsonValue(it)
		if err != nil {
			return err
		}
		results, err := p.compiled.sortBy.FindResults(data)
		if err != nil {
			return fmt.Errorf("--sort-by %q: %w", p.compiled.sortExpr, err)
		}
		ks[i].item = it
		if len(results) > 0 && len(results[0]) > 0 {
			ks[i].key = results[0][0]
			found = true
		}
	}
	if !found {
		return fmt.Errorf("couldn't find any field with path %q in the list of objects", p.compiled.sortExpr)
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return compareValues(a.key, b.key) })
	for i := range ks {
		items[i] = ks[i].item
	}
	return nil
}

// compareValues orders two sort keys; see sortItems.
func compareValues(a, b reflect.Value) int {
	ra, va := sortRank(a)
	rb, vb := sortRank(b)
	if ra != rb {
		return cmp.Compare(ra, rb)
	}
	switch x := va.(type) {
	case bool:
		y := vb.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case int64:
		if y, ok := vb.(int64); ok {
			return cmp.Compare(x, y)
		}
		return cmp.Compare(float64(x), vb.(float64))
	case float64:
		if y, ok := vb.(int64); ok {
			return cmp.Compare(x, float64(y))
		}
		return cmp.Compare(x, vb.(float64))
	case string:
		return naturalCompare(x, vb.(string))
	}
	return 0
}

// sortRank is the rank of a sort key's type and its comparable value.
func sortRank(v reflect.Value) (int, any) {
	for v.IsValid() && v.Kind() == reflect.Interface {
		if v.IsNil() {
			return 0, nil
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return 0, nil
	}
	switch x := v.Interface().(type) {
	case bool:
		return 1, x
	case int64:
		return 2, x
	case float64:
		return 2, x
	case string:
		return 3, x
	}
	b, _ := json.Marshal(v.Interface())
	return 4, string(b)
}

// naturalCompare compares strings with their runs of digits taken as
// numbers: "pi-2" < "pi-10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, ra := digitRun(a)
			nb, rb := digitRun(b)
			ta, tb := strings.TrimLeft(na, "0"), strings.TrimLeft(nb, "0")
			if c := cmp.Compare(len(ta), len(tb)); c != 0 {
				return c
			}
			if c := strings.Compare(ta, tb); c != 0 {
				return c
			}
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c // fewer leading zeros first
			}
			a, b = ra, rb
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

func digitRun(s string) (run, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// templated reports whether the format prints through a template.
func (f Format) templated() bool { return f == JSONPath || f == CustomColumns }
