package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/hub"
)

func newMigrateCmd() *cobra.Command {
	var from, to string
	var ef hub.EtcdFlags
	cmd := &cobra.Command{
		Use:   "migrate --from STORE --to STORE",
		Short: "Copy a stopped hub's store between Badger and etcd, losslessly",
		Long: `migrate copies every key of a store into another, empty one: objects with
their resourceVersions, deployment revisions, the revision counter, device
tokens, credentials and bootstrap tokens (as hashes), rollout state, the
audit trail, the store's ID (devices see the same store) and the ID of the
key that seals its Secrets (they stay sealed). It then reads the copy back
and checks it against the source (a SHA-256 of every key and value).

A store is badger:DIR (DIR is a hub's data dir, whose store/ is used, or a
Badger directory) or etcd://HOST:PORT[,HOST:PORT…], with --etcd-prefix and,
for TLS, --etcd-cacert, --etcd-cert and --etcd-key. Stop every hub on both
stores first. The destination must be empty: a new directory, or an unused
prefix. The hub that then runs on the new store needs the same key files as
before (secrets.key, ca.crt, ca.key, signing.key in its --data-dir).`,
		Example: `  # Move a hub from its embedded store onto an etcd cluster
  systemctl stop fleet-hub
  fleet-hub migrate --from badger:/var/lib/fleet-hub \
    --to etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --etcd-prefix /fleet/prod/ \
    --etcd-cacert /etc/etcd/ca.crt --etcd-cert /etc/fleet/hub-etcd.crt --etcd-key /etc/fleet/hub-etcd.key
  fleet-hub --data-dir /var/lib/fleet-hub --store etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --etcd-prefix /fleet/prod/ …

  # And back, into a new data dir (copy the key files into it)
  fleet-hub migrate --from etcd://10.0.0.1:2379 --etcd-prefix /fleet/prod/ --to badger:/var/lib/fleet-hub-2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("give --from and --to (see fleet-hub migrate --help)")
			}
			errOut := cmd.ErrOrStderr()
			last := time.Now()
			progress := func(keys int) {
				if time.Since(last) >= time.Second {
					fmt.Fprintf(errOut, "copied %d keys…\n", keys)
					last = time.Now()
				}
			}
			res, src, dst, err := hub.MigrateStore(cmd.Context(), from, to, ef, progress)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "migrated store %s: %d keys (%d bytes), revision %d\n  from %s\n  to   %s\ncopy checked: sha256 %s on both sides\n",
				res.StoreID, res.Keys, res.Bytes, res.Revision, src, dst, res.Digest)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the store to copy: badger:DIR or etcd://HOST:PORT[,…]")
	f.StringVar(&to, "to", "", "the empty store to copy into: badger:DIR or etcd://HOST:PORT[,…]")
	f.StringVar(&ef.Prefix, "etcd-prefix", "", "prefix of the fleet's keys in etcd (default /fleet/)")
	f.StringVar(&ef.CACertFile, "etcd-cacert", "", "PEM CA of the etcd members' certificates (turns TLS on)")
	f.StringVar(&ef.CertFile, "etcd-cert", "", "PEM client certificate presented to etcd (with --etcd-key)")
	f.StringVar(&ef.KeyFile, "etcd-key", "", "PEM private key of --etcd-cert")
	return cmd
}
