package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub"
)

func newAdminTokenCmd(s *settings) *cobra.Command {
	var rotate bool
	cmd := &cobra.Command{
		Use:   "admin-token",
		Short: "Show where the admin token is, or issue a new one",
		Long: `admin-token prints the path of admin.conf, the file that holds the hub URL
and the admin token for the fleet CLI.

With --rotate it issues a new admin token, stores its hash and writes it to
admin.conf; the old token stops working. Use it when admin.conf was lost or
leaked. The hub must be stopped: the store allows one process at a time.`,
		Example: `  # admin.conf was lost
  systemctl stop fleet-hub
  fleet-hub admin-token --rotate --data-dir /var/lib/fleet-hub
  systemctl start fleet-hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if !rotate {
				path := client.AdminConfigPath(s.DataDir)
				if _, err := client.ReadAdminConfig(path); err != nil {
					return fmt.Errorf("%w: issue a new admin token with --rotate (hub stopped)", err)
				}
				fmt.Fprintln(out, path)
				return nil
			}
			log, err := newLogger(s.LogLevel)
			if err != nil {
				return err
			}
			path, err := hub.RotateAdminToken(cmd.Context(), hub.Options{DataDir: s.DataDir, HTTPAddr: s.HTTPAddr, Logger: log})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "new admin token written to %s; the old one no longer works\n", path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&rotate, "rotate", false, "issue a new admin token (the hub must be stopped)")
	return cmd
}
