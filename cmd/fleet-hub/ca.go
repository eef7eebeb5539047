package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub"
	"github.com/fleetmq/fleet/schema"
)

// runningHub is a client of the hub that runs on --data-dir, through its
// admin.conf (hub URL, admin token, CA).
func runningHub(s *settings) (*client.Client, error) {
	path := client.AdminConfigPath(s.DataDir)
	conf, err := client.ReadAdminConfig(path)
	if err != nil {
		return nil, fmt.Errorf("%w (is --data-dir the running hub's?)", err)
	}
	var opts []client.Option
	if strings.HasPrefix(conf.Hub, "https://") && conf.CA != "" {
		hc, err := client.PinnedHTTPClient([]byte(conf.CA), path)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithHTTPClient(hc))
	}
	opts = append(opts, client.WithTimeout(30*time.Second))
	return client.New(conf.Hub, conf.Token, opts...)
}

func newCACmd(s *settings) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Rotate the hub's own CA across the fleet: rotate, status, retire",
		Long: `ca rotates the CA the hub made for itself (ca.crt in the data directory): the
CA that signs the hub's HTTPS and MQTT-over-TLS certificate and the devices'
client certificates, and that devices and admin.conf pin.

A rotation, on the running hub, goes:

  1. fleet-hub ca rotate: a new CA is made (ca-next.crt). Every desired state
     carries both CAs (caBundle, signed like the rest); each agent saves them
     as its broker trust and reports the CAs it trusts (trustedCAs). The old
     CA still signs, so nothing breaks meanwhile.
  2. Once every registered device reported the new CA, the hub completes the
     rotation by itself: the new CA signs the server certificate (new
     connections get it; connected devices stay connected), the old CA is
     retired (ca-retired.crt; its key deleted) and refused from then on.
     Offline devices are waited for and listed by fleet-hub ca status.
  3. fleet-hub ca retire completes it without waiting, once every device
     has the new CA; --force completes it even so: the devices listed as
     pending then need the new CA by hand (--ca-file or a new join string).

The commands talk to the hub that runs on --data-dir, through its
admin.conf.`,
		Example: `  fleet-hub ca rotate --data-dir /var/lib/fleet-hub
  fleet-hub ca status --data-dir /var/lib/fleet-hub
  fleet-hub ca status -o wide
  fleet-hub ca retire           # only once no device is pending
  fleet-hub ca retire --force   # pending devices need the new CA by hand`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCARotateCmd(s), newCAStatusCmd(s), newCARetireCmd(s))
	return cmd
}

func newCARotateCmd(s *settings) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate",
		Short: "Make a new CA and give it to every device beside the current one",
		Example: `  fleet-hub ca rotate --data-dir /var/lib/fleet-hub
  fleet-hub ca status      # watch the devices pick it up`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := runningHub(s)
			if err != nil {
				return err
			}
			st, err := c.RotateCA(cmd.Context())
			if err != nil {
				return fmt.Errorf("ca rotate: %w", hubDown(err))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "CA rotation started: %s (current) -> %s (new); %d of %d device(s) still to report the new CA; the hub retires the old CA once none is left\n",
				st.Active, st.Next, st.Pending, len(st.Devices))
			return err
		},
	}
}

func newCAStatusCmd(s *settings) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the hub's CAs and, device by device, who trusts the new one",
		Long: `status prints the active CA, the new one of a rotation under way and the
retired ones, then every registered device (offline ones too) with whether it
reported trusting the new CA. -o wide adds the CA pins each device trusts;
-o json and -o yaml print the whole answer of GET /v1/ca.`,
		Example: `  fleet-hub ca status
  fleet-hub ca status -o wide
  fleet-hub ca status -o json | jq '.devices[] | select(.hasNext | not) | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := runningHub(s)
			if err != nil {
				return err
			}
			st, err := c.CAStatus(cmd.Context())
			if err != nil {
				return fmt.Errorf("ca status: %w", hubDown(err))
			}
			return printCAStatus(cmd.OutOrStdout(), st, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, wide, json or yaml")
	return cmd
}

func newCARetireCmd(s *settings) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "retire",
		Short: "Complete the CA rotation: the new CA signs, the old one is refused",
		Long: `retire completes the CA rotation under way without waiting for the hub to do
it: the new CA signs the hub's server certificate and the client
certificates, and the old CA is refused from then on. It refuses while a
device (online or not) has not reported the new CA, and names them; with
--force it retires the old CA anyway, and those devices can no longer verify
the hub until they are given the new CA (--ca-file, or a new join string).`,
		Example: `  fleet-hub ca retire
  fleet-hub ca retire --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := runningHub(s)
			if err != nil {
				return err
			}
			st, err := c.RetireCA(cmd.Context(), force)
			if err != nil {
				return fmt.Errorf("ca retire: %w", hubDown(err))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "CA rotation complete: %s signs; retired %s\n", st.Active, strings.Join(st.Retired, ", "))
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "retire the old CA even though some devices have not reported the new one")
	return cmd
}

