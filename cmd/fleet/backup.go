package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
)

// envBackupPassphrase is the backup passphrase's environment variable
// (the same as fleet-hub's).
const envBackupPassphrase = "FLEET_BACKUP_PASSPHRASE"

type backupOptions struct {
	out            string
	passphraseFile string
	recipients     []string
	recipientFile  string
	progress       bool
}

func newBackupCmd(cli *cliContext) *cobra.Command {
	var o backupOptions
	cmd := &cobra.Command{
		Use:   "backup -o FILE [--passphrase-file FILE | --recipient age1…]",
		Short: "Download an encrypted backup of the hub (admin only)",
		Long: `Download an encrypted backup of the hub: the store at one revision (devices,
deployments, revisions, ConfigMaps, Secrets, desired states, token hashes,
the audit trail) and the hub's CA, signing keys and Secrets key. The hub
takes it online, from one read transaction, while it serves, and encrypts
it with age before it leaves: to a passphrase (--passphrase-file, or
$` + envBackupPassphrase + `) or to age public keys (--recipient). Admin only.

The file is written next to FILE and renamed into place only once the
whole backup arrived; an existing FILE is never replaced. Progress goes to
stderr on a terminal or with --progress.

To check a backup: fleet-hub backup inspect FILE. To restore it on a new
machine: fleet-hub restore --from FILE --data-dir DIR.`,
		Example: `  # A backup to a passphrase kept in a file
  fleet backup -o hub-$(date +%F).age --passphrase-file ~/.fleet-backup-pass

  # To an age key (the matching secret key restores it)
  fleet backup -o hub.age --recipient age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBackup(cmd.Context(), cli, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.out, "output", "o", "", "file to write the backup to (required; it must not exist)")
	f.StringVar(&o.passphraseFile, "passphrase-file", "", "file holding the passphrase (default: $"+envBackupPassphrase+")")
	f.StringArrayVar(&o.recipients, "recipient", nil, "encrypt to this age public key (age1…) instead (repeatable)")
	f.StringVar(&o.recipientFile, "recipient-file", "", "file of age public keys, one a line, to encrypt to")
	f.BoolVar(&o.progress, "progress", false, "print the bytes received on stderr even when it is not a terminal")
	return cmd
}

// request builds the hub's backup request from the flags.
func (o backupOptions) request(getenv func(string) string) (client.BackupRequest, error) {
	var req client.BackupRequest
	if o.passphraseFile != "" {
		b, err := os.ReadFile(o.passphraseFile)
		if err != nil {
			return req, fmt.Errorf("--passphrase-file: %w", err)
		}
		req.Passphrase = strings.TrimRight(string(b), "\r\n")
	}
	req.Recipients = append(req.Recipients, o.recipients...)
	if o.recipientFile != "" {
		f, err := os.Open(o.recipientFile)
		if err != nil {
			return req, fmt.Errorf("--recipient-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
				req.Recipients = append(req.Recipients, line)
			}
		}
		if err := sc.Err(); err != nil {
			return req, fmt.Errorf("--recipient-file: %w", err)
		}
	}
	if req.Passphrase == "" && len(req.Recipients) == 0 && getenv != nil {
		req.Passphrase = getenv(envBackupPassphrase)
	}
	if req.Passphrase == "" && len(req.Recipients) == 0 {
		return req, fmt.Errorf("no key: give --passphrase-file FILE or --recipient age1…, or set %s; backups are never written in clear", envBackupPassphrase)
	}
	return req, nil
}

func runBackup(ctx context.Context, cli *cliContext, o backupOptions) error {
	if o.out == "" {
		return errors.New("-o FILE: required")
	}
	req, err := o.request(cli.io.getenv)
	if err != nil {
		return err
	}
	if _, err := os.Stat(o.out); err == nil {
		return fmt.Errorf("-o %s: the file exists; backups are never overwritten", o.out)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	start := time.Now()
	tmp, err := os.CreateTemp(filepath.Dir(o.out), "."+filepath.Base(o.out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	var w io.Writer = tmp
	show := o.progress || isTerminalWriter(cli.stderr())
	var last time.Time
	if show {
		w = &progressWriter{w: tmp, fn: func(n int64) {
			if now := time.Now(); now.Sub(last) >= 200*time.Millisecond {
				last = now
				fmt.Fprintf(cli.stderr(), "\rbackup: %s received", sizeText(n))
			}
		}}
	}
	res, err := cl.Backup(ctx, req, w)
	if show {
		fmt.Fprintf(cli.stderr(), "\rbackup: %s received\n", sizeText(res.Bytes))
	}
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	if err := os.Link(tmp.Name(), o.out); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	var counts []string
	for _, k := range slices.Sorted(maps.Keys(res.Objects)) {
		counts = append(counts, fmt.Sprintf("%d %s", res.Objects[k], k))
	}
	fmt.Fprintf(cli.stdout(), "backup written to %s: revision %d, %s, %s in %s\n", o.out, res.Revision,
		strings.Join(counts, ", "), sizeText(res.Bytes), time.Since(start).Round(time.Millisecond))
	return nil
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

type progressWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}
