package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub/backup"
)

func newRestoreCmd(s *settings) *cobra.Command {
	var (
		from string
		keys backup.KeyFlags
	)
	cmd := &cobra.Command{
		Use:   "restore --from FILE --data-dir DIR",
		Short: "Create a hub's data directory from a backup, on a new machine",
		Long: `restore creates --data-dir from a backup written by "fleet-hub backup" or by
scheduled backups (--backup-dir). It writes only into a directory that does
not exist or is empty: a directory that holds anything (another hub's data)
is refused and left as it is. It checks the whole file first (the
passphrase, age's authentication of every byte, the manifest's digests):
a damaged, cut or foreign file is refused and nothing is left behind.

The restored hub has the same store ID, CA, signing key, Secrets key and
token hashes: every device accepts it without a new token or pin, even at
another address (give devices the new broker URL, or move the DNS name).
Start it with "fleet-hub --data-dir DIR" and the addresses you want.

What is lost: every change made after the backup was taken (the recovery
point is your backup interval). Devices may already run generations the
backup does not know; the restored hub sends a device nothing until that
device has reported the generation it runs, then continues above it, so no
device refuses its states as replays or stays on a state the hub does not
know. Apply again what was applied after the backup.`,
		Example: `  # On the new machine
  fleet-hub restore --from /backups/hub.age --data-dir /var/lib/fleet-hub --passphrase-file /root/backup.pass
  fleet-hub --data-dir /var/lib/fleet-hub --advertise-mqtt-url ssl://hub2.example.com:8883

  # A backup made with --recipient
  fleet-hub restore --from hub.age --data-dir ./fleet-data --identity-file key.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return errors.New("--from FILE: required")
			}
			key, err := keys.Key("restore")
			if err != nil {
				return err
			}
			f, err := os.Open(from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			defer f.Close()
			start := time.Now()
			m, err := backup.Restore(cmd.Context(), f, key, backup.RestoreOptions{DataDir: s.DataDir, From: filepath.Base(from)})
			if err != nil {
				return fmt.Errorf("restore %s: %w", from, err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "restored hub %s (CA %s, signing key %s) at revision %d into %s in %s: %s\n",
				m.Hub.StoreID, orNone(m.Hub.CAHash), orNone(m.Hub.SigningKeyID), m.Revision, s.DataDir,
				time.Since(start).Round(time.Millisecond), objectCounts(m.Objects))
			fmt.Fprintf(out, "the backup was taken %s, %s ago: every change made after it is lost (the recovery point is the backup interval); apply those changes again\n",
				m.Created.Format(time.RFC3339), m.Age(time.Now()))
			fmt.Fprintf(out, "devices get nothing from the restored hub until each reports the generation it runs; then their states continue above it\n")
			fmt.Fprintf(out, "start it with: fleet-hub --data-dir %s\n", s.DataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the backup file to restore")
	keyFlags(cmd, &keys, false)
	return cmd
}
