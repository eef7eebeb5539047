package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// AgentBootstrapTokenFile is where the agent command line printed by
// `fleet token create` expects the bootstrap token.
const AgentBootstrapTokenFile = "/etc/fleet/bootstrap-token"

func newTokenCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and delete bootstrap tokens for self-enrolling devices",
		Long: `Bootstrap tokens let devices register themselves, so that many devices can
start from one SD-card image.

Put a bootstrap token on the image and start fleet-agent with
--bootstrap-token-file: on first start each device names itself (its
hostname, board serial or machine-id), asks the hub over MQTT for a device of
that name and its own token, saves the token and never uses the bootstrap
token again. Devices that enroll get the token's labels, so deployments
selecting them start at once.

A bootstrap token can only enroll: it expires (--ttl) and enrolls at most
--uses devices. A name that already exists is never taken over: the device
is refused. The hub keeps only a hash of the token: it is shown once.`,
		Example: `  # 100 Pis for the north site, within a day
  fleet token create --label site=north --ttl 24h --uses 100

  # For a provisioning script: {"id":"...","token":"...",...}
  fleet token create --label site=north -o json

  fleet token list
  fleet token delete k3x9pq`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroupHelp,
	}
	cmd.AddCommand(newTokenCreateCmd(cli), newTokenListCmd(cli), newTokenDeleteCmd(cli))
	return cmd
}

// ---- create ------------------------------------------------------------------

type tokenCreateOptions struct {
	labels      []string
	ttl         string
	uses        int
	description string
	output      string
	brokers     []string
}

