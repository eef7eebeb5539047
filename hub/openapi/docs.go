package openapi

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// sourceDocs reads the doc comments of Go types and their fields from
// the module's source, for the types schema's fielddoc table does not
// cover (it holds the kinds and what they reach: not Status, HubInfo
// or the dashboard's answers).
type sourceDocs struct {
	root, module string
	// pkgs holds, by import path, each type's doc and its fields' docs
	// by JSON name; a package whose source is not found is nil.
	pkgs map[string]map[string]typeDocs
}

type typeDocs struct {
	doc    string
	fields map[string]string
}

// newSourceDocs reads docs under root, the directory of the module's
// go.mod; "" reads none.
func newSourceDocs(root string) (*sourceDocs, error) {
	d := &sourceDocs{root: root, pkgs: map[string]map[string]typeDocs{}}
	if root == "" {
		return d, nil
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("read the module's go.mod: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			d.module = strings.TrimSpace(m)
		}
	}
	if d.module == "" {
		return nil, fmt.Errorf("%s/go.mod names no module", root)
	}
	return d, nil
}

// typeDoc returns the doc comment of the named type t, or "".
func (d *sourceDocs) typeDoc(t reflect.Type) string {
	return d.pkg(t.PkgPath())[baseName(t)].doc
}

// fieldDoc returns the doc comment of the field of t with JSON name
// jsonName, or "".
func (d *sourceDocs) fieldDoc(t reflect.Type, jsonName string) string {
	return d.pkg(t.PkgPath())[baseName(t)].fields[jsonName]
}

func baseName(t reflect.Type) string {
	name, _, _ := strings.Cut(t.Name(), "[")
	return name
}

func (d *sourceDocs) pkg(path string) map[string]typeDocs {
	if docs, ok := d.pkgs[path]; ok {
		return docs
	}
	var docs map[string]typeDocs
	if rel, ok := strings.CutPrefix(path, d.module+"/"); ok && d.module != "" {
		docs = parseDocs(filepath.Join(d.root, filepath.FromSlash(rel)))
	}
	d.pkgs[path] = docs
	return docs
}

// parseDocs reads the type and field docs of the package in dir; nil
// when it cannot be read (descriptions are a help, not a contract).
func parseDocs(dir string) map[string]typeDocs {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	fset := token.NewFileSet()
	out := map[string]typeDocs{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil
		}
		for _, decl := range f.Decls {
			if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
				typeDeclDocs(gd, out)
			}
		}
	}
	return out
}

// typeDeclDocs adds the docs of the types gd declares.
func typeDeclDocs(gd *ast.GenDecl, out map[string]typeDocs) {
	for _, spec := range gd.Specs {
		ts := spec.(*ast.TypeSpec)
		doc := ts.Doc
		if doc == nil && len(gd.Specs) == 1 {
			doc = gd.Doc
		}
		td := typeDocs{doc: docText(doc), fields: map[string]string{}}
		if st, ok := ts.Type.(*ast.StructType); ok {
			structFieldDocs(st, td.fields)
		}
		out[ts.Name.Name] = td
	}
}

// structFieldDocs adds the doc of each named field of st, by JSON name.
func structFieldDocs(st *ast.StructType, out map[string]string) {
	for _, f := range st.Fields.List {
		doc := docText(f.Doc)
		if doc == "" {
			doc = docText(f.Comment) // a comment at the end of the line
		}
		if doc == "" || len(f.Names) == 0 {
			continue
		}
		for _, n := range f.Names {
			name := n.Name
			if f.Tag != nil {
				if tag, err := strconv.Unquote(f.Tag.Value); err == nil {
					if j, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ","); j != "" {
						name = j
					}
				}
			}
			out[name] = doc
		}
	}
}

// docText is a comment as plain text: one line per paragraph, a blank
// line between paragraphs.
func docText(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	paras := strings.Split(strings.TrimSpace(cg.Text()), "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}
