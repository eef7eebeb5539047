package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/schema"
)

// version is the version `make build` stamps into schema.Version.
func version() string { return schema.BuildVersion() }

func newVersionCmd(cli *cliContext) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of fleet",
		Long:    "Print the version of this fleet binary, the Go version that built it and its platform.",
		Example: "  fleet version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(cli.stdout(), "fleet %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
