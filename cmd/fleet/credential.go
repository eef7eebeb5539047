package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

func newCredentialCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "credential",
		Aliases: []string{"credentials"},
		Short:   "Manage operator credentials: admin, viewer and monitor tokens",
		Long: `Manage operator credentials, the bearer tokens of the hub's HTTP API. Each has a
role:

  admin    everything
  viewer   a read-only admin: reads everything but password hashes, the
           audit trail, logs and crash reports; writes nothing, no exec
  monitor  status, online, events, metrics and the dashboard only (no
           specs, ConfigMaps, Secrets or credentials), and on MQTT every
           device's status, online and events topics

"fleet credential add" shows the token once; the hub keeps only a hash.
"fleet monitor" is the same for monitor credentials, with a mosquitto_sub
line to try one.`,
		Example: `  fleet credential add ci-readonly --role viewer
  fleet credential add ops-bob --role admin
  fleet credential list
  fleet credential delete ci-readonly`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroupHelp,
	}
	cmd.AddCommand(newCredentialAddCmd(cli), newCredentialListCmd(cli), newCredentialDeleteCmd(cli))
	return cmd
}

func newCredentialAddCmd(cli *cliContext) *cobra.Command {
	var output, role string
	cmd := &cobra.Command{
		Use:   "add NAME --role admin|viewer|monitor [-o json|yaml]",
		Short: "Create a credential and show its token once",
		Long: `Create an operator credential of the given role and show its token once.

-o json prints only {"name":...,"role":...,"token":...} (-o yaml the same in
YAML), for scripts.`,
		Example: `  fleet credential add ci-readonly --role viewer -o json | jq -r .token`,
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCredentialAdd(cmd.Context(), cli, cmd, args[0], role, output)
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "the credential's role: admin, viewer or monitor (required)")
	must(cmd.MarkFlagRequired("role"))
	must(cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(schema.Roles, cobra.ShellCompDirectiveNoFileComp)))
	addSecretOutputFlag(cmd, &output)
	return cmd
}

func runCredentialAdd(ctx context.Context, cli *cliContext, cmd *cobra.Command, name, role, output string) error {
	if !slices.Contains(schema.Roles, role) {
		return fmt.Errorf("--role %q: want %s", role, strings.Join(schema.Roles, ", "))
	}
	if role == schema.RoleMonitor {
		return runMonitorAdd(ctx, cli, cmd, name, output)
	}
	_, format, cred, err := createCredential(ctx, cli, cmd, "credential", name, role, output)
	if err != nil {
		return err
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, cred)
	}
	return writeCredentialToken(cli.stdout(), cred)
}

func writeCredentialToken(w io.Writer, cred *schema.Credential) error {
	var s strings.Builder
	fmt.Fprintf(&s, "credential/%s created (role %s)\n", cred.Name, cred.Role)
	fmt.Fprintln(&s, printers.TokenBanner(cred.Token))
	fmt.Fprintln(&s, "Send it as the bearer token of the hub's API (Authorization: Bearer TOKEN), or put it in a fleet config context.")
	_, err := io.WriteString(w, s.String())
	return err
}

func newCredentialListCmd(cli *cliContext) *cobra.Command {
	var output string
	var noHeaders bool
	cmd := &cobra.Command{
		Use:     "list [-o table|json|yaml|name]",
		Aliases: []string{"ls"},
		Short:   "List the credentials and their roles",
		Long:    `List every operator credential: NAME and ROLE. Tokens are never shown: the hub does not have them.`,
		Example: `  fleet credential list
  fleet credential list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCredentialList(cmd.Context(), cli, output, noHeaders, "")
		},
	}
	addOutputFlag(cmd, &output, "", "output format: table (default), json, yaml or name")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "leave out the header line of the table")
	return cmd
}

func newCredentialDeleteCmd(cli *cliContext) *cobra.Command {
	var ignoreNotFound bool
	cmd := &cobra.Command{
		Use:   "delete NAME... [--ignore-not-found]",
		Short: "Delete credentials",
		Long: `Delete operator credentials of any role; the hub disconnects their MQTT
sessions. The hub's own admin credential (admin) is refused: rotate it with
fleet-hub admin-token --rotate.`,
		Example: `  fleet credential delete ci-readonly
  fleet credential delete ci-readonly ops-bob --ignore-not-found`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return deleteCredentials(cmd.Context(), cli, args, ignoreNotFound, "")
		},
	}
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "treat a credential that does not exist as deleted")
	return cmd
}

// runCredentialList prints the hub's credentials, those of role only
// when it is set ("No resources found." on stderr when a table would be
// empty).
func runCredentialList(ctx context.Context, cli *cliContext, output string, noHeaders bool, role string) error {
	p, err := cli.printer(output, noHeaders)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	l, err := cl.ListCredentials(ctx)
	if err != nil {
		return err
	}
	items := []schema.Credential{}
	for _, c := range l.Items {
		if role == "" || c.Role == role {
			items = append(items, c)
		}
	}
	if len(items) == 0 && p.Format != printers.JSON && p.Format != printers.YAML {
		fmt.Fprintln(cli.stderr(), "No resources found.")
		return nil
	}
	return p.PrintCredentials(items)
}

// deleteCredentials deletes the named credentials, those of role only
// when it is set (fleet monitor delete: another role is refused by
// name). Every name is tried; the errors are joined.
func deleteCredentials(ctx context.Context, cli *cliContext, names []string, ignoreNotFound bool, role string) error {
	kind := "credential"
	if role != "" {
		kind = role
	}
	for _, n := range names {
		if err := schema.ValidateName(n); err != nil {
			return fmt.Errorf("%s name %w", kind, err)
		}
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var existing map[string]schema.Credential
	if role != "" {
		if existing, err = credentialsByName(ctx, cl); err != nil {
			return err
		}
	}
	var errs []error
	for _, n := range names {
		if c, ok := existing[n]; ok && c.Role != role {
			errs = append(errs, fmt.Errorf("credential %q has role %s, not %s: fleet %s delete removes %ss only", n, c.Role, role, kind, kind))
			continue
		}
		err := cl.DeleteCredential(ctx, n)
		switch {
		case err == nil:
			fmt.Fprintf(cli.stdout(), "%s/%s deleted\n", kind, n)
		case client.IsNotFound(err) && ignoreNotFound:
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
