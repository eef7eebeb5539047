package fielddoc

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Package is what Parse reads from an API package: its kinds and every
// type reachable from them.
type Package struct {
	// Name is the Go package name ("schema").
	Name string
	// Kinds are the names of the kind types: the stored resources (types
	// with a GetMetadata method), then the other kinds, each by name.
	Kinds []string
	// Types holds every type reachable from the kinds through their JSON
	// fields, by Go name: the kinds, the structs they contain, the
	// embedded structs whose fields they inline and the named non-struct
	// types of their fields (RestartPolicy).
	Types map[string]*Type
}

// Type is one named type of the package.
type Type struct {
	Name string
	// Doc is the type's doc comment as plain text (see Field.Doc).
	Doc string
	// Struct is set for a struct type; Fields then lists its fields in
	// declaration order.
	Struct bool
	Fields []*Field
	// Underlying is the JSON type of a named non-struct type ("string"
	// for RestartPolicy).
	Underlying *Expr
	// Enum lists the values of the string constants declared with the
	// type (RestartPolicy: Always, OnFailure, Never), in declaration
	// order.
	Enum []string
	// Object is set for a type with a GetMetadata method: a stored
	// resource, written in manifests, rather than a wire payload.
	Object bool
}

// Field is one field of a struct as encoding/json sees it.
type Field struct {
	// Name is the JSON name; "" for an embedded struct whose fields are
	// inlined into the embedding one (TypeMeta).
	Name string
	// GoName is the name in Go source.
	GoName string
	// Doc is the field's doc comment (or its line comment, when it has
	// none) as plain text: one line per paragraph, paragraphs separated
	// by a blank line; Go doc links are reduced to their text.
	Doc string
	// Required is set when a sentence of Doc starts with "Required".
	Required bool
	// Default is what a sentence of Doc that starts with "Default" (or
	// "Defaults to", "Default is", "Default:") names, without quotes:
	// `Default "25%".` gives 25%.
	Default string
	Type    *Expr
}

// ExprKind classifies a field's type.
type ExprKind int

const (
	// Basic is a JSON scalar or opaque value; Expr.Name is "string",
	// "integer", "number", "boolean" or "object".
	Basic ExprKind = iota
	// Named is a type of the package; Expr.Name is its Go name.
	Named
	// Slice is a JSON array of Expr.Elem.
	Slice
	// Map is a JSON object with string keys and Expr.Elem values.
	Map
)

// Expr is a field's type with pointers dropped: JSON does not tell them
// from what they point to.
type Expr struct {
	Kind ExprKind
	Name string
	Elem *Expr
}

// Parse reads the non-test, non-generated Go files of the package in dir
// and collects the doc comments of its kinds and of every type reachable
// from them.
func Parse(dir string) (*Package, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", dir, err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		// Generated files (our own output among them) are skipped before
		// they are parsed in full: a broken one must not stop its
		// regeneration.
		head, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", dir, err)
		}
		if ast.IsGenerated(head) {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", dir, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("parse %s: no Go files", dir)
	}
	kinds := kindConstants(files)
	// go/doc associates constants and methods with their types; it also
	// drops unexported fields from the syntax tree, as JSON does.
	dp, err := doc.NewFromFiles(fset, files, "api")
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", dir, err)
	}
	r := &reader{dp: dp, decls: map[string]*doc.Type{}, p: &Package{Name: dp.Name, Types: map[string]*Type{}}}
	for _, t := range dp.Types {
		r.decls[t.Name] = t
	}
	for _, k := range kinds {
		if r.decls[k] == nil {
			continue // a Kind constant without a type of its own
		}
		if err := r.add(k); err != nil {
			return nil, fmt.Errorf("parse %s: %w", dir, err)
		}
		r.p.Kinds = append(r.p.Kinds, k)
	}
	// Stored resources first, then the payloads; each by name.
	slices.SortStableFunc(r.p.Kinds, func(a, b string) int {
		oa, ob := r.p.Types[a].Object, r.p.Types[b].Object
		if oa != ob {
			if oa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	if len(r.p.Kinds) == 0 {
		return nil, fmt.Errorf("parse %s: no kinds: want constants such as KindDevice = \"Device\" naming types of the package", dir)
	}
	return r.p, nil
}

// kindConstants returns the values of the string constants named Kind….
func kindConstants(files []*ast.File) []string {
	var kinds []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Kind") || i >= len(vs.Values) {
						continue
					}
					if v, ok := stringLit(vs.Values[i]); ok && !slices.Contains(kinds, v) {
						kinds = append(kinds, v)
					}
				}
			}
		}
	}
	return kinds
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

