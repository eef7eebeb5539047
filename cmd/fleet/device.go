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

func newDeviceCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device",
		Short: "Add devices, issue their tokens, label and delete them",
		Long: `Manage the devices of the fleet and their MQTT credentials.

A device authenticates to the broker with its name and a token the hub
issues. "fleet device add" registers a device and shows its token once, with
the fleet-agent command line to run on the device; the hub keeps only a hash
of the token, so it cannot be shown again: "fleet device rotate-token" issues
a new one (and the old one stops working at once).

Labels select which deployments run on a device; "fleet device label" edits
them the way "kubectl label" does. Labels under fleet/ belong to the hub.`,
		Example: `  # Register a Raspberry Pi in the lab and get its token
  fleet device add pi-1 --label site=lab --description "Pi 4 on the bench"

  # The same, for a provisioning script: {"name":"pi-1","token":"..."}
  fleet device add pi-1 -o json

  # Move it to the garage and drop a label
  fleet device label pi-1 site=garage --overwrite
  fleet device label pi-1 temp-

  # The token leaked: issue a new one
  fleet device rotate-token pi-1

  fleet device list
  fleet device delete pi-1`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroupHelp,
	}
	cmd.AddCommand(
		newDeviceAddCmd(cli),
		newDeviceLabelCmd(cli),
		newDeviceRotateTokenCmd(cli),
		newDeviceRekeyCmd(cli),
		newDeviceDeleteCmd(cli),
		newDeviceListCmd(cli),
	)
	return cmd
}

// runGroupHelp is the RunE of a command that only groups subcommands: help
// without arguments, an error naming the unknown subcommand otherwise.
func runGroupHelp(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return fmt.Errorf("%s\nSee '%s --help' for usage.", msg, cmd.CommandPath())
}

// parseSecretOutput checks the -o of a command that shows a token: "" (for
// people), json or yaml.
func parseSecretOutput(cmd *cobra.Command, o string) (printers.Format, error) {
	switch o {
	case "":
		return "", nil
	case string(printers.JSON), string(printers.YAML):
		return printers.Format(o), nil
	}
	return "", fmt.Errorf("-o %s: %s prints json or yaml", o, cmd.CommandPath())
}

func addSecretOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "", "print only the credentials, for scripts: json or yaml")
	must(cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp)))
}

// completeDevices completes the names of existing devices (the first
// argument only, unless all are device names).
func (c *cliContext) completeDevices(allArgs bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !allArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return c.completeResources(cmd, append([]string{string(client.Devices)}, args...), toComplete)
	}
}

// ---- add ---------------------------------------------------------------------

type deviceAddOptions struct {
	labels      []string
	description string
	output      string
	brokers     []string
	fromFile    string
}

