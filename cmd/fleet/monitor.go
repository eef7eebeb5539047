package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

func newMonitorCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Manage read-only MQTT credentials for monitoring",
		Long: `Manage monitor credentials: MQTT logins that may subscribe to every device's
status, online and events topics (fleet/v1/devices/+/status, .../online,
.../events) and do nothing else, for dashboards and alerting (Grafana,
Node-RED, Telegraf, mosquitto_sub). On the hub's HTTP API a monitor token
reads status, online, events, /metrics and the dashboard only: Devices, and
Deployments without their pod template; never ConfigMaps, Secrets,
revisions or credentials. For other roles (viewer, admin) see
"fleet credential".

"fleet monitor add" shows the token once; the hub keeps only a hash.`,
		Example: `  fleet monitor add grafana
  fleet monitor list
  fleet monitor delete grafana`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroupHelp,
	}
	cmd.AddCommand(newMonitorAddCmd(cli), newMonitorListCmd(cli), newMonitorDeleteCmd(cli))
	return cmd
}

// credentialsByName lists the credentials and returns them by name.
func credentialsByName(ctx context.Context, cl *client.Client) (map[string]schema.Credential, error) {
	l, err := cl.ListCredentials(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]schema.Credential{}
	for _, c := range l.Items {
		byName[c.Name] = c
	}
	return byName, nil
}

// completeMonitors completes the names of monitor credentials (nothing
// when the hub is not reachable).
func (c *cliContext) completeMonitors(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	cl, err := c.Client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	l, err := cl.ListCredentials(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, m := range l.Items {
		if m.Role == schema.RoleMonitor && strings.HasPrefix(m.Name, toComplete) && !slices.Contains(args, m.Name) {
			names = append(names, m.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// ---- add ---------------------------------------------------------------------

func newMonitorAddCmd(cli *cliContext) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "add NAME [-o json|yaml]",
		Short: "Create a monitor credential and show its token once",
		Long: `Create a read-only monitor credential and show its token once, with a
mosquitto_sub command line that uses it. The MQTT username is NAME, the
password is the token.

-o json prints only {"name":...,"role":"monitor","token":...} (-o yaml the
same in YAML), for scripts.`,
		Example: `  fleet monitor add grafana

  # Hand the token to a secret store
  fleet monitor add grafana -o json | jq -r .token | vault kv put secret/fleet/grafana token=-`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMonitorAdd(cmd.Context(), cli, cmd, args[0], output)
		},
	}
	addSecretOutputFlag(cmd, &output)
	return cmd
}

func runMonitorAdd(ctx context.Context, cli *cliContext, cmd *cobra.Command, name, output string) error {
	cl, format, cred, err := createCredential(ctx, cli, cmd, "monitor", name, schema.RoleMonitor, output)
	if err != nil {
		return err
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, cred)
	}
	broker := cli.brokerInfo(ctx, cl, nil)
	cli.printNote(broker)
	return writeMonitorToken(cli.stdout(), broker, cred)
}

// createCredential creates the credential name with role; what names it in
// errors ("monitor name …"). It refuses a name another credential has (the
// admin's, say), whatever the hub would do with it, and returns the
// client, the secret output format ("" for the text) and the credential
// with its token.
func createCredential(ctx context.Context, cli *cliContext, cmd *cobra.Command, what, name, role, output string) (*client.Client, printers.Format, *schema.Credential, error) {
	format, err := parseSecretOutput(cmd, output)
	if err != nil {
		return nil, "", nil, err
	}
	if err := schema.ValidateName(name); err != nil {
		return nil, "", nil, fmt.Errorf("%s name %w", what, err)
	}
	cl, err := cli.Client()
	if err != nil {
		return nil, "", nil, err
	}
	existing, err := credentialsByName(ctx, cl)
	if err != nil {
		return nil, "", nil, err
	}
	if c, ok := existing[name]; ok {
		return nil, "", nil, fmt.Errorf("credential %q already exists (role %s): delete it first, or choose another name", name, c.Role)
	}
	cred, err := cl.CreateCredential(ctx, name, role)
	if err == nil && cred.Token == "" {
		err = errors.New("the hub answered without a token")
	}
	if err != nil {
		return nil, "", nil, err
	}
	return cl, format, cred, nil
}

func writeMonitorToken(w io.Writer, b brokerInfo, cred *schema.Credential) error {
	host, port, err := client.BrokerHostPort(b.url)
	if err != nil {
		return fmt.Errorf("broker URL %q: %w", b.url, err)
	}
	topic := schema.Topics{}.DeviceFilter(schema.TopicStatus)
	var s strings.Builder
	fmt.Fprintf(&s, "monitor/%s created\n", cred.Name)
	fmt.Fprintln(&s, printers.TokenBanner(cred.Token))
	fmt.Fprintf(&s, "It may subscribe to every device's status, online and events topics. Try it, with TOKEN set to the token:\n")
	fmt.Fprintf(&s, "  %s\n", printers.MosquittoSubCommand(host, port, cred.Name, topic, client.IsTLSBrokerURL(b.url)))
	writeExternalNote(&s, b)
	_, err = io.WriteString(w, s.String())
	return err
}

// ---- list --------------------------------------------------------------------

func newMonitorListCmd(cli *cliContext) *cobra.Command {
	var output string
	var noHeaders bool
	cmd := &cobra.Command{
		Use:     "list [-o table|json|yaml|name]",
		Aliases: []string{"ls"},
		Short:   "List monitor credentials",
		Long: `List the monitor credentials: NAME and ROLE. Tokens are never shown: the hub
does not have them.`,
		Example: `  fleet monitor list
  fleet monitor list -o name`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCredentialList(cmd.Context(), cli, output, noHeaders, schema.RoleMonitor)
		},
	}
	addOutputFlag(cmd, &output, "", "output format: table (default), json, yaml or name")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "leave out the header line of the table")
	return cmd
}

// ---- delete ------------------------------------------------------------------

func newMonitorDeleteCmd(cli *cliContext) *cobra.Command {
	var ignoreNotFound bool
	cmd := &cobra.Command{
		Use:   "delete NAME... [--ignore-not-found]",
		Short: "Delete monitor credentials",
		Long: `Delete monitor credentials. The hub disconnects the MQTT sessions that use
them. Only monitor credentials are deleted here: a name with another role
(the hub's admin credential) is refused.

Deleting one that does not exist is an error unless --ignore-not-found; the
others are deleted anyway.`,
		Example: `  fleet monitor delete grafana
  fleet monitor delete grafana nodered --ignore-not-found`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.completeMonitors,
		RunE: func(cmd *cobra.Command, args []string) error {
			return deleteCredentials(cmd.Context(), cli, args, ignoreNotFound, schema.RoleMonitor)
		},
	}
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "treat a monitor that does not exist as deleted")
	return cmd
}
