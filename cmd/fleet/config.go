package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
)

func newConfigCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage contexts: the hubs fleet talks to and their tokens",
		Long: `Manage the contexts of the config file, one per hub, the way kubectl config
manages kubeconfig contexts.

A context names a hub and the token to use with it. The config file's
current-context is the one commands use unless --context (or FLEET_CONTEXT)
picks another for one command; --hub/--token and FLEET_HUB/FLEET_TOKEN still
override both (see fleet --help for the whole order).

The config file is --config, else FLEET_CONFIG, else ~/.config/fleet/config
($XDG_CONFIG_HOME/fleet/config when that is set). fleet writes it atomically
with mode 0600, since it holds tokens, and keeps every other context and any
key it does not know. A file in the flat form of admin.conf (hub and token)
keeps working: its hub and token are used when no context is selected.`,
		Example: `  # Add the hub started in this directory, and another site's
  fleet config import lab --from ./fleet-data/admin.conf
  fleet config set-context site-b --hub https://hub.site-b.example:8080 --token-file ./site-b.token

  # Switch, list, or use one for a single command
  fleet config use-context site-b
  fleet config get-contexts
  fleet --context lab get devices

  # The whole file, tokens redacted
  fleet config view`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroupHelp,
	}
	cmd.AddCommand(
		newConfigGetContextsCmd(cli),
		newConfigCurrentContextCmd(cli),
		newConfigUseContextCmd(cli),
		newConfigSetContextCmd(cli),
		newConfigImportCmd(cli),
		newConfigDeleteContextCmd(cli),
		newConfigViewCmd(cli),
	)
	return cmd
}

// configPath is the user's config file, the one these commands read and
// write.
func (c *cliContext) configPath() (string, error) {
	p, _, err := client.UserConfigPath(c.configSources())
	return p, err
}

// readConfig reads the user's config file; one that does not exist yet is
// empty.
func (c *cliContext) readConfig() (*client.ConfigFile, error) {
	p, err := c.configPath()
	if err != nil {
		return nil, err
	}
	return client.ReadOrNewConfigFile(p)
}

// completeContexts completes the names of the config file's contexts.
func (c *cliContext) completeContexts(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	f, err := c.readConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return f.ContextNames(), cobra.ShellCompDirectiveNoFileComp
}

// completeOneContext completes a single context argument.
func (c *cliContext) completeOneContext(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.completeContexts(cmd, args, toComplete)
}

// ---- get-contexts --------------------------------------------------------------

type configGetContextsOptions struct {
	output    string
	noHeaders bool
}

func newConfigGetContextsCmd(cli *cliContext) *cobra.Command {
	var o configGetContextsOptions
	cmd := &cobra.Command{
		Use:   "get-contexts [NAME...] [-o name|json|yaml]",
		Short: "List the contexts of the config file",
		Long: `List the contexts of the config file: CURRENT (a * marks the
current-context), NAME and HUB. With NAMEs, only those.

-o name prints the names only; -o json and -o yaml print the current-context
and the contexts, with their tokens redacted.`,
		Example: `  fleet config get-contexts
  fleet config get-contexts -o name
  fleet config get-contexts site-a -o yaml`,
		ValidArgsFunction: cli.completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConfigGetContexts(cli, args, o)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: table (default), name, json or yaml")
	must(cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "name", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp)))
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "leave out the header line of the table")
	return cmd
}

