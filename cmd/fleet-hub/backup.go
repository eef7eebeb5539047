package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/backup"
	"github.com/fleetmq/fleet/hub/store"
)

// keyFlags binds the flags that say how a backup is encrypted (withRecipients)
// or decrypted.
func keyFlags(cmd *cobra.Command, k *backup.KeyFlags, withRecipients bool) {
	f := cmd.Flags()
	f.StringVar(&k.PassphraseFile, "passphrase-file", "", "file holding the backup's passphrase (default: $"+backup.EnvPassphrase+")")
	if withRecipients {
		f.StringArrayVar(&k.Recipients, "recipient", nil, "encrypt to this age public key (age1…) instead of a passphrase (repeatable)")
		f.StringVar(&k.RecipientFile, "recipient-file", "", "file of age public keys, one a line, to encrypt to")
		return
	}
	f.StringVar(&k.IdentityFile, "identity-file", "", "file of age secret keys (AGE-SECRET-KEY-1…) for a backup made with --recipient")
}

func newBackupCmd(s *settings) *cobra.Command {
	var (
		to       string
		keys     backup.KeyFlags
		progress bool
	)
	cmd := &cobra.Command{
		Use:   "backup --to FILE",
		Short: "Write an encrypted backup of the hub: store, CA, keys",
		Long: `backup writes one file that holds everything a new machine needs to take over
the hub without touching a device: the store at one revision (devices,
deployments and their revisions, ConfigMaps, Secrets, desired states, token
and credential hashes, the audit trail) and the data directory's files (the
CA and its key, the signing keys, the Secrets key, admin.conf, the MQTT
password). It is encrypted with age, to a passphrase (--passphrase-file, or
$` + backup.EnvPassphrase + `) or to age public keys (--recipient): never in clear.
Keep the passphrase apart from the backups.

The backup is online and consistent: while the hub runs, it is taken
through its API (POST /v1/backup, with the admin token of
<data-dir>/admin.conf) from one read transaction, so it holds exactly the
writes up to one revision. When the hub is stopped, it reads --data-dir
itself.

Progress (bytes written) goes to stderr on a terminal or with --progress.
For backups on a schedule, start the hub with --backup-dir, --backup-every
and --backup-keep. To see what a backup holds: fleet-hub backup inspect.`,
		Example: `  # A backup of the running hub, with the passphrase in a file
  fleet-hub backup --data-dir /var/lib/fleet-hub --to /backups/hub.age --passphrase-file /root/backup.pass

  # Encrypted to an age key instead (age-keygen -o key.txt prints the public key)
  fleet-hub backup --to hub.age --recipient age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p

  # Through the environment, into stdout
  FLEET_BACKUP_PASSPHRASE=… fleet-hub backup --to - | ssh backup-host 'cat > hub.age'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return errors.New("--to FILE: required (- for stdout)")
			}
			key, err := keys.Key("backup")
			if err != nil {
				return err
			}
			if err := backup.CheckKey(key); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			show := progress || isTerminal(cmd.ErrOrStderr())
			return runBackup(cmd.Context(), s.DataDir, to, key, show, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "file to write the backup to (- for stdout); it must not exist")
	cmd.Flags().BoolVar(&progress, "progress", false, "print the bytes written on stderr even when it is not a terminal")
	keyFlags(cmd, &keys, true)
	cmd.AddCommand(newBackupInspectCmd())
	return cmd
}

// runBackup writes the backup of the hub in dataDir to the file to.
func runBackup(ctx context.Context, dataDir, to string, key backup.Key, showProgress bool, out, errOut io.Writer) error {
	start := time.Now()
	p := newProgress(errOut, showProgress)
	defer p.stop()
	var res backupSummary
	err := writeOut(to, out, func(w io.Writer) error {
		var err error
		res, err = takeBackup(ctx, dataDir, key, w, p.set)
		return err
	})
	p.stop()
	if err != nil {
		return err
	}
	where := to
	if to == "-" {
		where, out = "stdout", errOut
	}
	fmt.Fprintf(out, "backup written to %s from %s: revision %d, %s, %s in %s\n",
		where, res.source, res.revision, objectCounts(res.objects), humanBytes(res.bytes), time.Since(start).Round(time.Millisecond))
	return nil
}

type backupSummary struct {
	source   string
	revision uint64
	objects  map[string]int
	bytes    int64
}

// takeBackup backs up a stopped hub's data dir itself, or asks the running
// hub (whose store is locked) through its API.
func takeBackup(ctx context.Context, dataDir string, key backup.Key, w io.Writer, progress func(int64)) (backupSummary, error) {
	storeDir := filepath.Join(dataDir, "store")
	if _, err := os.Stat(storeDir); err != nil {
		return backupSummary{}, fmt.Errorf("--data-dir %s holds no hub store: %w", dataDir, err)
	}
	st, err := store.Open(store.Options{Dir: storeDir, GCInterval: -1})
	if err == nil {
		defer st.Close()
		cw := &countingWriter{w: w, fn: progress}
		m, err := backup.Write(ctx, cw, backup.Source{Store: st, DataDir: dataDir}, key)
		if err != nil {
			return backupSummary{}, err
		}
		return backupSummary{source: "the stopped hub's " + dataDir, revision: m.Revision, objects: m.Objects, bytes: cw.n}, nil
	}
	if !errors.Is(err, store.ErrLocked) {
		return backupSummary{}, err
	}
	c, hubURL, err := adminClient(dataDir)
	if err != nil {
		return backupSummary{}, fmt.Errorf("the hub is running (its store is locked) and its API cannot be used: %w", err)
	}
	res, err := c.Backup(ctx, client.BackupRequest{Passphrase: key.Passphrase, Recipients: key.Recipients}, &countingWriter{w: w, fn: progress})
	if err != nil {
		return backupSummary{}, err
	}
	return backupSummary{source: "the running hub at " + hubURL, revision: res.Revision, objects: res.Objects, bytes: res.Bytes}, nil
}

// adminClient is a client of the hub with the admin config in dataDir.
func adminClient(dataDir string) (*client.Client, string, error) {
	conf, err := client.ReadAdminConfig(client.AdminConfigPath(dataDir))
	if err != nil {
		return nil, "", err
	}
	var opts []client.Option
	if conf.CA != "" && strings.HasPrefix(conf.Hub, "https://") {
		hc, err := client.PinnedHTTPClient([]byte(conf.CA), client.AdminConfigPath(dataDir))
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, client.WithHTTPClient(hc))
	}
	c, err := client.New(conf.Hub, conf.Token, append(opts, client.WithUserAgent("fleet-hub/"+version()))...)
	return c, conf.Hub, err
}

// writeOut runs write into the file path, atomically: a temporary file
// beside it, synced and renamed when write succeeded, removed when not.
// "-" is out. An existing file is never replaced.
func writeOut(path string, out io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(out)
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("--to %s: the file exists; backups are never overwritten", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil { // fails if path appeared meanwhile
		return fmt.Errorf("--to: %w", err)
	}
	_ = os.Remove(f.Name())
	ok = true
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newBackupInspectCmd() *cobra.Command {
	var (
		keys   backup.KeyFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Show what a backup holds: revision, time, hub identity, object counts",
		Long: `inspect decrypts a backup, checks every part against the digests of its
manifest, and prints what it holds: the store revision, when it was taken,
the hub's identity (store ID, CA hash, signing-key ID), the number of
objects of each kind and the size of each part. It never prints a key.

Use it to check a backup before you need it, and to tell which hub a
backup is of (the store ID and CA hash are those of fleet get info).`,
		Example: `  fleet-hub backup inspect /backups/hub.age --passphrase-file /root/backup.pass
  fleet-hub backup inspect hub.age --identity-file key.txt -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"table", "json", "yaml"}, output) {
				return fmt.Errorf("-o %q: want table, json or yaml", output)
			}
			key, err := keys.Key("inspect")
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := backup.Inspect(f, key)
			if err != nil {
				return fmt.Errorf("inspect %s: %w", args[0], err)
			}
			return printManifest(cmd.OutOrStdout(), m, output, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	keyFlags(cmd, &keys, false)
	return cmd
}

