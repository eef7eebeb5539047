package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub"
)

func newRotateSigningKeyCmd(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-signing-key",
		Short: "Make a new desired-state signing key, endorsed by the current one",
		Long: `rotate-signing-key makes a new ed25519 key for signing desired states in the
data directory (signing.key) and keeps the current one (signing.key.previous)
to endorse it. When the hub starts it signs every desired state with the new
key, attaching the old key's endorsement, and republishes them all: each
agent checks the endorsement against the key it pinned and pins the new key.
An agent that missed two rotations (offline all along) refuses the new key:
give it --hub-signing-key.

Run it with the hub stopped. On a running hub, POST /v1/signing-key/rotate
(admin) does the same and republishes at once.`,
		Example: `  systemctl stop fleet-hub
  fleet-hub rotate-signing-key --data-dir /var/lib/fleet-hub
  systemctl start fleet-hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oldID, newID, err := hub.RotateSigningKey(s.DataDir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if oldID == "" {
				_, err = fmt.Fprintf(out, "no signing key yet: created key %s\n", newID)
				return err
			}
			_, err = fmt.Fprintf(out, "signing key rotated: %s -> %s (endorsed by %s); start the hub to republish every desired state\n", oldID, newID, oldID)
			return err
		},
	}
}