func runConfigGetContexts(cli *cliContext, names []string, o configGetContextsOptions) error {
	format := printers.Format(o.output)
	switch format {
	case "":
		format = printers.Table
	case printers.Table, printers.Name, printers.JSON, printers.YAML:
	default:
		return fmt.Errorf("unknown output format %q: want one of table, name, json, yaml", o.output)
	}
	f, err := cli.readConfig()
	if err != nil {
		return err
	}
	contexts := f.Contexts
	if len(names) > 0 {
		contexts = nil
		var errs []error
		for _, n := range names {
			if c, ok := f.Context(n); ok {
				contexts = append(contexts, c)
			} else {
				errs = append(errs, f.NotFound(n, ""))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	out := cli.stdout()
	switch format {
	case printers.Name:
		for _, c := range contexts {
			fmt.Fprintln(out, c.Name)
		}
		return nil
	case printers.JSON, printers.YAML:
		view := &client.ConfigFile{CurrentContext: f.CurrentContext, Contexts: contexts}
		if format == printers.JSON {
			return printers.WriteJSON(out, view.Redacted())
		}
		return printers.WriteYAML(out, view.Redacted())
	}
	if len(contexts) == 0 {
		fmt.Fprintf(cli.stderr(), "No contexts in %s: add one with \"fleet config set-context\" or \"fleet config import\".\n", f.Path)
		return nil
	}
	rows := make([][]string, len(contexts))
	for i, c := range contexts {
		cur := ""
		if c.Name == f.CurrentContext {
			cur = "*"
		}
		rows[i] = []string{cur, c.Name, orNone(c.Hub)}
	}
	var headers []string
	if !o.noHeaders {
		headers = []string{"CURRENT", "NAME", "HUB"}
	}
	return printers.WriteTable(out, headers, rows)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// ---- current-context -----------------------------------------------------------

func newConfigCurrentContextCmd(cli *cliContext) *cobra.Command {
	return &cobra.Command{
		Use:   "current-context",
		Short: "Print the name of the current context",
		Long: `Print the config file's current-context: the context commands use when
neither --context nor FLEET_CONTEXT picks one. It fails when none is set.`,
		Example: `  fleet config current-context`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			f, err := cli.readConfig()
			if err != nil {
				return err
			}
			if f.CurrentContext == "" {
				return fmt.Errorf("current-context is not set in %s: choose one with \"fleet config use-context NAME\"", f.Path)
			}
			_, err = fmt.Fprintln(cli.stdout(), f.CurrentContext)
			return err
		},
	}
}

// ---- use-context ---------------------------------------------------------------

func newConfigUseContextCmd(cli *cliContext) *cobra.Command {
	return &cobra.Command{
		Use:     "use-context NAME",
		Aliases: []string{"use"},
		Short:   "Make a context the current one",
		Long: `Set the config file's current-context: the following commands talk to that
context's hub, unless --context, FLEET_CONTEXT, --hub/--token or
FLEET_HUB/FLEET_TOKEN say otherwise.`,
		Example: `  fleet config use-context site-b
  fleet get devices`,
		Args:              exactArgs(1, "the name of a context"),
		ValidArgsFunction: cli.completeOneContext,
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := cli.readConfig()
			if err != nil {
				return err
			}
			if err := f.UseContext(args[0]); err != nil {
				return err
			}
			if err := f.Write(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cli.stdout(), "Switched to context %q.\n", args[0])
			return err
		},
	}
}

// ---- set-context ---------------------------------------------------------------

type configSetContextOptions struct {
	hub, token, tokenFile, caFile string
}

func newConfigSetContextCmd(cli *cliContext) *cobra.Command {
	var o configSetContextOptions
	cmd := &cobra.Command{
		Use:   "set-context NAME [--hub URL] [--token-file FILE | --token TOKEN]",
		Short: "Create a context, or change its hub or token",
		Long: `Create a context, or change the hub or token of an existing one; what is not
given is kept. A new context needs --hub.

--token-file reads the token from a file ("-" for standard input), so that
it shows neither in the process list nor in the shell's history; --token is
there for scripts that have it in a variable. The config file is written
with mode 0600.

--certificate-authority pins the hub's CA (its <data-dir>/ca.crt): fleet then
accepts an https:// hub only if its certificate chains to that CA, and
refuses any other. It is stored in the context as
certificate-authority-data.

set-context does not switch to the context: use "fleet config use-context".`,
		Example: `  # A hub, and its token in a file (copied from the token line of its admin.conf)
  fleet config set-context site-b --hub https://hub.site-b.example:8080 --token-file ./site-b.token

  # The token from a password manager, through standard input
  pass show fleet/site-b | fleet config set-context site-b --token-file -

  # The hub moved
  fleet config set-context site-b --hub https://hub2.site-b.example:8080

  # Pin the hub's CA (copied from the hub's data directory)
  fleet config set-context site-b --certificate-authority ./site-b-ca.crt`,
		Args:              exactArgs(1, "the name of a context"),
		ValidArgsFunction: cli.completeOneContext,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConfigSetContext(cli, args[0], o)
		},
	}
	// These shadow the global --hub and --token: here they are the values
	// to store, not the hub to talk to.
	f := cmd.Flags()
	f.StringVar(&o.hub, "hub", "", "the hub's API address, e.g. https://hub.example:8080")
	f.StringVar(&o.token, "token", "", "the token (visible to other users in the process list: prefer --token-file)")
	f.StringVar(&o.tokenFile, "token-file", "", `read the token from this file ("-": standard input)`)
	f.StringVar(&o.caFile, "certificate-authority", "", "PEM file of the hub's CA (its ca.crt): the hub's certificate must chain to it")
	cmd.MarkFlagsMutuallyExclusive("token", "token-file")
	must(cmd.MarkFlagFilename("token-file"))
	must(cmd.MarkFlagFilename("certificate-authority"))
	return cmd
}

func runConfigSetContext(cli *cliContext, name string, o configSetContextOptions) error {
	if err := client.ValidateContextName(name); err != nil {
		return err
	}
	hub := strings.TrimSpace(o.hub)
	if hub != "" {
		if _, err := client.ParseHubURL(hub); err != nil {
			return fmt.Errorf("--hub: %w", err)
		}
	}
	token := strings.TrimSpace(o.token)
	if o.tokenFile != "" {
		var err error
		if token, err = readTokenFile(cli.io.in, o.tokenFile); err != nil {
			return err
		}
	}
	var ca []byte
	if o.caFile != "" {
		var err error
		if ca, err = os.ReadFile(o.caFile); err != nil {
			return fmt.Errorf("--certificate-authority: %w", err)
		}
		if _, err := client.CertPool(ca); err != nil {
			return fmt.Errorf("--certificate-authority %s: %w", o.caFile, err)
		}
	}
	f, err := cli.readConfig()
	if err != nil {
		return err
	}
	c, exists := f.Context(name)
	switch {
	case !exists && hub == "":
		return fmt.Errorf("context %q is new: give its hub with --hub (and its token with --token-file)", name)
	case exists && hub == "" && token == "" && ca == nil:
		return fmt.Errorf("context %q: nothing to change: give --hub, --token-file, --token or --certificate-authority", name)
	}
	c.Name = name
	if hub != "" {
		c.Hub = hub
	}
	if token != "" {
		c.Token = token
	}
	if ca != nil {
		c.CA = ca
	}
	return writeContext(cli, f, c, "")
}

// writeContext stores c in f, writes f and says what it did.
func writeContext(cli *cliContext, f *client.ConfigFile, c client.Context, from string) error {
	verb := "modified"
	if f.SetContext(c) {
		verb = "created"
	}
	if err := f.Write(); err != nil {
		return err
	}
	if from != "" {
		from = " from " + from
	}
	_, err := fmt.Fprintf(cli.stdout(), "Context %q %s%s.\n", c.Name, verb, from)
	return err
}

// readTokenFile reads a token from a file, or from in for "-".
func readTokenFile(in io.Reader, path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(in, 64<<10))
		path = "standard input"
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("read token: %s is empty", path)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("read token: %s holds more than one word; it should hold only the token", path)
	}
	return tok, nil
}

