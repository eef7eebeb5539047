package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/selector"
)

// agentRollouts is the collection of AgentRollouts.
const agentRollouts client.Kind = "agentrollouts"

// defaultAgentRollout names the AgentRollout fleet agent upgrade writes.
const defaultAgentRollout = "fleet"

func newAgentCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Upgrade fleet-agent on the devices through a staged rollout",
		Long: `Move the devices to another release of fleet-agent, and see which release
runs where.

The agent's release is desired state: an AgentRollout (fleet explain
agentrollout) names the version, the image or per-architecture digests of
the binary, the devices (a label selector) and the strategy, the same
AllAtOnce or Staged strategy Deployments use. Each selected device's desired
state names the release; offline devices wait, pending, never failed.

Version skew: a hub serves agents of its own release and up to two minor
releases older; it refuses a version newer than itself or older than that.`,
		Example: `  # Every device to v1.4.0, one device first, then all
  fleet agent upgrade --to v1.4.0 --image registry.example.com/fleet/agent:v1.4.0 \
    --strategy Staged --steps 1,100% --auto-rollback

  # Which versions run where, and the waves
  fleet agent status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAgentUpgradeCmd(cli), newAgentStatusCmd(cli))
	return cmd
}

type agentUpgradeOptions struct {
	name, to, selector, image, strategy, steps, threshold string
	digests                                               []string
	autoRollback, dryRun                                  bool
	deadline                                              int32
}

func newAgentUpgradeCmd(cli *cliContext) *cobra.Command {
	o := agentUpgradeOptions{name: defaultAgentRollout}
	cmd := &cobra.Command{
		Use:   "upgrade --to VERSION [-l SELECTOR] [--image IMAGE] [--digest ARCH=sha256:…] [--strategy AllAtOnce|Staged]",
		Short: "Create or update the AgentRollout that moves devices to an agent release",
		Long: `Create the AgentRollout NAME (--name, default "fleet"), or update it, so
that the devices its selector matches move to agent release --to.

The binary comes from --image, a multi-arch OCI image holding /fleet-agent
(pulled through containerd like any image), and/or --digest ARCH=sha256:…,
the SHA-256 of each architecture's binary (amd64, arm64, arm), which the
agent checks before it runs the binary. Updating an existing rollout keeps
its selector, strategy and artifacts unless flags change them; an image
tagged with the old version is retagged with the new one.

