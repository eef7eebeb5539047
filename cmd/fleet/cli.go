package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/selector"
)

// defaultTimeout bounds each request to the hub unless --timeout says
// otherwise. Watches are not bounded.
const defaultTimeout = 30 * time.Second

// cliContext is what every command shares: the process environment, the
// global flags and, once resolved, the hub client. Commands added later
// (fleet device …, fleet monitor) take one too.
type cliContext struct {
	io stdio

	// Global flags.
	hub, token, configFile, contextName string
	timeout                             time.Duration

	config client.Config
	client *client.Client
}

func newCLIContext(io stdio) *cliContext {
	return &cliContext{io: io}
}

func (c *cliContext) stdout() io.Writer { return c.io.out }
func (c *cliContext) stderr() io.Writer { return c.io.err }

func (c *cliContext) now() time.Time {
	if c.io.now != nil {
		return c.io.now()
	}
	return time.Now()
}

// Client resolves the hub and token (flags, environment, config files; see
// client.ResolveConfig) and returns a client of that hub. Each call of the
// client is bounded by --timeout, except the watches of Follow, so a
// command makes its requests with its own context and no boilerplate.
func (c *cliContext) Client() (*client.Client, error) {
	if c.client != nil {
		return c.client, nil
	}
	cfg, err := client.ResolveConfig(c.configSources())
	if err != nil {
		return nil, err
	}
	cl, err := cfg.Client(client.WithUserAgent("fleet/"+version()), client.WithTimeout(c.timeout))
	if err != nil {
		return nil, err
	}
	c.config, c.client = cfg, cl
	return cl, nil
}

// configSources are the global flags and the environment that say which
// hub to use and where the user's config file is.
func (c *cliContext) configSources() client.ConfigSources {
	return client.ConfigSources{
		Hub:        c.hub,
		Token:      c.token,
		ConfigFile: c.configFile,
		Context:    c.contextName,
		Getenv:     c.io.getenv,
		WorkDir:    c.io.workDir,
		HomeDir:    c.io.getenv("HOME"),
	}
}

// requestContext bounds several requests together by one --timeout (each
// call of the client is bounded by it anyway: see Client).
func (c *cliContext) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// explain adds advice to errors a user can act on: an unreachable hub, a
// refused token.
func (c *cliContext) explain(err error) error {
	if err == nil || c.client == nil {
		return err
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return err
	}
	var hint string
	var ne net.Error
	switch {
	case client.IsUnauthorized(err):
		hint = fmt.Sprintf("The hub %s refused the token (from %s): check --token or %s, or use the admin.conf that fleet-hub wrote in its data directory.", c.config.Hub, c.config.TokenSource, client.EnvToken)
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = fmt.Sprintf("Is fleet-hub running? Nothing answers at %s (from %s).", c.config.Hub, c.config.HubSource)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		hint = fmt.Sprintf("The hub %s did not answer within --timeout=%s.", c.config.Hub, c.timeout)
	default:
		return err
	}
	if ee != nil {
		return &exitError{code: ee.code, err: &hintError{err: ee.err, hint: hint}}
	}
	return &hintError{err: err, hint: hint}
}

// printer returns a printer of the -o format to stdout. The template
// formats (-o jsonpath, custom-columns) are fleet get's: see getPrinter.
func (c *cliContext) printer(output string, noHeaders bool) (*printers.Printer, error) {
	f, tmpl, err := printers.ParseOutput(output)
	if err != nil {
		return nil, err
	}
	if tmpl != "" {
		return nil, fmt.Errorf("-o %s is supported by fleet get only: use -o json or -o yaml and a tool such as jq", f)
	}
	return &printers.Printer{Out: c.stdout(), Format: f, NoHeaders: noHeaders, Now: c.now}, nil
}

// getPrinter is printer with what fleet get adds: -o jsonpath=TEMPLATE,
// jsonpath-file=FILE, custom-columns=SPEC and --sort-by, all checked
// before any request.
func (c *cliContext) getPrinter(output, sortBy string, noHeaders bool) (*printers.Printer, error) {
	f, tmpl, err := printers.ParseOutput(output)
	if err != nil {
		return nil, err
	}
	if f == printers.JSONPathFile {
		b, err := os.ReadFile(tmpl)
		if err != nil {
			return nil, fmt.Errorf("-o jsonpath-file: %w", err)
		}
		f, tmpl = printers.JSONPath, string(b)
	}
	p := &printers.Printer{Out: c.stdout(), Format: f, Template: tmpl, SortBy: sortBy, NoHeaders: noHeaders, Now: c.now}
	if err := p.Compile(); err != nil {
		return nil, err
	}
	return p, nil
}

// resourceKinds maps every accepted spelling of a resource kind: the
// names and aliases of each stored kind of schema's table.
var resourceKinds = spellings()

func spellings() map[string]client.Kind {
	m := map[string]client.Kind{}
	for _, k := range schema.ListedKinds() {
		for _, n := range slices.Concat(k.Names(), k.Aliases) {
			m[n] = client.Kind(k.Resource)
		}
	}
	return m
}