type reader struct {
	dp    *doc.Package
	decls map[string]*doc.Type
	p     *Package
}

// add records the named type and, depth first, every type it reaches.
func (r *reader) add(name string) error {
	if r.p.Types[name] != nil {
		return nil
	}
	dt := r.decls[name]
	if dt == nil {
		return fmt.Errorf("type %s is not declared in the package", name)
	}
	spec := typeSpec(dt.Decl, name)
	if spec == nil {
		return fmt.Errorf("type %s: declaration not found", name)
	}
	t := &Type{Name: name, Doc: r.text(dt.Doc)}
	if t.Doc == "" && spec.Doc != nil {
		t.Doc = r.text(spec.Doc.Text()) // one spec of a grouped type (…) declaration
	}
	for _, m := range dt.Methods {
		if m.Name == "GetMetadata" {
			t.Object = true
		}
	}
	r.p.Types[name] = t // before the fields: a type may contain itself
	st, ok := spec.Type.(*ast.StructType)
	if !ok {
		e, err := r.expr(spec.Type)
		if err != nil {
			return fmt.Errorf("type %s: %w", name, err)
		}
		t.Underlying = e
		t.Enum = enumValues(dt, name)
		return nil
	}
	t.Struct = true
	for _, f := range st.Fields.List {
		fields, err := r.fields(name, f)
		if err != nil {
			return err
		}
		t.Fields = append(t.Fields, fields...)
	}
	return nil
}

// fields turns one field declaration (which may name several fields)
// into JSON fields.
func (r *reader) fields(typeName string, f *ast.Field) ([]*Field, error) {
	var tag reflect.StructTag
	if f.Tag != nil {
		s, err := strconv.Unquote(f.Tag.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: bad struct tag %s", typeName, f.Tag.Value)
		}
		tag = reflect.StructTag(s)
	}
	jsonName, _, _ := strings.Cut(tag.Get("json"), ",")
	if jsonName == "-" {
		return nil, nil
	}
	raw := ""
	if f.Doc != nil {
		raw = f.Doc.Text()
	}
	if strings.TrimSpace(raw) == "" && f.Comment != nil {
		raw = f.Comment.Text()
	}
	text := r.text(raw)
	typ, err := r.expr(f.Type)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", typeName, err)
	}
	names := f.Names
	if len(names) == 0 { // embedded
		goName := embeddedName(f.Type)
		if goName == "" {
			return nil, fmt.Errorf("%s: unsupported embedded field %s", typeName, exprString(f.Type))
		}
		if !ast.IsExported(goName) {
			return nil, nil
		}
		if jsonName == "" && typ.Kind == Named && r.p.Types[typ.Name].Struct {
			return []*Field{{GoName: goName, Doc: text, Type: typ}}, nil
		}
		if jsonName == "" && typ.Kind == Basic && typ.Name == "object" {
			return nil, fmt.Errorf("%s: cannot document the inlined fields of %s", typeName, exprString(f.Type))
		}
		names = []*ast.Ident{ast.NewIdent(goName)}
	}
	var out []*Field
	for _, n := range names {
		if !n.IsExported() {
			continue
		}
		fld := &Field{Name: cmp.Or(jsonName, n.Name), GoName: n.Name, Doc: text, Type: typ}
		fld.Required = requiredRE.MatchString(text)
		if m := defaultRE.FindStringSubmatch(text); m != nil {
			fld.Default = unquote(m[1])
		}
		out = append(out, fld)
	}
	return out, nil
}

