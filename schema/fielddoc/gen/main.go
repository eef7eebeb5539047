// Command gen writes the schema package's field documentation: the Go
// table `fleet explain` reads (schema/zz_fielddocs.go) and the Markdown
// field reference (docs/reference.md), both from the doc comments of the
// types in schema/. It runs from the go:generate directive in schema/fielddoc.go:
//
//	go generate ./schema/
//
// It warns, on standard error, about fields without a doc comment.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/fleetmq/fleet/schema/fielddoc"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fielddoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fielddoc", flag.ContinueOnError)
	var o fielddoc.Options
	fs.StringVar(&o.Dir, "dir", ".", "directory of the API package")
	fs.StringVar(&o.GoFile, "go", "zz_fielddocs.go", "output file of the Go doc table (empty: none)")
	fs.StringVar(&o.MarkdownFile, "md", "../docs/reference.md", "output file of the Markdown field reference (empty: none)")
	fs.StringVar(&o.SourceDir, "source", "schema/", "the API package's directory from the repository root, as the reference names it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p, err := fielddoc.Generate(o)
	if err != nil {
		return err
	}
	if missing := fielddoc.Undocumented(p); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "fielddoc: warning: %d fields have no doc comment: %s\n", len(missing), strings.Join(missing, ", "))
	}
	return nil
}
