package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/schema"
)

// version is the version `make build` stamps into schema.Version.
func version() string { return schema.BuildVersion() }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of fleet-hub",
		Example: "  fleet-hub version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fleet-hub %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
