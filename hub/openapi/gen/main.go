// Command gen writes the hub's OpenAPI description: the hand-written
// paths (-src) with the component schemas generated from the Go types
// (package openapi), to -out. Run it with `go generate ./hub/api/`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fleetmq/fleet/hub/openapi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "openapi gen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	src := fs.String("src", "openapi-paths.yaml", "the hand-written source: info, security, paths")
	out := fs.String("out", "openapi.yaml", "the description to write")
	root := fs.String("root", "../..", "the module's directory, whose Go source documents the schemas")
	if err := fs.Parse(args); err != nil {
		return err
	}
	in, err := os.ReadFile(*src)
	if err != nil {
		return fmt.Errorf("read source: %w", err)
	}
	doc, err := openapi.Generate(in, *root)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, doc, 0o644); err != nil {
		return fmt.Errorf("write description: %w", err)
	}
	return nil
}
