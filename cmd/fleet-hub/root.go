package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub"
)

// settings are the values of the flags shared by every command. Each flag
// may also come from FLEET_HUB_<NAME> or the --config file (see config.go).
type settings struct {
	DataDir  string
	HTTPAddr string
	LogLevel string
	Config   string
}

// serveFunc runs the hub with the resolved settings; tests replace it.
type serveFunc func(cmd *cobra.Command, s settings) error

func newRootCmd(getenv func(string) string, serve serveFunc) *cobra.Command {
	var s settings
	root := &cobra.Command{
		Use:   "fleet-hub",
		Short: "Run the Fleet hub: store, HTTP API and device control plane",
		Long: `fleet-hub runs the Fleet control plane. It keeps Deployments and Devices in
an embedded store (Badger, in --data-dir), serves the HTTP API the fleet CLI
talks to, and publishes every device's desired state.

On first start it creates an admin token and writes it, with the API's
address, to <data-dir>/admin.conf (mode 0600); the fleet CLI reads that file
by default when run from the same directory. The token is stored only as a
hash: admin.conf is the only copy. If it is lost, stop the hub and run
"fleet-hub admin-token --rotate".

Every flag can also be set in the environment as FLEET_HUB_<FLAG> (for
example FLEET_HUB_DATA_DIR) or in a YAML file given with --config, whose keys
are the flag names (data-dir: /var/lib/fleet-hub). A flag wins over the
environment, which wins over the config file.`,
		Example: `  # Start a hub with data in ./fleet-data and the API on 127.0.0.1:8080
  fleet-hub

  # Listen on every interface, keep data in /var/lib/fleet-hub
  fleet-hub --http-addr :8080 --data-dir /var/lib/fleet-hub

  # The same through the environment
  FLEET_HUB_HTTP_ADDR=:8080 FLEET_HUB_DATA_DIR=/var/lib/fleet-hub fleet-hub

  # Settings from a file
  fleet-hub --config /etc/fleet/hub.yaml`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applySources(cmd, getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd, s)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (see fleet-hub --help)", err)
	})
	f := root.PersistentFlags()
	f.StringVar(&s.DataDir, "data-dir", hub.DefaultDataDir, "directory of the store and admin.conf")
	f.StringVar(&s.HTTPAddr, "http-addr", hub.DefaultHTTPAddr, "listen address of the HTTP API (port 0: any free port)")
	f.StringVar(&s.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&s.Config, "config", "", "YAML file of settings, keyed by flag name")

	root.AddCommand(newVersionCmd(), newAdminTokenCmd(&s))
	return root
}

// serveHub runs the hub until the command's context ends.
func serveHub(cmd *cobra.Command, s settings) error {
	log, err := newLogger(s.LogLevel)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	return hub.Run(cmd.Context(), hub.Options{
		DataDir:  s.DataDir,
		HTTPAddr: s.HTTPAddr,
		Logger:   log,
		Ready: func(i hub.Info) {
			fmt.Fprintf(out, "fleet-hub %s: API on %s; admin config (hub URL and token for the fleet CLI) in %s\n",
				version(), i.URL, i.AdminConfig)
		},
	})
}

// newLogger logs text to stderr at the level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