func newDeviceAddCmd(cli *cliContext) *cobra.Command {
	var o deviceAddOptions
	cmd := &cobra.Command{
		Use:   "add (NAME [--label key=value ...] [--description TEXT] | --from-file FILE) [-o json|yaml]",
		Short: "Register a device and show its token once",
		Long: `Register a device with the hub, issue its MQTT token and show the token once,
with the fleet-agent command line to start on the device. The agent connects
to the broker URL the hub reports (GET /v1/info), or to port 1883 on the
hub's host when the hub does not say.

It also prints a join string (fleetjoin1:...): the brokers, the hub's CA
hash and signing key, the device's name and token in one word, for
"fleet-agent --join" or "install.sh --join". The brokers are every one the
hub knows of (GET /v1/info: mqttURL and, with several hubs, brokers), so
the agent moves to the leader's broker whichever hub leads; --broker
(repeatable, or comma-separated) gives the list instead, the preferred
first. With it the agent runs only
desired states the hub signed, from the first one on; an agent given no
signing key runs nothing from the broker. The join string holds the token:
it is shown once, like the token.

The hub keeps only a hash of the token: store it now. If it is lost, issue a
new one with "fleet device rotate-token NAME".

Every device carries the label fleet/device=NAME; --label adds your own
(repeatable, or comma-separated). Keys under fleet/ are reserved for the hub.

-o json prints only {"name":...,"token":...} (-o yaml the same in YAML), for
provisioning scripts.` + deviceFileHelp,
		Example: `  fleet device add pi-1
  fleet device add pi-1 --label site=lab --label room=kitchen --description "Pi 4 in the kitchen"

  # Provision from a script: write the token straight into a file
  fleet device add pi-1 -o json | jq -r .token > pi-1.token

  # Several hubs: the device gets every hub's broker, in this order
  fleet device add pi-1 --broker ssl://hub1.example:8883,ssl://hub2.example:8883

  # Many devices from a CSV file (pi-1,site=lab;room=a,Pi in the kitchen),
  # their tokens written to a file only you can read
  (umask 077; fleet device add --from-file devices.csv > tokens.csv)`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.fromFile != "" {
				if len(args) > 0 || len(o.labels) > 0 || o.description != "" || len(o.brokers) > 0 {
					return fmt.Errorf("--from-file takes no NAME, --label, --description or --broker: the file gives each device's name, labels and description")
				}
				return nil
			}
			return exactArgs(1, "NAME")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fromFile != "" {
				format, err := parseSecretOutput(cmd, o.output)
				if err != nil {
					return err
				}
				return runDeviceAddFile(cmd.Context(), cli, o.fromFile, format)
			}
			return runDeviceAdd(cmd.Context(), cli, cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	addBrokerFlag(cmd, &o.brokers)
	f.StringArrayVarP(&o.labels, "label", "l", nil, "label key=value of the device (repeatable; key=value,key2=value2 also works)")
	f.StringVar(&o.description, "description", "", "free text shown by fleet describe device")
	f.StringVar(&o.fromFile, "from-file", "", "register every device of this CSV file (- for stdin) in a few calls: NAME[,LABELS[,DESCRIPTION]] per line")
	addSecretOutputFlag(cmd, &o.output)
	return cmd
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s, got %d argument(s)\nSee '%s --help' for usage.", cmd.CommandPath(), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func runDeviceAdd(ctx context.Context, cli *cliContext, cmd *cobra.Command, name string, o deviceAddOptions) error {
	format, err := parseSecretOutput(cmd, o.output)
	if err != nil {
		return err
	}
	if err := schema.ValidateName(name); err != nil {
		return fmt.Errorf("device name %w", err)
	}
	if err := checkBrokerFlag(o.brokers); err != nil {
		return err
	}
	var labelArgs []string
	for _, l := range o.labels {
		labelArgs = append(labelArgs, strings.Split(l, ",")...)
	}
	labels := map[string]string{}
	if len(labelArgs) > 0 {
		edit, err := client.ParseLabelEdit(labelArgs)
		if err != nil {
			return err
		}
		if len(edit.Remove) > 0 {
			return fmt.Errorf("--label %s-: a new device has no labels to remove", edit.Remove[0])
		}
		labels = edit.Set
	}
	dev := &schema.Device{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
		Metadata: schema.ObjectMeta{Name: name, Labels: labels},
		Spec:     schema.DeviceSpec{Description: o.description},
	}
	if err := schema.ValidateDevice(dev); err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var broker brokerInfo
	if format == "" {
		// Asked before anything is written, so the token follows its
		// creation at once.
		broker = cli.brokerInfo(ctx, cl, o.brokers)
	}
	_, err = cl.CreateDevice(ctx, dev)
	if client.IsAlreadyExists(err) {
		return &hintError{err: err, hint: fmt.Sprintf("Its token cannot be shown again. To issue a new one (the old one stops working): fleet device rotate-token %s", name)}
	}
	if err != nil {
		return err
	}
	if format == "" {
		fmt.Fprintf(cli.stdout(), "device/%s created\n", name)
	}
	creds, err := cl.IssueToken(ctx, name)
	if err == nil && creds.Token == "" {
		err = errors.New("the hub answered without a token")
	}
	if err != nil {
		return &hintError{
			err:  fmt.Errorf("device/%s was created, but issuing its token failed: %w", name, err),
			hint: fmt.Sprintf("The device exists without a usable token. Issue one with: fleet device rotate-token %s", name),
		}
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, creds)
	}
	cli.printNote(broker)
	return writeDeviceToken(cli.stdout(), broker, creds, "Start the agent on the device:")
}

// brokerInfo is what a device or monitor is told about the broker.
type brokerInfo struct {
	// url is the first of urls: the broker a monitor is told of.
	url string
	// urls are the brokers a device is given, the preferred first.
	urls     []string
	external bool
	// caHash pins the hub's own CA (GET /v1/info caHash): devices get it
	// as --ca-hash when url is TLS.
	caHash string
	// signingKey is the hub's desired-state signing key (GET /v1/info
	// signingKey): devices get it as --hub-signing-key, and in the join
	// string. "" when the hub does not say.
	signingKey string
	// note says why url is a guess; printed (on stderr) only with the
	// token, so a failing command does not add it to its error.
	note string
}

// brokerInfo asks the hub which MQTT URLs devices use: given, if any
// (--broker, checked by checkBrokerFlag), else every broker the hub
// knows of (GET /v1/info mqttURL, then its brokers). A hub that cannot
// say (an older hub, a failed request) does not fail the command: the
// usual URL is assumed, with a note on stderr.
func (c *cliContext) brokerInfo(ctx context.Context, cl *client.Client, given []string) brokerInfo {
	info, err := cl.Info(ctx)
	u, guessed := cl.BrokerURL(info)
	b := brokerInfo{url: u, urls: []string{u}, external: info != nil && info.ExternalBroker}
	switch {
	case len(given) > 0:
		b.url, b.urls, guessed = given[0], given, false
	case info != nil && len(info.Brokers) > 0:
		for _, h := range info.Brokers {
			fixed, _ := cl.BrokerURL(&schema.HubInfo{MQTTURL: h})
			b.urls = appendBrokers(b.urls, fixed)
		}
	}
	if info != nil && b.anyTLS() {
		b.caHash = info.CAHash
	}
	if info != nil {
		b.signingKey = info.SigningKey
	}
	if guessed {
		why := "it reports none"
		if err != nil {
			why = "GET /v1/info: " + err.Error()
		}
		b.note = fmt.Sprintf("note: the hub did not say which MQTT URL devices use (%s); assuming %s", why, u)
	}
	return b
}

// anyTLS reports whether a broker of the list is a TLS one.
func (b brokerInfo) anyTLS() bool {
	return slices.ContainsFunc(b.urls, client.IsTLSBrokerURL)
}

// brokerArg is the agent's --broker: every broker, comma-separated.
func (b brokerInfo) brokerArg() string {
	if len(b.urls) == 0 {
		return b.url
	}
	return strings.Join(b.urls, ",")
}

// appendBrokers appends the URLs that name a broker not in list yet.
func appendBrokers(list []string, urls ...string) []string {
	key := func(s string) string {
		u, err := schema.ParseBrokerURL(s)
		if err != nil {
			return s
		}
		return u.Scheme + "://" + strings.ToLower(u.Host)
	}
	for _, u := range urls {
		if !slices.ContainsFunc(list, func(have string) bool { return key(have) == key(u) }) {
			list = append(list, u)
		}
	}
	return list
}

// addBrokerFlag adds --broker, the brokers a device is given.
func addBrokerFlag(cmd *cobra.Command, brokers *[]string) {
	cmd.Flags().StringSliceVar(brokers, "broker", nil, "broker URL a device is given (repeatable, or comma-separated; the preferred first): the agent connects to the first that accepts it and moves to the next when one is lost or refuses it. Default: every broker the hub knows of (GET /v1/info mqttURL and brokers)")
}

// checkBrokerFlag checks --broker's URLs as the agent will: an error
// names the entry's position.
func checkBrokerFlag(brokers []string) error {
	if len(brokers) == 0 {
		return nil
	}
	if _, err := schema.CheckBrokerList(brokers); err != nil {
		return fmt.Errorf("--broker: %w", err)
	}
	return nil
}

// trustFlags is what the agent's command line needs to trust the hub:
// --ca-hash of the hub's own CA (a TLS broker), and --hub-signing-key,
// without which the agent runs no desired state.
func (b brokerInfo) trustFlags() string {
	s := ""
	if b.caHash != "" {
		s += " --ca-hash " + b.caHash
	}
	if b.signingKey != "" {
		s += " --hub-signing-key " + b.signingKey
	}
	return s
}

// joinString is the join string of a device (or, with bootstrap set,
// of a bootstrap token); ok is false when there is none: an older hub
// that does not report its signing key (GET /v1/info signingKey), or a
// broker URL the hub reported that is not one an agent takes.
func (b brokerInfo) joinString(device, token, bootstrap string) (join string, ok bool) {
	if b.signingKey == "" {
		return "", false
	}
	join, err := schema.EncodeJoin(schema.JoinInfo{
		Brokers: b.urls, CAHash: b.caHash, SigningKey: b.signingKey,
		Device: device, Token: token, BootstrapToken: bootstrap,
	})
	return join, err == nil
}

// writeJoin prints the join string and the command lines that use it;
// extra is appended to the agent's command line.
func writeJoin(s *strings.Builder, join, extra string) {
	fmt.Fprintln(s, "Join string (holds the token, shown once; with it the agent pins the hub's CA and signing key before it reads any desired state):")
	fmt.Fprintf(s, "  %s\n", join)
	fmt.Fprintln(s, "Start the agent with it (or write it to a file, mode 0600, and pass --join @FILE):")
	fmt.Fprintf(s, "  fleet-agent --join %s%s\n", join, extra)
	fmt.Fprintln(s, "Or install the agent on a Raspberry Pi (arm/install.sh):")
	fmt.Fprintf(s, "  sudo ./install.sh --join %s%s\n", join, extra)
}

// writeTrustNote says how else a device can trust a TLS broker.
func writeTrustNote(s *strings.Builder, b brokerInfo) {
	switch {
	case !b.anyTLS():
	case b.caHash != "":
		fmt.Fprintf(s, "  (--ca-hash pins the hub's CA, %s: the device verifies the hub by it on first contact and keeps the CA; or copy the hub's ca.crt to the device and give --ca-file FILE instead)\n", b.caHash)
	default:
		fmt.Fprintln(s, "  (add --ca-file FILE if the broker's certificate is not signed by a CA the device trusts)")
	}
}

// printNote writes the broker note, if any, to stderr.
func (c *cliContext) printNote(b brokerInfo) {
	if b.note != "" {
		fmt.Fprintln(c.stderr(), b.note)
	}
}

// writeDeviceToken prints a device's new token once, with the agent's
// command line.
func writeDeviceToken(w io.Writer, b brokerInfo, creds *schema.DeviceCredentials, lead string) error {
	var s strings.Builder
	fmt.Fprintln(&s, printers.TokenBanner(creds.Token))
	fmt.Fprintln(&s, lead)
	fmt.Fprintf(&s, "  %s%s   (write the token there, mode 0600)\n", printers.AgentCommand(b.brokerArg(), creds.Name), b.trustFlags())
	writeTrustNote(&s, b)
	if join, ok := b.joinString(creds.Name, creds.Token, ""); ok {
		writeJoin(&s, join, "")
	}
	writeExternalNote(&s, b)
	_, err := io.WriteString(w, s.String())
	return err
}

func writeExternalNote(w io.Writer, b brokerInfo) {
	if b.external {
		fmt.Fprintln(w, "The hub uses an external MQTT broker: the token works there once its password file is refreshed from the hub (GET /v1/mosquitto/passwd).")
	}
}

// ---- label -------------------------------------------------------------------

func newDeviceLabelCmd(cli *cliContext) *cobra.Command {
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "label NAME key=value... [key-...] [--overwrite]",
		Short: "Set or remove labels of a device",
		Long: `Set or remove labels of a device, the way kubectl label does: key=value sets a
label, key- removes one. Giving an existing label a different value needs
--overwrite. Labels under fleet/ (fleet/device, fleet/arch) belong to the hub
and cannot be changed.

The device is read and written back with the resourceVersion it was read at,
so a concurrent change is never lost: on a conflict the labels are applied
again to the fresh device. Deployments whose selectors start or stop matching
the device are added to or removed from it.`,
		Example: `  # Put pi-1 in the lab
  fleet device label pi-1 site=lab

  # Move it, and remove the temp label
  fleet device label pi-1 site=garage temp- --overwrite`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.completeDevices(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDeviceLabel(cmd.Context(), cli, args[0], args[1:], overwrite)
		},
	}
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "allow changing the value of labels the device already has")
	return cmd
}