// ---- import --------------------------------------------------------------------

type configImportOptions struct {
	from, hub string
}

func newConfigImportCmd(cli *cliContext) *cobra.Command {
	var o configImportOptions
	cmd := &cobra.Command{
		Use:   "import NAME [--from FILE] [--hub URL]",
		Short: "Add a hub's admin.conf as a context",
		Long: `Create (or update) a context with the hub and token of a config file in the
flat form fleet-hub writes to <data-dir>/admin.conf; by default
./fleet-data/admin.conf, the one of a hub started in this directory.

--hub replaces the file's hub address, for an admin.conf copied from another
host that names the hub by a loopback address.`,
		Example: `  # The hub running here
  fleet config import lab

  # A site's admin.conf, copied over, with the address this host reaches it at
  scp root@hub.site-b:/var/lib/fleet/admin.conf ./site-b.conf
  fleet config import site-b --from ./site-b.conf --hub https://hub.site-b.example:8080
  rm ./site-b.conf`,
		Args:              exactArgs(1, "the name of the new context"),
		ValidArgsFunction: cli.completeOneContext,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConfigImport(cli, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "the config file to import (default ./fleet-data/admin.conf)")
	f.StringVar(&o.hub, "hub", "", "use this hub address instead of the file's")
	must(cmd.MarkFlagFilename("from"))
	return cmd
}

func runConfigImport(cli *cliContext, name string, o configImportOptions) error {
	if err := client.ValidateContextName(name); err != nil {
		return err
	}
	from := o.from
	if from == "" {
		from = filepath.Join(cli.io.workDir, client.DataDirConfig)
	}
	src, err := client.LoadConfigFile(from)
	if err != nil {
		return err
	}
	hub := strings.TrimSpace(o.hub)
	if hub == "" {
		hub = src.Hub
	}
	switch {
	case hub == "":
		return fmt.Errorf("%s names no hub: give its address with --hub", from)
	case src.Token == "":
		return fmt.Errorf("%s has no token", from)
	}
	if _, err := client.ParseHubURL(hub); err != nil {
		return fmt.Errorf("hub of %s: %w", from, err)
	}
	f, err := cli.readConfig()
	if err != nil {
		return err
	}
	if abs, err := filepath.Abs(from); err == nil && f.Path != "" {
		if p, err := filepath.Abs(f.Path); err == nil && p == abs {
			return fmt.Errorf("%s is the config file itself: import from another file", from)
		}
	}
	c, _ := f.Context(name)
	c.Name, c.Hub, c.Token = name, hub, src.Token
	if src.CA != nil {
		c.CA = src.CA // the hub's CA, which admin.conf carries
	}
	return writeContext(cli, f, c, from)
}

// ---- delete-context ------------------------------------------------------------

func newConfigDeleteContextCmd(cli *cliContext) *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Remove a context from the config file",
		Long: `Remove a context, and its token, from the config file. When it was the
current context, the file is left without one: choose another with
"fleet config use-context".`,
		Example:           `  fleet config delete-context old-site`,
		Args:              exactArgs(1, "the name of a context"),
		ValidArgsFunction: cli.completeOneContext,
		RunE: func(_ *cobra.Command, args []string) error {
			f, err := cli.readConfig()
			if err != nil {
				return err
			}
			wasCurrent, err := f.DeleteContext(args[0])
			if err != nil {
				return err
			}
			if err := f.Write(); err != nil {
				return err
			}
			if wasCurrent {
				fmt.Fprintf(cli.stderr(), "warning: this removed the current context; choose another with \"fleet config use-context NAME\"\n")
			}
			_, err = fmt.Fprintf(cli.stdout(), "Deleted context %q from %s.\n", args[0], f.Path)
			return err
		},
	}
}