--strategy Staged moves the devices in waves (--steps, such as 1,10%,100%:
device counts or percentages, the last 100%), each started when the devices
before it report the new version; --failure-threshold failed devices stop
it, and --auto-rollback then gives every device the last good release
again. The hub refuses an unknown version, one below the version-skew
policy and a selector that matches no device, and nothing is rolled out.`,
		Example: `  # All lab devices at once
  fleet agent upgrade --to v1.4.0 -l site=lab --image registry.example.com/fleet/agent:v1.4.0

  # In waves, with the binaries' digests, rolled back after 2 failures
  fleet agent upgrade --to v1.4.0 --image registry.example.com/fleet/agent:v1.4.0 \
    --digest arm64=sha256:3f… --digest arm=sha256:9c… \
    --strategy Staged --steps 1,10%,100% --failure-threshold 2 --auto-rollback`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentUpgrade(cmd.Context(), cli, o, cmd.Flags().Changed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", o.name, "the AgentRollout to create or update")
	f.StringVar(&o.to, "to", "", "the agent release to run, such as v1.4.0 (required)")
	f.StringVarP(&o.selector, "selector", "l", "", "the devices, as a label selector (site=lab,role in (a,b)); empty: every device")
	f.StringVar(&o.image, "image", "", "a multi-arch image holding the agent binary at /fleet-agent")
	f.StringArrayVar(&o.digests, "digest", nil, "ARCH=sha256:HEX, the binary's digest for one architecture (repeatable)")
	f.StringVar(&o.strategy, "strategy", "", "AllAtOnce (default) or Staged")
	f.StringVar(&o.steps, "steps", "", "the waves of a Staged rollout: counts or percentages, such as 1,10%,100%")
	f.StringVar(&o.threshold, "failure-threshold", "", "failed devices that stop a Staged rollout: a count or a percentage (default 0: the first)")
	f.BoolVar(&o.autoRollback, "auto-rollback", false, "roll every device back to the last good release when a Staged rollout stops")
	f.Int32Var(&o.deadline, "progress-deadline", 0, "seconds a device may take to report the new release before it counts as failed (default 600)")
	f.BoolVar(&o.dryRun, "dry-run", false, "have the hub check the rollout without storing it")
	return cmd
}

func runAgentUpgrade(ctx context.Context, cli *cliContext, o agentUpgradeOptions, changed func(string) bool) error {
	if o.to == "" {
		return fmt.Errorf("--to is required: the agent release to run, such as v1.4.0")
	}
	if _, err := schema.ParseAgentVersion(o.to); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	ar := &schema.AgentRollout{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindAgentRollout}, Metadata: schema.ObjectMeta{Name: o.name}}
	cur, err := cl.Get(ctx, agentRollouts, o.name)
	switch {
	case err == nil:
		ar = cur.(*schema.AgentRollout)
		ar.Status = nil
	case !client.IsNotFound(err):
		return err
	}
	if err := o.applyTo(&ar.Spec, changed); err != nil {
		return err
	}
	return applyAgentRollout(ctx, cli, cl, ar, o.dryRun)
}

// applyTo sets the flags given on spec, the current one or a new one.
func (o agentUpgradeOptions) applyTo(spec *schema.AgentRolloutSpec, changed func(string) bool) error {
	old := spec.Version
	spec.Version = o.to
	switch {
	case changed("image"):
		spec.Image = o.image
	case old != "" && old != o.to && strings.HasSuffix(spec.Image, ":"+old):
		spec.Image = strings.TrimSuffix(spec.Image, old) + o.to
	}
	if changed("digest") {
		spec.Artifacts = nil
		for _, d := range o.digests {
			arch, digest, ok := strings.Cut(d, "=")
			if !ok {
				return fmt.Errorf("--digest %q: want ARCH=sha256:HEX, such as arm64=sha256:3f…", d)
			}
			spec.Artifacts = append(spec.Artifacts, schema.AgentArtifact{Arch: arch, Digest: digest})
		}
	} else if old != o.to && len(spec.Artifacts) > 0 {
		return fmt.Errorf("--digest is required: the rollout names digests of %s's binaries, which do not fit %s", old, o.to)
	}
	if changed("selector") {
		sel, err := selector.Parse(o.selector)
		if err != nil {
			return fmt.Errorf("--selector %q: %w", o.selector, err)
		}
		spec.Selector = sel
	}
	return o.strategyTo(&spec.Strategy, changed)
}

// strategyTo sets the strategy flags given on s.
func (o agentUpgradeOptions) strategyTo(s *schema.Strategy, changed func(string) bool) error {
	if changed("strategy") {
		s.Type = o.strategy
		if o.strategy != schema.StrategyStaged {
			s.Staged = nil
		}
	}
	if !changed("steps") && !changed("failure-threshold") && !changed("auto-rollback") && !changed("progress-deadline") {
		return nil
	}
	if s.Type != schema.StrategyStaged {
		return fmt.Errorf("--steps, --failure-threshold, --auto-rollback and --progress-deadline need --strategy Staged")
	}
	if s.Staged == nil {
		s.Staged = &schema.Staged{}
	}
	if changed("steps") {
		steps, err := parseSteps(o.steps)
		if err != nil {
			return err
		}
		s.Staged.Steps = steps
	}
	if changed("failure-threshold") {
		s.Staged.FailureThreshold = schema.IntOrPercent(o.threshold)
	}
	if changed("auto-rollback") {
		s.Staged.AutoRollback = o.autoRollback
	}
	if changed("progress-deadline") {
		d := o.deadline
		s.Staged.ProgressDeadlineSeconds = &d
	}
	return nil
}

// parseSteps parses --steps: 1,10%,100%.
func parseSteps(s string) ([]schema.StagedStep, error) {
	var steps []schema.StagedStep
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		p, percent := strings.CutSuffix(part, "%")
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--steps %q: %q is not a device count (1 or more) or a percentage (such as 10%%)", s, part)
		}
		v := int32(n)
		if percent {
			steps = append(steps, schema.StagedStep{Percent: &v})
		} else {
			steps = append(steps, schema.StagedStep{Devices: &v})
		}
	}
	return steps, nil
}

// applyAgentRollout stores ar through POST /v1/apply and says what became
// of it.
func applyAgentRollout(ctx context.Context, cli *cliContext, cl *client.Client, ar *schema.AgentRollout, dry bool) error {
	schema.Default(ar)
	if err := schema.ValidateAgentRollout(ar); err != nil {
		return err
	}
	b, err := json.Marshal(ar)
	if err != nil {
		return fmt.Errorf("encode agentrollout/%s: %w", ar.Metadata.Name, err)
	}
	resp, err := cl.Apply(ctx, b, dry)
	if err != nil {
		return err
	}
	for _, r := range resp.Results {
		suffix := ""
		if dry {
			suffix = " (server dry run)"
		}
		fmt.Fprintf(cli.stdout(), "agentrollout/%s %s%s: version %s\n", r.Name, r.Action, suffix, ar.Spec.Version)
	}
	return nil
}

// undoAgentRollout is fleet rollout undo agentrollout/NAME: the rollout
// gets its last good release again.
func undoAgentRollout(ctx context.Context, cli *cliContext, name string) error {
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	o, err := cl.Get(ctx, agentRollouts, name)
	if err != nil {
		return err
	}
	ar := o.(*schema.AgentRollout)
	if ar.Status == nil || ar.Status.LastGood == nil {
		return fmt.Errorf("agentrollout/%s has no last good release to go back to: no earlier version completed its rollout", name)
	}
	if ar.Status.LastGood.Version == ar.Spec.Version {
		fmt.Fprintf(cli.stdout(), "agentrollout/%s skipped rollback (already at %s)\n", name, ar.Spec.Version)
		return nil
	}
	good := ar.Status.LastGood
	ar.Spec.Version, ar.Spec.Image, ar.Spec.Artifacts = good.Version, good.Image, good.Artifacts
	ar.Status = nil
	b, err := json.Marshal(ar)
	if err != nil {
		return fmt.Errorf("encode agentrollout/%s: %w", name, err)
	}
	if _, err := cl.Apply(ctx, b, false); err != nil {
		return err
	}
	fmt.Fprintf(cli.stdout(), "agentrollout/%s rolled back to %s\n", name, good.Version)
	return nil
}

type agentStatusOptions struct {
	selector, output string
}

func newAgentStatusCmd(cli *cliContext) *cobra.Command {
	var o agentStatusOptions
	cmd := &cobra.Command{
		Use:   "status [-l SELECTOR] [-o table|wide|json|yaml]",
		Short: "Show which agent release runs on which device, and the rollouts' waves",
		Long: `Show the agent releases of the devices: how many devices run each version,
