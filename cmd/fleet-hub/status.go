package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
)

func newStatusCmd(s *settings) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the fleet's hubs: which one leads, and their etcd leases",
		Long: `status asks the hub that runs on --data-dir (through its admin.conf) for the
hubs of the fleet (GET /v1/hubs) and prints them, the leader first: ID,
LEADER, API, BROKER, LEASE-TTL (--leader-lease), LEASE-LEFT (what remains
of the hub's etcd lease before it renews it, every third of the TTL) and AGE;
-o wide adds VERSION, LEASE and STARTED; -o json and -o yaml print the whole
answer. With the store on Badger there is one hub, always the leader.

The leader runs the controller, the staged and agent rollouts and publishes
desired states; only its embedded broker accepts devices. When it dies,
another hub leads within the lease. fleet get hubs prints the same from
any machine with an admin.conf.`,
		Example: `  fleet-hub status --data-dir /var/lib/fleet-hub
  fleet-hub status -o wide
  fleet-hub status -o json | jq -r .leader`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := printers.ParseFormat(output)
			if err != nil {
				return err
			}
			c, err := runningHub(s)
			if err != nil {
				return err
			}
			list, err := c.Hubs(cmd.Context())
			if err != nil {
				return fmt.Errorf("status: %w", hubDown(err))
			}
			p := &printers.Printer{Out: cmd.OutOrStdout(), Format: f}
			return p.PrintHubs(*list)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, wide, json, yaml or name")
	return cmd
}