// validKinds lists the resource kinds for errors: "deployments
// (deployment, deploy), devices (device, dev), ... and secrets (secret)".
var validKinds = listKinds(schema.ListedKinds())

// listKinds names kinds by their names, "plural (singular, short...)",
// joined as a sentence does.
func listKinds(kinds []schema.KindInfo) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		names := k.Names()
		parts[i] = fmt.Sprintf("%s (%s)", names[0], strings.Join(names[1:], ", "))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// parseKind parses a resource kind as typed on the command line.
func parseKind(s string) (client.Kind, error) {
	if k, ok := resourceKinds[strings.ToLower(s)]; ok {
		return k, nil
	}
	return "", fmt.Errorf("unknown resource type %q: valid types are %s", s, validKinds)
}

// singular is the lower-case object kind of a collection: "deployment".
func singular(k client.Kind) string {
	info, _ := schema.KindOfResource(string(k))
	return info.Singular
}

// ref names one object on the command line.
type ref struct {
	kind client.Kind
	name string
}

func (r ref) String() string { return singular(r.kind) + "/" + r.name }

// parseRefs reads "KIND [NAME...]" (kind set) or "KIND/NAME..." (kind
// empty) arguments.
func parseRefs(args []string) (kind client.Kind, refs []ref, err error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("you must specify the type of resource: valid types are %s", validKinds)
	}
	if !strings.Contains(args[0], "/") {
		if kind, err = parseKind(args[0]); err != nil {
			return "", nil, err
		}
		for _, name := range args[1:] {
			if strings.Contains(name, "/") {
				return "", nil, fmt.Errorf("there is no need to name the resource type in %q: it is %s", name, kind)
			}
			if err := schema.ValidateName(name); err != nil {
				return "", nil, fmt.Errorf("name %w", err)
			}
			refs = append(refs, ref{kind, name})
		}
		return kind, refs, nil
	}
	for _, a := range args {
		ks, name, ok := strings.Cut(a, "/")
		if !ok {
			return "", nil, fmt.Errorf("%q: use KIND/NAME for every argument, or KIND NAME...", a)
		}
		k, err := parseKind(ks)
		if err != nil {
			return "", nil, err
		}
		if err := schema.ValidateName(name); err != nil {
			return "", nil, fmt.Errorf("%s: name %w", a, err)
		}
		refs = append(refs, ref{k, name})
	}
	return "", refs, nil
}

// checkSelector checks a label selector (-l) with the parser the hub
// uses, so a typo is reported before any request, in kubectl's words.
func checkSelector(sel string) error {
	if _, err := selector.Parse(sel); err != nil {
		return fmt.Errorf("invalid label selector %q: %w", sel, err)
	}
	return nil
}

// normSelector returns a label selector as it is sent to the hub. The hub
// parses the whole syntax (k==v included), so it is the selector as given.
func normSelector(sel string) string { return strings.TrimSpace(sel) }

// selectorUsage is the help of a -l flag: what it selects, then the
// syntax.
func selectorUsage(what string) string {
	return what + " matching this label selector: key=value, key!=value, 'key in (a,b)', 'key notin (a,b)', key (has the label), !key (has not); comma-joined, all must hold"
}

// completeKinds completes a resource kind.
func completeKinds(toComplete string) []string {
	var out []string
	for _, k := range client.Kinds {
		k := string(k)
		if strings.HasPrefix(k, toComplete) {
			out = append(out, k)
		}
	}
	return out
}

// completeResources completes "KIND NAME..." arguments: the kind first,
// then names of existing objects (a quick list; nothing when the hub is not
// reachable).
func (c *cliContext) completeResources(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return completeKinds(toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	kind, err := parseKind(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, err := c.Client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	objs, _, err := cl.List(ctx, kind, "")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, o := range objs {
		n := o.GetMetadata().Name
		if strings.HasPrefix(n, toComplete) && !slices.Contains(args[1:], n) {
			names = append(names, n)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// addOutputFlag adds -o with completion of the formats.
func addOutputFlag(cmd *cobra.Command, p *string, def, usage string) {
	addOutputFlagOf(cmd, p, def, usage, false)
}

// addOutputFlagOf adds -o; with templates, its completion offers the
// template formats too (jsonpath=, custom-columns=).
func addOutputFlagOf(cmd *cobra.Command, p *string, def, usage string, templates bool) {
	cmd.Flags().StringVarP(p, "output", "o", def, usage)
	must(cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, f := range printers.Formats {
			out = append(out, string(f))
		}
		if !templates {
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		for _, f := range printers.TemplateFormats {
			out = append(out, string(f)+"=")
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}))
}

// addFilenameFlag adds the repeatable -f flag.
func addFilenameFlag(cmd *cobra.Command, p *[]string, usage string) {
	cmd.Flags().StringArrayVarP(p, "filename", "f", nil, usage)
	must(cmd.MarkFlagFilename("filename", "yaml", "yml", "json"))
}

// must panics on an error that can only be a mistake in this program (a
// flag registered under a name that does not exist).
func must(err error) {
	if err != nil {
		panic("fleet: " + err.Error())
	}
}