each AgentRollout with its waves (phase, step, updated/targeted, failed,
pending), and one line per device: DEVICE, ONLINE, AGENT (the version it
reports), DESIRED (the version its desired state names) and PHASE (Pending,
Updating, Updated, Failed or RolledBack; an offline device is pending, never
failed). -o wide adds ARCH, ROLLOUT and REASON; -o json and -o yaml print
the same as an object with versions, rollouts and devices.`,
		Example: `  # The whole fleet
  fleet agent status

  # The lab devices, with their architecture and why any failed
  fleet agent status -l site=lab -o wide

  # For a script
  fleet agent status -o json | jq '.versions'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgentStatus(cmd.Context(), cli, o)
		},
	}
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "only the devices this label selector matches")
	addOutputFlagOf(cmd, &o.output, "", "output format: table (default), wide, json or yaml", false)
	return cmd
}

// agentStatusReport is fleet agent status as -o json and -o yaml print it.
type agentStatusReport struct {
	Versions map[string]int      `json:"versions"`
	Rollouts []agentRolloutLine  `json:"rollouts"`
	Devices  []agentStatusDevice `json:"devices"`
}

type agentRolloutLine struct {
	Name    string                `json:"name"`
	Version string                `json:"version"`
	Rollout *schema.RolloutStatus `json:"rollout,omitempty"`
}

type agentStatusDevice struct {
	schema.AgentDeviceStatus `json:",inline"`
	Arch                     string `json:"arch,omitempty"`
	AgentRollout             string `json:"agentRollout,omitempty"`
}

