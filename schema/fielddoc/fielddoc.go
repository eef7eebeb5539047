// Package fielddoc turns the doc comments of an API package's types into
// the field descriptions `fleet explain` prints and the Markdown field
// reference docs/reference.md. It reads the package's source with
// go/parser and go/doc and never imports it, so it runs even when the
// package does not build (a stale generated table, say).
//
// The kinds are the types named by the package's Kind… string constants
// (KindDevice = "Device"). From each kind, Parse walks the fields as
// encoding/json sees them: JSON names from the json tags, embedded structs
// without a name inlined, pointers dropped, into lists and maps.
//
// Descriptions are the doc comments of types and fields, as plain text.
// Two conventions carry meaning: a field whose description has a sentence
// starting with "Required" is required, and a sentence starting with
// "Default" (or "Defaults to") names its default:
//
//	// RestartPolicy says when the agent restarts an exited container.
//	// Defaults to Always.
//
// The string constants declared with a named type are its allowed values
// (RestartAlways RestartPolicy = "Always").
//
// The schema package runs it with go generate (schema/fielddoc/gen); a test
// there fails when the committed output is out of date. Package
// fielddoc/explain prints the generated docs for `fleet explain`.
package fielddoc

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// Options say what Generate reads and writes.
type Options struct {
	// Dir is the API package's directory; default ".".
	Dir string
	// GoFile is where the Go doc table goes ("zz_fielddocs.go"); "" writes
	// none.
	GoFile string
	// MarkdownFile is where the field reference goes; "" writes none.
	MarkdownFile string
	// Command names the generator in the "Code generated" headers;
	// default "schema/fielddoc/gen".
	Command string
	// SourceDir names the API package's directory in the reference, as a
	// path from the repository root; default "schema/".
	SourceDir string
}

// Generate parses the package in o.Dir and writes its doc table and field
// reference. It returns what it parsed.
func Generate(o Options) (*Package, error) {
	o.Dir = cmp.Or(o.Dir, ".")
	o.Command = cmp.Or(o.Command, "schema/fielddoc/gen")
	o.SourceDir = cmp.Or(o.SourceDir, "schema/")
	p, err := Parse(o.Dir)
	if err != nil {
		return nil, err
	}
	if o.GoFile != "" {
		src, err := GoSource(p, o.Command)
		if err != nil {
			return nil, err
		}
		if err := writeFile(o.GoFile, src); err != nil {
			return nil, err
		}
	}
	if o.MarkdownFile != "" {
		if err := writeFile(o.MarkdownFile, Markdown(p, o.Command, o.SourceDir)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Undocumented lists the fields of p without a description, as
// Type.jsonName.
func Undocumented(p *Package) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(p.Types)) {
		for _, f := range namedFields(p.Types[name]) {
			if f.Doc == "" {
				out = append(out, name+"."+f.Name)
			}
		}
	}
	return out
}

// writeFile replaces path's content, creating its directory.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