func runDeviceLabel(ctx context.Context, cli *cliContext, name string, args []string, overwrite bool) error {
	if err := schema.ValidateName(name); err != nil {
		return fmt.Errorf("device name %w", err)
	}
	edit, err := client.ParseLabelEdit(args)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var absent []string
	_, written, err := cl.ModifyDevice(ctx, name, func(d *schema.Device) (bool, error) {
		res, err := edit.Apply(d.Metadata.Labels, overwrite)
		if err != nil {
			return false, err
		}
		d.Metadata.Labels, absent = res.Labels, res.Absent
		return res.Changed, nil
	})
	var exists *client.LabelExistsError
	if errors.As(err, &exists) {
		return &hintError{err: err, hint: "Pass --overwrite to change the values of existing labels."}
	}
	if err != nil {
		return err
	}
	for _, k := range absent {
		fmt.Fprintf(cli.stderr(), "label %q not found.\n", k)
	}
	if !written {
		fmt.Fprintf(cli.stdout(), "device/%s not labeled\n", name)
		return nil
	}
	fmt.Fprintf(cli.stdout(), "device/%s labeled\n", name)
	return nil
}

// ---- rotate-token ------------------------------------------------------------

func newDeviceRotateTokenCmd(cli *cliContext) *cobra.Command {
	var (
		output  string
		brokers []string
	)
	cmd := &cobra.Command{
		Use:   "rotate-token NAME [-o json|yaml]",
		Short: "Issue a new token for a device; the old one stops working",
		Long: `Issue a new MQTT token for a device and show it once. The old token stops
working at once: the hub disconnects the MQTT sessions that use it, so the
device is offline until its agent runs with the new token.

Use it when a token is lost or leaked, or when "fleet device add" could not
issue one.

-o json prints only {"name":...,"token":...} (-o yaml the same in YAML).`,
		Example: `  fleet device rotate-token pi-1

  # Rotate and install the new token over SSH in one go
  fleet device rotate-token pi-1 -o json | jq -r .token | ssh pi-1 'sudo install -m 0600 /dev/stdin /etc/fleet/token && sudo systemctl restart fleet-agent'`,
		Args:              exactArgs(1, "NAME"),
		ValidArgsFunction: cli.completeDevices(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDeviceRotateToken(cmd.Context(), cli, cmd, args[0], output, brokers)
		},
	}
	addSecretOutputFlag(cmd, &output)
	addBrokerFlag(cmd, &brokers)
	return cmd
}

