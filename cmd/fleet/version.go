package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/schema"
)

// buildVersion is set at link time: -ldflags "-X main.buildVersion=v1.2.3".
var buildVersion string

// version is buildVersion, else schema.Version as `make build` stamps it,
// else the module version Go recorded, else "devel".
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if schema.Version != "" && schema.Version != "dev" {
		return schema.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

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