// hubDown adds a hint to an error that says no hub listens.
func hubDown(err error) error {
	var oerr *net.OpError
	if errors.As(err, &oerr) && oerr.Op == "dial" {
		return fmt.Errorf("%w (the ca commands talk to the running hub of --data-dir: start it first)", err)
	}
	return err
}

// printCAStatus prints st as output says.
func printCAStatus(w io.Writer, st *schema.CARotationStatus, output string) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(st)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "wide", "":
	default:
		return fmt.Errorf("--output %q: want table, wide, json or yaml", output)
	}
	next := st.Next
	if next == "" {
		next = "<none: no rotation under way>"
	}
	fmt.Fprintf(w, "ACTIVE CA:  %s (until %s)\nNEW CA:     %s\n", st.Active, st.ActiveExpires.Format(time.DateOnly), next)
	if len(st.Retired) > 0 {
		fmt.Fprintf(w, "RETIRED:    %s\n", strings.Join(st.Retired, ", "))
	}
	fmt.Fprintf(w, "PENDING:    %d of %d device(s)\n\n", st.Pending, len(st.Devices))
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := "DEVICE\tONLINE\tHAS NEW CA"
	if output == "wide" {
		head += "\tTRUSTED CAS"
	}
	fmt.Fprintln(tw, head)
	for _, d := range st.Devices {
		has := "yes"
		if !d.HasNext {
			has = "no (pending)"
		}
		line := fmt.Sprintf("%s\t%v\t%s", d.Name, d.Online, has)
		if output == "wide" {
			line += "\t" + strings.Join(d.TrustedCAs, ",")
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func newSigningKeyCmd(s *settings) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signing-key",
		Short: "Rotate the hub's desired-state signing key",
		Long: `signing-key manages the ed25519 key the hub signs every desired state and
every request to a device with, and that devices pin.`,
		Example: `  fleet-hub signing-key rotate --data-dir /var/lib/fleet-hub`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSigningKeyRotateCmd(s, "rotate"))
	return cmd
}

const signingKeyRotateLong = `rotate makes a new ed25519 key for signing desired states (signing.key in
the data directory) and keeps the current one (signing.key.previous) to
endorse it. Every desired state is republished signed by the new key, with
the old key's endorsement: each agent checks the endorsement against the key
it pinned and pins the new key. An agent that missed two rotations (offline
all along) refuses the new key: give it --hub-signing-key.

With the hub running on --data-dir it rotates the running hub's key through
its API (admin.conf) and the hub republishes at once; with the hub stopped it
rotates the files, and the hub republishes when it starts.`

// newSigningKeyRotateCmd is `signing-key rotate`, and under the name
// rotate-signing-key its older alias.
func newSigningKeyRotateCmd(s *settings, use string) *cobra.Command {
	short := "Make a new desired-state signing key, endorsed by the current one"
	if use != "rotate" {
		short = "The same as signing-key rotate (its older name)"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  signingKeyRotateLong,
		Example: `  # on a running hub: rotates and republishes at once
  fleet-hub signing-key rotate --data-dir /var/lib/fleet-hub
  # with the hub stopped
  systemctl stop fleet-hub
  fleet-hub signing-key rotate --data-dir /var/lib/fleet-hub
  systemctl start fleet-hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if info, running, err := rotateOnRunningHub(cmd.Context(), s); running {
				if err != nil {
					return fmt.Errorf("rotate the running hub's signing key: %w", err)
				}
				_, err = fmt.Fprintf(out, "signing key of the running hub rotated: now %s; every desired state is republished, endorsed by the previous key\n", info.SigningKeyID)
				return err
			}
			oldID, newID, err := hub.RotateSigningKey(s.DataDir)
			if err != nil {
				return err
			}
			if oldID == "" {
				_, err = fmt.Fprintf(out, "no signing key yet: created key %s\n", newID)
				return err
			}
			_, err = fmt.Fprintf(out, "signing key rotated: %s -> %s (endorsed by %s); start the hub to republish every desired state\n", oldID, newID, oldID)
			return err
		},
	}
}

// rotateOnRunningHub rotates the signing key through the API of the hub
// of --data-dir; running is false when no hub answers there (no
// admin.conf, or nothing listening), so the files can be rotated.
func rotateOnRunningHub(ctx context.Context, s *settings) (_ *schema.HubInfo, running bool, _ error) {
	c, err := runningHub(s)
	if err != nil {
		return nil, false, nil
	}
	info, err := c.RotateSigningKey(ctx)
	var oerr *net.OpError
	if err != nil && errors.As(err, &oerr) && oerr.Op == "dial" {
		return nil, false, nil // nothing listens: the hub is stopped
	}
	return info, true, err
}