// printManifest prints a backup's manifest.
func printManifest(w io.Writer, m backup.Manifest, output string, now time.Time) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Format:\t%s v%d\n", m.Format, m.Version)
	fmt.Fprintf(tw, "Taken:\t%s (%s ago)\n", m.Created.Format(time.RFC3339), m.Age(now))
	fmt.Fprintf(tw, "Revision:\t%d\n", m.Revision)
	fmt.Fprintf(tw, "Store ID:\t%s\n", m.Hub.StoreID)
	fmt.Fprintf(tw, "CA:\t%s\n", orNone(m.Hub.CAHash))
	fmt.Fprintf(tw, "Signing key:\t%s\n", orNone(m.Hub.SigningKeyID))
	fmt.Fprintf(tw, "Objects:\t%s\n", objectCounts(m.Objects))
	fmt.Fprintf(tw, "Store keys:\t%d\n", m.Keys)
	fmt.Fprintln(tw, "\nPART\tSIZE\tSHA256")
	for _, p := range m.Parts {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, humanBytes(p.Size), p.SHA256)
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// objectCounts renders {"devices": 3, …} as "3 devices, …", sorted.
func objectCounts(m map[string]int) string {
	if len(m) == 0 {
		return "no objects"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress prints the bytes written, at most every 200 ms, on one line.
type progress struct {
	w       io.Writer
	on      bool
	mu      sync.Mutex
	n       int64
	printed time.Time
	done    bool
}

func newProgress(w io.Writer, on bool) *progress { return &progress{w: w, on: on} }

func (p *progress) set(n int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	if now := time.Now(); !p.done && now.Sub(p.printed) >= 200*time.Millisecond {
		p.printed = now
		fmt.Fprintf(p.w, "\rbackup: %s written", humanBytes(n))
	}
}

func (p *progress) stop() {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		p.done = true
		fmt.Fprintf(p.w, "\rbackup: %s written\n", humanBytes(p.n))
	}
}

type countingWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	if c.fn != nil {
		c.fn(c.n)
	}
	return n, err
}