// deviceCommand checks what a command on one device's credentials was
// given (its -o, the device name) and returns the output format and a
// client of the hub.
func deviceCommand(cli *cliContext, cmd *cobra.Command, name, output string) (printers.Format, *client.Client, error) {
	format, err := parseSecretOutput(cmd, output)
	if err != nil {
		return "", nil, err
	}
	if err := schema.ValidateName(name); err != nil {
		return "", nil, fmt.Errorf("device name %w", err)
	}
	cl, err := cli.Client()
	return format, cl, err
}

func runDeviceRotateToken(ctx context.Context, cli *cliContext, cmd *cobra.Command, name, output string, brokers []string) error {
	format, cl, err := deviceCommand(cli, cmd, name, output)
	if err != nil {
		return err
	}
	if err := checkBrokerFlag(brokers); err != nil {
		return err
	}
	var broker brokerInfo
	if format == "" {
		broker = cli.brokerInfo(ctx, cl, brokers)
	}
	creds, err := cl.IssueToken(ctx, name)
	if err == nil && creds.Token == "" {
		err = errors.New("the hub answered without a token")
	}
	if err != nil {
		return err
	}
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, creds)
	}
	cli.printNote(broker)
	fmt.Fprintf(cli.stdout(), "device/%s token rotated: the old token stopped working and its MQTT sessions were disconnected\n", name)
	return writeDeviceToken(cli.stdout(), broker, creds, "Restart the agent on the device with the new token:")
}