func newTokenCreateCmd(cli *cliContext) *cobra.Command {
	var o tokenCreateOptions
	cmd := &cobra.Command{
		Use:   "create [--label key=value ...] [--ttl 24h] [--uses N] [--description TEXT] [-o json|yaml]",
		Short: "Create a bootstrap token and show it once",
		Long: `Create a bootstrap token and show it once, with the fleet-agent command line
that enrolls a device with it, and a join string (fleetjoin1:...) that
carries the token with the brokers, the hub's CA hash and its signing key,
for "fleet-agent --join" or "install.sh --join". The brokers are every one
the hub knows of (GET /v1/info mqttURL and brokers), or --broker's
(repeatable, or comma-separated). The token itself carries
no CA hash: give --ca-hash and --hub-signing-key with it, or use the join
string.

--label sets the labels every device that enrolls with the token gets
(repeatable, or comma-separated; keys under fleet/ belong to the hub). --ttl
is how long the token may be used (default 24h; 0 means it never expires),
--uses how many devices may enroll with it (default 0: no limit).

-o json prints only the token object, with "token", for scripts (-o yaml the
same in YAML).`,
		Example: `  fleet token create --label site=north --ttl 24h --uses 100
  fleet token create --label site=lab --ttl 1h --uses 1 --description "bench Pi"

  # Write the token straight into the image's boot partition
  fleet token create --label site=north -o json | jq -r .token > /media/bootfs/fleet-bootstrap-token`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenCreate(cmd.Context(), cli, cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.labels, "label", "l", nil, "label key=value for enrolled devices (repeatable; key=value,key2=value2 also works)")
	f.StringVar(&o.ttl, "ttl", "24h", "how long the token may be used, such as 24h or 30m; 0 for ever")
	f.IntVar(&o.uses, "uses", 0, "how many devices may enroll with the token; 0 for no limit")
	f.StringVar(&o.description, "description", "", "free text shown by fleet token list")
	addSecretOutputFlag(cmd, &o.output)
	addBrokerFlag(cmd, &o.brokers)
	return cmd
}

func runTokenCreate(ctx context.Context, cli *cliContext, cmd *cobra.Command, o tokenCreateOptions) error {
	format, err := parseSecretOutput(cmd, o.output)
	if err != nil {
		return err
	}
	if d, err := time.ParseDuration(o.ttl); err != nil || d < 0 || d > 0 && d < time.Second {
		return fmt.Errorf("--ttl %q: want a duration of at least 1s, such as 24h or 30m, or 0 for a token that never expires", o.ttl)
	}
	if o.uses < 0 {
		return fmt.Errorf("--uses %d: want 0 (no limit) or more", o.uses)
	}
	if err := checkBrokerFlag(o.brokers); err != nil {
		return err
	}
	var labelArgs []string
	for _, l := range o.labels {
		labelArgs = append(labelArgs, strings.Split(l, ",")...)
	}
	var labels map[string]string
	if len(labelArgs) > 0 {
		edit, err := client.ParseLabelEdit(labelArgs)
		if err != nil {
			return err
		}
		if len(edit.Remove) > 0 {
			return fmt.Errorf("--label %s-: a new token has no labels to remove", edit.Remove[0])
		}
		labels = edit.Set
	}
	if fe := schema.ValidateBootstrapLabels(labels); len(fe) > 0 {
		return &schema.ValidationError{Kind: "BootstrapToken", Errors: fe}
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var broker brokerInfo
	if format == "" {
		broker = cli.brokerInfo(ctx, cl, o.brokers)
	}
	bt, err := cl.CreateBootstrapToken(ctx, schema.BootstrapTokenRequest{
		Description: o.description, Labels: labels, TTL: o.ttl, Uses: o.uses,
	})
	if err != nil {
		return err
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, bt)
	}
	cli.printNote(broker)
	return writeBootstrapToken(cli.stdout(), broker, bt, cli.now())
}

// writeBootstrapToken prints a new bootstrap token once, with what it
// does and the agent's command line.
func writeBootstrapToken(w io.Writer, b brokerInfo, bt *schema.BootstrapToken, now time.Time) error {
	var s strings.Builder
	fmt.Fprintf(&s, "bootstrap-token/%s created: %s, %s", bt.ID, usesText(bt), expiresText(bt.Expires, now))
	if len(bt.Labels) > 0 {
		fmt.Fprintf(&s, ", labels %s", printers.Labels(bt.Labels))
	}
	fmt.Fprintln(&s)
	fmt.Fprintln(&s, printers.TokenBanner(bt.Token))
	if bt.CAHash != "" && b.caHash == "" && b.anyTLS() {
		b.caHash = bt.CAHash
	}
	if b.caHash != "" {
		fmt.Fprintf(&s, "Hub CA hash: %s\n", b.caHash)
	}
	fmt.Fprintln(&s, "Start the agent on each device with it (one image for all: each device enrolls once, under its own name):")
	fmt.Fprintf(&s, "  fleet-agent --broker %s%s --bootstrap-token-file %s --name-from hostname   (write the token there, mode 0600)\n", b.brokerArg(), b.trustFlags(), AgentBootstrapTokenFile)
	fmt.Fprintln(&s, "  (--name-from serial names a Raspberry Pi after its board serial: unique even when every card has the same hostname)")
	writeTrustNote(&s, b)
	fmt.Fprintln(&s, "Or install the agent on a Raspberry Pi (arm/install.sh):")
	fmt.Fprintf(&s, "  sudo ./install.sh --broker %s%s --bootstrap-token-file FILE --name-from serial\n", b.brokerArg(), b.trustFlags())
	if join, ok := b.joinString("", "", bt.Token); ok {
		writeJoin(&s, join, " --name-from serial")
	}
	if b.external {
		fmt.Fprintln(&s, "The hub uses an external MQTT broker: enrollment needs the embedded broker, or a broker that lets bootstrap clients publish on fleet/v1/enroll/{client ID}/request and read .../response.")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

func usesText(bt *schema.BootstrapToken) string {
	if bt.Uses == 0 {
		return "no limit on uses"
	}
	if bt.Uses == 1 {
		return "1 use"
	}
	return strconv.Itoa(bt.Uses) + " uses"
}

func expiresText(exp *time.Time, now time.Time) string {
	switch {
	case exp == nil:
		return "never expires"
	case exp.After(now):
		return fmt.Sprintf("expires %s (in %s)", exp.UTC().Format(time.RFC3339), roughly(exp.Sub(now)))
	}
	return fmt.Sprintf("expired %s (%s ago)", exp.UTC().Format(time.RFC3339), roughly(now.Sub(*exp)))
}

// roughly is HumanDuration rounded, so that a token created for 24h shows
// "24h", not the "23h" of 23h59m59s.
func roughly(d time.Duration) string {
	if d >= time.Hour {
		return printers.HumanDuration(d.Round(time.Minute))
	}
	return printers.HumanDuration(d.Round(time.Second))
}

// ---- list --------------------------------------------------------------------

func newTokenListCmd(cli *cliContext) *cobra.Command {
	var output string
	var noHeaders bool
	cmd := &cobra.Command{
		Use:     "list [-o table|json|yaml|name]",
		Aliases: []string{"ls"},
		Short:   "List bootstrap tokens",
		Long: `List the bootstrap tokens: ID, STATUS (Active, Expired or UsedUp), USED (devices
enrolled, of the limit), EXPIRES, LABELS, AGE and DESCRIPTION. The tokens
themselves are never shown: the hub does not have them.`,
		Example: `  fleet token list
  fleet token list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenList(cmd.Context(), cli, output, noHeaders)
		},
	}
	addOutputFlag(cmd, &output, "", "output format: table (default), json, yaml or name")
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "leave out the header line of the table")
	return cmd
}

func runTokenList(ctx context.Context, cli *cliContext, output string, noHeaders bool) error {
	p, err := cli.printer(output, noHeaders)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	list, err := cl.ListBootstrapTokens(ctx)
	if err != nil {
		return err
	}
	switch p.Format {
	case printers.JSON:
		return printers.WriteJSON(p.Out, list)
	case printers.YAML:
		return printers.WriteYAML(p.Out, list)
	case printers.Name:
		for _, bt := range list.Items {
			fmt.Fprintf(p.Out, "bootstrap-token/%s\n", bt.ID)
		}
		return nil
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(cli.stderr(), "No resources found.")
		return nil
	}
	now := cli.now()
	rows := make([][]string, 0, len(list.Items))
	for _, bt := range list.Items {
		used := strconv.Itoa(bt.Used) + "/" + strconv.Itoa(bt.Uses)
		if bt.Uses == 0 {
			used = strconv.Itoa(bt.Used) + "/unlimited"
		}
		expires := "never"
		if bt.Expires != nil {
			if bt.Expires.After(now) {
				expires = "in " + roughly(bt.Expires.Sub(now))
			} else {
				expires = roughly(now.Sub(*bt.Expires)) + " ago"
			}
		}
		rows = append(rows, []string{bt.ID, bt.Status, used, expires, orDash(printers.Labels(bt.Labels)),
			printers.Age(&bt.Created, now), orDash(bt.Description)})
	}
	var headers []string
	if !noHeaders {
		headers = []string{"ID", "STATUS", "USED", "EXPIRES", "LABELS", "AGE", "DESCRIPTION"}
	}
	return printers.WriteTable(p.Out, headers, rows)
}

func orDash(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// ---- delete ------------------------------------------------------------------

func newTokenDeleteCmd(cli *cliContext) *cobra.Command {
	var ignoreNotFound bool
	cmd := &cobra.Command{
		Use:   "delete ID... [--ignore-not-found]",
		Short: "Delete bootstrap tokens",
		Long: `Delete bootstrap tokens by ID (the part of the token before the '.', as fleet
token list shows). No device can enroll with them any more; devices that
already enrolled keep their own tokens.

Deleting one that does not exist is an error unless --ignore-not-found; the
others are deleted anyway.`,
		Example: `  fleet token delete k3x9pq
  fleet token delete k3x9pq a1b2c3 --ignore-not-found`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTokenDelete(cmd.Context(), cli, args, ignoreNotFound)
		},
	}
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "treat a token that does not exist as deleted")
	return cmd
}

func runTokenDelete(ctx context.Context, cli *cliContext, ids []string, ignoreNotFound bool) error {
	for i, id := range ids {
		// A whole token works too: only its public half is sent.
		if before, _, ok := strings.Cut(id, "."); ok {
			ids[i] = before
		}
		if err := schema.ValidateBootstrapTokenID(ids[i]); err != nil {
			return err
		}
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		_, err := cl.DeleteBootstrapToken(ctx, id)
		switch {
		case err == nil:
			fmt.Fprintf(cli.stdout(), "bootstrap-token/%s deleted\n", id)
		case client.IsNotFound(err) && ignoreNotFound:
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