func runAgentStatus(ctx context.Context, cli *cliContext, o agentStatusOptions) error {
	f, err := printers.ParseFormat(o.output)
	if err != nil {
		return err
	}
	if f == printers.Name {
		return fmt.Errorf("-o name is not supported by fleet agent status: want table, wide, json or yaml")
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	devs, err := cl.ListDevices(ctx, o.selector)
	if err != nil {
		return err
	}
	objs, _, err := cl.List(ctx, agentRollouts, "")
	if err != nil {
		return err
	}
	var ars []*schema.AgentRollout
	for _, o := range objs {
		ars = append(ars, o.(*schema.AgentRollout))
	}
	rep := buildAgentReport(devs.Items, ars)
	switch f {
	case printers.JSON:
		return printers.WriteJSON(cli.stdout(), rep)
	case printers.YAML:
		return printers.WriteYAML(cli.stdout(), rep)
	}
	return printAgentReport(cli, rep, f == printers.Wide)
}

// buildAgentReport joins the devices with the AgentRollouts: the first
// rollout (by name) whose selector matches a device is the one that names
// its release.
func buildAgentReport(devs []schema.Device, ars []*schema.AgentRollout) agentStatusReport {
	slices.SortFunc(ars, func(a, b *schema.AgentRollout) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	rep := agentStatusReport{Versions: map[string]int{}, Rollouts: []agentRolloutLine{}, Devices: []agentStatusDevice{}}
	for _, ar := range ars {
		line := agentRolloutLine{Name: ar.Metadata.Name, Version: ar.Spec.Version}
		if ar.Status != nil {
			line.Rollout = ar.Status.Rollout
		}
		rep.Rollouts = append(rep.Rollouts, line)
	}
	for _, d := range devs {
		row := agentStatusDevice{AgentDeviceStatus: schema.AgentDeviceStatus{Name: d.Metadata.Name, Phase: schema.AgentPending}, Arch: d.Metadata.Labels[schema.LabelArch]}
		if st := d.Status; st != nil {
			row.Online = st.Online
			if st.Agent != nil {
				row.Version = st.Agent.Version
				row.Arch = cmp.Or(row.Arch, st.Agent.Arch)
			}
		}
		rep.Versions[cmp.Or(row.Version, "<unknown>")]++
		for _, ar := range ars {
			if !ar.Spec.Selector.Matches(d.Metadata.Labels) {
				continue
			}
			row.AgentRollout, row.Desired = ar.Metadata.Name, ar.Spec.Version
			if known := deviceInStatus(ar, d.Metadata.Name); known != nil {
				row.Desired, row.Phase, row.Reason = known.Desired, known.Phase, known.Reason
			} else if row.Version == ar.Spec.Version {
				row.Phase = schema.AgentUpdated
			}
			break
		}
		rep.Devices = append(rep.Devices, row)
	}
	return rep
}

func deviceInStatus(ar *schema.AgentRollout, name string) *schema.AgentDeviceStatus {
	if ar.Status == nil {
		return nil
	}
	for i := range ar.Status.Devices {
		if ar.Status.Devices[i].Name == name {
			return &ar.Status.Devices[i]
		}
	}
	return nil
}

func printAgentReport(cli *cliContext, rep agentStatusReport, wide bool) error {
	out := cli.stdout()
	var rows [][]string
	for _, v := range slices.Sorted(maps.Keys(rep.Versions)) {
		rows = append(rows, []string{v, strconv.Itoa(rep.Versions[v])})
	}
	if err := printers.WriteTable(out, []string{"VERSION", "DEVICES"}, rows); err != nil {
		return err
	}
	if len(rep.Rollouts) > 0 {
		rows = nil
		for _, r := range rep.Rollouts {
			phase, step, updated, failed, pending, waiting := "<unknown>", "-", "-", "-", "-", ""
			if s := r.Rollout; s != nil {
				phase, step = string(s.Phase), fmt.Sprintf("%d/%d", s.Step, s.Steps)
				updated, failed, pending = fmt.Sprintf("%d/%d", s.Updated, s.Targeted), strconv.Itoa(s.Failed), strconv.Itoa(s.Pending)
				waiting = cmp.Or(s.Reason, s.Waiting)
			}
			rows = append(rows, []string{"agentrollout/" + r.Name, r.Version, phase, step, updated, failed, pending, cmp.Or(waiting, "<none>")})
		}
		fmt.Fprintln(out)
		if err := printers.WriteTable(out, []string{"ROLLOUT", "VERSION", "PHASE", "STEP", "UPDATED", "FAILED", "PENDING", "WAITING"}, rows); err != nil {
			return err
		}
	}
	headers := []string{"DEVICE", "ONLINE", "AGENT", "DESIRED", "PHASE"}
	if wide {
		headers = append(headers, "ARCH", "ROLLOUT", "REASON")
	}
	rows = nil
	for _, d := range rep.Devices {
		row := []string{d.Name, strconv.FormatBool(d.Online), cmp.Or(d.Version, "<unknown>"), cmp.Or(d.Desired, "<none>"), string(d.Phase)}
		if wide {
			row = append(row, cmp.Or(d.Arch, "<unknown>"), cmp.Or(d.AgentRollout, "<none>"), cmp.Or(d.Reason, "<none>"))
		}
		rows = append(rows, row)
	}
	fmt.Fprintln(out)
	return printers.WriteTable(out, headers, rows)
}

// agentRolloutRef reports whether args name one AgentRollout
// (agentrollout/NAME or agentrollout NAME), and its name.
func agentRolloutRef(args []string) (string, bool) {
	kind, refs, err := parseRefs(args)
	if err != nil || len(refs) != 1 {
		return "", false
	}
	if kind == "" {
		kind = refs[0].kind
	}
	return refs[0].name, kind == agentRollouts
}
