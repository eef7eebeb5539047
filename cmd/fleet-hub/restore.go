package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/store"
)

func newRestoreCmd(s *settings) *cobra.Command {
	var (
		from      string
		keys      backup.KeyFlags
		storeFlag string
		ef        hub.EtcdFlags
	)
	cmd := &cobra.Command{
		Use:   "restore --from FILE --data-dir DIR [--store etcd://HOST:PORT[,…]]",
		Short: "Create a hub's data directory from a backup, on a new machine",
		Long: `restore creates --data-dir from a backup written by "fleet-hub backup" or by
scheduled backups (--backup-dir). It writes only into a directory that does
not exist or is empty: a directory that holds anything (another hub's data)
is refused and left as it is. It checks the whole file first (the
passphrase, age's authentication of every byte, the manifest's digests):
a damaged, cut or foreign file is refused and nothing is left behind.

With --store etcd://HOST:PORT[,…] (and --etcd-prefix, and for TLS
--etcd-cacert, --etcd-cert, --etcd-key, as fleet-hub takes them) the store
goes into that etcd cluster instead of <data-dir>/store, and --data-dir
gets the key files alone. The prefix must be empty (it is checked before
anything is read); the backup is checked whole, then copied into etcd and
the copy checked against it (as fleet-hub migrate does). If that fails,
what was written is removed from etcd and from --data-dir. A backup of a
hub on Badger restores onto etcd and the other way round.

The restored hub has the same store ID, CA, signing key, Secrets key and
token hashes: every device accepts it without a new token or pin, even at
another address (give devices the new broker URL, or move the DNS name).
Start it with "fleet-hub --data-dir DIR" (and the same --store flags) and
the addresses you want. More hubs on the same etcd prefix need the same
key files: copy them from --data-dir.

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
  fleet-hub restore --from hub.age --data-dir ./fleet-data --identity-file key.txt

  # Into an etcd cluster (several hubs), the key files into the data dir
  fleet-hub restore --from hub.age --data-dir /var/lib/fleet-hub --identity-file key.txt \
    --store etcd://m1:2379,m2:2379,m3:2379 --etcd-prefix /fleet/prod/ \
    --etcd-cacert /etc/etcd/ca.crt --etcd-cert /etc/fleet/hub-etcd.crt --etcd-key /etc/fleet/hub-etcd.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRestore(cmd, s, from, storeFlag, keys, ef)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the backup file to restore")
	f.StringVar(&storeFlag, "store", "badger", "where the restored store goes: badger (<data-dir>/store) or etcd://HOST:PORT[,HOST:PORT…] (an empty prefix of an etcd cluster; the key files still go into --data-dir)")
	f.StringVar(&ef.Prefix, "etcd-prefix", "", "with --store etcd://…: prefix of the fleet's keys (default "+store.DefaultEtcdPrefix+"); must be empty")
	f.StringVar(&ef.CACertFile, "etcd-cacert", "", "PEM CA of the etcd members' certificates (turns TLS on)")
	f.StringVar(&ef.CertFile, "etcd-cert", "", "PEM client certificate presented to etcd (with --etcd-key)")
	f.StringVar(&ef.KeyFile, "etcd-key", "", "PEM private key of --etcd-cert")
	keyFlags(cmd, &keys, false)
	return cmd
}

// runRestore is restore's work: check the flags (and an etcd target)
// before reading the backup, restore it, move the store into etcd if
// asked, and say what was restored and what was lost.
func runRestore(cmd *cobra.Command, s *settings, from, storeFlag string, keys backup.KeyFlags, ef hub.EtcdFlags) error {
	if from == "" {
		return errors.New("--from FILE: required")
	}
	toEtcd := strings.HasPrefix(storeFlag, "etcd://")
	if storeFlag != "" && storeFlag != "badger" && !toEtcd {
		return fmt.Errorf("--store %q: want badger (the default: <data-dir>/store) or etcd://HOST:PORT[,HOST:PORT…]", storeFlag)
	}
	key, err := keys.Key("restore")
	if err != nil {
		return err
	}
	var etcdDesc string
	if toEtcd {
		// Before the backup is read: a used prefix or an
		// unreachable cluster costs nothing.
		if etcdDesc, err = hub.CheckStoreEmpty(cmd.Context(), "--store", storeFlag, ef); err != nil {
			return fmt.Errorf("restore into etcd: %w; nothing was written", err)
		}
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
	where := s.DataDir
	if toEtcd {
		res, err := moveStoreToEtcd(cmd.Context(), s.DataDir, storeFlag, ef, cmd.ErrOrStderr())
		if err != nil {
			return fmt.Errorf("restore %s into %s: %w", from, etcdDesc, err)
		}
		where = fmt.Sprintf("%s (%d keys, copy checked: sha256 %s) and the key files into %s", etcdDesc, res.Keys, res.Digest, s.DataDir)
	}
	fmt.Fprintf(out, "restored hub %s (CA %s, signing key %s) at revision %d into %s in %s: %s\n",
		m.Hub.StoreID, orNone(m.Hub.CAHash), orNone(m.Hub.SigningKeyID), m.Revision, where,
		time.Since(start).Round(time.Millisecond), objectCounts(m.Objects))
	fmt.Fprintf(out, "the backup was taken %s, %s ago: every change made after it is lost (the recovery point is the backup interval); apply those changes again\n",
		m.Created.Format(time.RFC3339), m.Age(time.Now()))
	fmt.Fprintf(out, "devices get nothing from the restored hub until each reports the generation it runs; then their states continue above it\n")
	fmt.Fprintf(out, "start it with: fleet-hub --data-dir %s%s\n", s.DataDir, storeArgs(storeFlag, ef))
	return nil
}

// moveStoreToEtcd copies the store just restored into dataDir/store into
// the (empty) etcd store at to, checks the copy, and removes the local
// one. On failure it empties dataDir again (restore made it: it was
// empty or did not exist), and the migration has removed what it wrote
// into etcd.
func moveStoreToEtcd(ctx context.Context, dataDir, to string, ef hub.EtcdFlags, progressOut io.Writer) (store.MigrateResult, error) {
	local := filepath.Join(dataDir, "store")
	last := time.Now()
	progress := func(keys int) {
		if time.Since(last) >= time.Second {
			fmt.Fprintf(progressOut, "copied %d keys into etcd…\n", keys)
			last = time.Now()
		}
	}
	res, _, _, err := hub.MigrateStore(ctx, "badger:"+local, to, ef, progress)
	if err != nil {
		return res, errors.Join(err, emptyDir(dataDir))
	}
	if err := os.RemoveAll(local); err != nil {
		return res, fmt.Errorf("the store is in etcd, but the local copy %s could not be removed (remove it by hand): %w", local, err)
	}
	return res, nil
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clean up %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up %s (remove what is left by hand): %w", dir, err)
	}
	return nil
}

// storeArgs are the fleet-hub flags of the store restored into.
func storeArgs(storeFlag string, ef hub.EtcdFlags) string {
	if !strings.HasPrefix(storeFlag, "etcd://") {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " --store %s", storeFlag)
	for _, f := range [][2]string{{"--etcd-prefix", ef.Prefix}, {"--etcd-cacert", ef.CACertFile}, {"--etcd-cert", ef.CertFile}, {"--etcd-key", ef.KeyFile}} {
		if f[1] != "" {
			fmt.Fprintf(&b, " %s %s", f[0], f[1])
		}
	}
	return b.String()
}
