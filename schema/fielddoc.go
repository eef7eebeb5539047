package schema

import (
	"slices"
	"sync"
)

// The doc comments of the API types, as a table (zz_fielddocs.go) that
// `fleet explain` reads without the source tree, and as the Markdown
// field reference docs/reference.md. Both are generated from the comments
// in this package: after editing one, run
//
//	go generate ./schema/
//
// A field's description says "Required." when it is, and "Defaults to X."
// when it has a default; the string constants declared with a named type
// are its allowed values. See package fielddoc for the conventions.
//
//go:generate go run ./fielddoc/gen -go zz_fielddocs.go -md ../docs/reference.md

// The generated table, built on first use: a package variable's
// initialisation would link it into every program that imports the
// package, the agent included.
var (
	typeDocsOnce  sync.Once
	typeDocsTable map[string]typeDoc
)

func typeDocs() map[string]typeDoc {
	typeDocsOnce.Do(func() { typeDocsTable = typeDocTable() })
	return typeDocsTable
}

// typeDoc is one type's row of the generated table.
type typeDoc struct {
	doc    string
	enum   []string
	fields map[string]fieldDoc
}

// fieldDoc is one field's row of the generated table.
type fieldDoc struct {
	doc      string
	required bool
	def      string
}

// FieldInfo documents one field of an API type.
type FieldInfo struct {
	// Doc is the field's doc comment as plain text: one line per
	// paragraph, a blank line between paragraphs.
	Doc string
	// Required is set when the description says the field is required.
	Required bool
	// Default is the default value the description names, or "".
	Default string
}

// TypeDoc returns the doc comment, as plain text, of the API type with the
// Go name typeName ("PodSpec"), or "" when it has none or is not an API
// type.
func TypeDoc(typeName string) string {
	return typeDocs()[typeName].doc
}

// FieldDoc documents the field with JSON name jsonName of the API type
// with Go name typeName. The fields of an embedded struct are documented
// under that struct (apiVersion under "TypeMeta"). ok is false when the
// type has no such field.
func FieldDoc(typeName, jsonName string) (f FieldInfo, ok bool) {
	d, ok := typeDocs()[typeName].fields[jsonName]
	return FieldInfo{Doc: d.doc, Required: d.required, Default: d.def}, ok
}

// EnumValues returns the allowed values of the named API type typeName,
// the string constants declared with it ("RestartPolicy": Always,
// OnFailure, Never), or nil.
func EnumValues(typeName string) []string {
	return slices.Clone(typeDocs()[typeName].enum)
}