// ---- view ----------------------------------------------------------------------

type configViewOptions struct {
	output string
	raw    bool
}

func newConfigViewCmd(cli *cliContext) *cobra.Command {
	var o configViewOptions
	cmd := &cobra.Command{
		Use:   "view [-o yaml|json] [--raw]",
		Short: "Print the config file, tokens redacted",
		Long: `Print the config file as fleet reads it, with every token (and any other
secret-looking key) shown as REDACTED; --raw shows them.`,
		Example: `  fleet config view
  fleet config view -o json | jq -r '.contexts[].name'

  # Whose config is it? The file commands read
  fleet --config ./other.conf config view`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			if o.output != "yaml" && o.output != "json" {
				return fmt.Errorf("unknown output format %q: want yaml or json", o.output)
			}
			f, err := cli.readConfig()
			if err != nil {
				return err
			}
			if !o.raw {
				f = f.Redacted()
			}
			if o.output == "json" {
				return printers.WriteJSON(cli.stdout(), f)
			}
			b, err := f.Marshal()
			if err != nil {
				return err
			}
			_, err = cli.stdout().Write(b)
			return err
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "yaml", "output format: yaml or json")
	must(cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"yaml", "json"}, cobra.ShellCompDirectiveNoFileComp)))
	cmd.Flags().BoolVar(&o.raw, "raw", false, "show the tokens")
	return cmd
}