// ---- delete ------------------------------------------------------------------

func newDeviceDeleteCmd(cli *cliContext) *cobra.Command {
	var ignoreNotFound bool
	cmd := &cobra.Command{
		Use:   "delete NAME... [--ignore-not-found]",
		Short: "Delete devices and revoke their tokens",
		Long: `Delete devices. The hub clears each one's desired state and deletes its token
and its last reported status: its agent is no longer managed and can no
longer connect. The containers already running on it are left alone.

Deleting a device that does not exist is an error unless --ignore-not-found;
the other devices are deleted anyway.`,
		Example: `  fleet device delete pi-1
  fleet device delete pi-1 pi-2 --ignore-not-found`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDeviceDelete(cmd.Context(), cli, args, ignoreNotFound)
		},
	}
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "treat a device that does not exist as deleted")
	return cmd
}

func runDeviceDelete(ctx context.Context, cli *cliContext, names []string, ignoreNotFound bool) error {
	for _, n := range names {
		if err := schema.ValidateName(n); err != nil {
			return fmt.Errorf("device name %w", err)
		}
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		_, err := cl.DeleteDevice(ctx, n, client.DeleteOptions{})
		switch {
		case err == nil:
			fmt.Fprintf(cli.stdout(), "device/%s deleted\n", n)
		case client.IsNotFound(err) && ignoreNotFound:
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ---- list --------------------------------------------------------------------

func newDeviceListCmd(cli *cliContext) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:     "list [NAME...] [-l SELECTOR] [-o FORMAT] [--sort-by PATH] [-w]",
		Aliases: []string{"ls"},
		Short:   "List devices (the same as fleet get devices)",
		Long: `List devices, exactly as "fleet get devices" does: NAME, ONLINE, LAST-SEEN,
GENERATION (observed/desired), PODS (ready/total), CONVERGED and AGE; -o wide
adds LABELS, ARCH and AGENT. It takes the same -l selectors, -o formats
(jsonpath, custom-columns too) and --sort-by: see fleet get --help.`,
		Example: `  fleet device list
  fleet device ls -l site=lab -o wide
  fleet device ls -l 'site in (lab,shop),!gpu' --sort-by=.status.lastSeen
  fleet device list -o custom-columns=NAME:.metadata.name,ARCH:.status.agent.arch
  fleet device list -w`,
		ValidArgsFunction: cli.completeDevices(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGet(cmd.Context(), cli, append([]string{string(client.Devices)}, args...), o)
		},
	}
	addGetFlags(cmd, &o, "only devices")
	return cmd
}