// The conventions of doc comments that mark a field required or name its
// default: a sentence that starts with the word.
var (
	requiredRE = regexp.MustCompile(`(?m)(?:^|[.!?]\s+)Required\b`)
	defaultRE  = regexp.MustCompile(`(?m)(?:^|[.!?]\s+)Defaults?(?: to| is|:)?\s+(.+?)(?:\.(?:\s|$)|$)`)
)

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '`') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// expr maps a Go type expression to its JSON shape, adding the named
// types it uses.
func (r *reader) expr(e ast.Expr) (*Expr, error) {
	switch e := e.(type) {
	case *ast.StarExpr:
		return r.expr(e.X)
	case *ast.ParenExpr:
		return r.expr(e.X)
	case *ast.ArrayType:
		if id, ok := e.Elt.(*ast.Ident); ok && id.Name == "byte" {
			return &Expr{Kind: Basic, Name: "string"}, nil // base64
		}
		el, err := r.expr(e.Elt)
		if err != nil {
			return nil, err
		}
		return &Expr{Kind: Slice, Elem: el}, nil
	case *ast.MapType:
		el, err := r.expr(e.Value)
		if err != nil {
			return nil, err
		}
		return &Expr{Kind: Map, Elem: el}, nil
	case *ast.Ident:
		if b := basicName(e.Name); b != "" {
			return &Expr{Kind: Basic, Name: b}, nil
		}
		if r.decls[e.Name] == nil {
			return nil, fmt.Errorf("unsupported type %s", e.Name)
		}
		if err := r.add(e.Name); err != nil {
			return nil, err
		}
		return &Expr{Kind: Named, Name: e.Name}, nil
	case *ast.SelectorExpr:
		if exprString(e) == "time.Time" {
			return &Expr{Kind: Basic, Name: "string"}, nil // RFC 3339
		}
		return &Expr{Kind: Basic, Name: "object"}, nil
	case *ast.InterfaceType, *ast.StructType:
		return &Expr{Kind: Basic, Name: "object"}, nil
	}
	return nil, fmt.Errorf("unsupported type %s", exprString(e))
}

// basicName is the JSON type of a predeclared Go type, or "".
func basicName(goName string) string {
	switch goName {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr", "byte", "rune":
		return "integer"
	case "float32", "float64":
		return "number"
	case "any":
		return "object"
	}
	return ""
}

func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	case *ast.MapType:
		return "map[" + exprString(e.Key) + "]" + exprString(e.Value)
	}
	return fmt.Sprintf("%T", e)
}

// typeSpec finds the spec of the named type in its declaration.
func typeSpec(decl *ast.GenDecl, name string) *ast.TypeSpec {
	for _, s := range decl.Specs {
		if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
			return ts
		}
	}
	return nil
}

// enumValues returns the string constants declared with type name.
func enumValues(dt *doc.Type, name string) []string {
	var vals []string
	for _, v := range dt.Consts {
		for _, s := range v.Decl.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != name {
				continue
			}
			for i := range vs.Names {
				if !vs.Names[i].IsExported() || i >= len(vs.Values) {
					continue
				}
				if s, ok := stringLit(vs.Values[i]); ok {
					vals = append(vals, s)
				}
			}
		}
	}
	return vals
}

// text renders a doc comment as plain text: one line per paragraph (or
// list item), a blank line between paragraphs, code blocks indented by a
// tab.
func (r *reader) text(raw string) string {
	if strings.TrimSpace(raw) == "" {
		return ""
	}
	pr := r.dp.Printer()
	pr.TextWidth = -1 // no wrapping: the readers wrap to their width
	return strings.TrimRight(string(pr.Text(r.dp.Parser().Parse(raw))), "\n")
}
