// Command imagebuilder builds the demo's container image locally, without
// a registry (package testimage: a small static program in one layer,
// written with go-containerregistry), and imports it into the given
// containerd namespaces, unpacked for overlayfs. demo.sh runs it.
//
//	imagebuilder -socket /run/x/containerd.sock -ref fleet.demo/app:v1 -namespace fleet-a -namespace fleet-b
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/test/testimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuilder:", err)
		os.Exit(1)
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuilder", flag.ContinueOnError)
	socket := fs.String("socket", "", "containerd socket (required)")
	ref := fs.String("ref", "fleet.demo/app:v1", "image reference to build")
	var nss listFlag
	fs.Var(&nss, "namespace", "containerd namespace to import into (repeatable, required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" || len(nss) == 0 {
		return errors.New("-socket and at least one -namespace are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	tarPath, _, err := testimage.BuildTar(ctx, testimage.Options{Ref: *ref})
	if err != nil {
		return err
	}
	client, err := containerd.New(*socket, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connect to containerd at %s: %w", *socket, err)
	}
	defer client.Close()
	for _, ns := range nss {
		names, err := testimage.Import(namespaces.WithNamespace(ctx, ns), client, tarPath, "")
		if err != nil {
			return err
		}
		fmt.Printf("imported %s into namespace %s\n", strings.Join(names, ", "), ns)
	}
	return nil
}
