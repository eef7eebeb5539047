package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// addRolloutRevisionCmds adds the rollout subcommands that work with a
// deployment's revisions: history, undo, pause, resume and restart.
func addRolloutRevisionCmds(cmd *cobra.Command, cli *cliContext) {
	cmd.AddCommand(newRolloutHistoryCmd(cli), newRolloutUndoCmd(cli),
		newRolloutPauseCmd(cli, true), newRolloutPauseCmd(cli, false), newRolloutRestartCmd(cli))
}

// rolloutDeployment reads "deployment NAME" or "deployment/NAME" for the
// rollout subcommand verb.
func rolloutDeployment(verb string, args []string) (string, error) {
	kind, refs, err := parseRefs(args)
	if err != nil {
		return "", err
	}
	if len(refs) != 1 {
		return "", errors.New("name one deployment: deployment NAME or deployment/NAME")
	}
	if kind == "" {
		kind = refs[0].kind
	}
	if kind != client.Deployments {
		if verb == "status" && kind == client.Devices {
			return "", fmt.Errorf("rollout status works on deployments, not %s: a device's progress is in fleet get devices %s", kind, refs[0].name)
		}
		return "", fmt.Errorf("rollout %s works on deployments, not %s", verb, kind)
	}
	return refs[0].name, nil
}

type rolloutHistoryOptions struct {
	revision int64
	output   string
}

func newRolloutHistoryCmd(cli *cliContext) *cobra.Command {
	var o rolloutHistoryOptions
	cmd := &cobra.Command{
		Use:   "history (deployment NAME | deployment/NAME) [--revision N] [-o table|json|yaml]",
		Short: "List a deployment's revisions, or show one",
		Long: `List the revisions of a deployment's pod template, oldest first.

Every change of spec.template (an image, an env var, a restart) makes a new
numbered revision; changes of the selector, the strategy or paused do not.
The hub keeps the last spec.revisionHistoryLimit revisions (default 10).
Applying a template that an older revision has makes that revision the
newest again, under a new number: the number only grows.

CHANGE-CAUSE is the deployment's kubernetes.io/change-cause (or
fleet/change-cause) annotation when the template changed, else who applied
it. OUTCOME says how the revision's rollout ended: Complete when a Staged
rollout reached every device, Failed when too many devices failed it (the
hub stopped the rollout, or rolled it back), RolledBack once "fleet
rollout undo" left it; "fleet rollout undo" without --to-revision skips
Failed and RolledBack revisions, so it returns to the last good one. When
the hub rolls a Staged rollout back by itself (autoRollback), it writes the
rollback as undo does: the last good template becomes the current revision,
with the change cause "rollback to revision N by the hub (revision M failed
its staged rollout)", and revision M stays, Failed.

With --revision N, the revision's change cause, outcome and the whole
reason for it, and its pod template are shown.`,
		Example: `  # Say why you change a deployment, then list its revisions
  fleet apply -f web.yaml    # with metadata.annotations: {kubernetes.io/change-cause: "nginx 1.27"}
  fleet rollout history deployment/web

  # The pod template of revision 3, and why it failed
  fleet rollout history deployment/web --revision 3

  # The revisions as JSON, for a script
  fleet rollout history deploy/web -o json`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutHistory(cmd.Context(), cli, args, o)
		},
	}
	cmd.Flags().Int64Var(&o.revision, "revision", 0, "show the details of this revision (0: list them all)")
	addOutputFlag(cmd, &o.output, "", "output format: table (default), json or yaml")
	return cmd
}

func runRolloutHistory(ctx context.Context, cli *cliContext, args []string, o rolloutHistoryOptions) error {
	name, err := rolloutDeployment("history", args)
	if err != nil {
		return err
	}
	if o.revision < 0 {
		return fmt.Errorf("--revision %d: must be a revision number (0 lists them all)", o.revision)
	}
	p, err := cli.printer(o.output, false)
	if err != nil {
		return err
	}
	if p.Format != printers.Table && p.Format != printers.JSON && p.Format != printers.YAML {
		return fmt.Errorf("-o %s: rollout history prints table, json or yaml", p.Format)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	if o.revision > 0 {
		r, err := cl.DeploymentRevision(ctx, name, o.revision)
		if client.IsNotFound(err) {
			return fmt.Errorf("deployment %q has no revision %d: fleet rollout history deployment/%s lists them: %w", name, o.revision, name, err)
		}
		if err != nil {
			return err
		}
		return p.PrintRevision(r)
	}
	dep, err := cl.GetDeployment(ctx, name)
	if err != nil {
		return err
	}
	revs, err := cl.DeploymentRevisions(ctx, name)
	if err != nil {
		return err
	}
	if p.Format == printers.Table {
		fmt.Fprintf(cli.stdout(), "deployment/%s\n", name)
	}
	var current int64
	if dep.Status != nil {
		current = dep.Status.Revision
	}
	return p.PrintRevisions(revs, current)
}

type rolloutUndoOptions struct {
	toRevision int64
}

func newRolloutUndoCmd(cli *cliContext) *cobra.Command {
	var o rolloutUndoOptions
	cmd := &cobra.Command{
		Use:   "undo (deployment NAME | deployment/NAME | agentrollout/NAME) [--to-revision N]",
		Short: "Roll a deployment back to an earlier revision",
		Long: `Give a deployment the pod template of an earlier revision.

Without --to-revision it goes back to the newest revision before the current
one that neither failed nor was rolled back from; with --to-revision N it
goes exactly to revision N ("fleet rollout history" lists them). The
revision left is marked RolledBack, so a second undo goes one step further
back rather than returning to it.

The rollback is an ordinary change of the deployment: its generation is
bumped, the template becomes the newest revision (under a new number), and
the devices move to it per the deployment's strategy. A device that still
has the older revision's image does not pull it again.

For an agentrollout (fleet agent upgrade) undo gives the rollout its last
good release again (status.lastGood: the last version whose rollout
completed), with that release's image and digests.`,
		Example: `  # Back to the last good revision
  fleet rollout undo deployment/web

  # Back to revision 3 exactly, then wait for the devices
  fleet rollout undo deployment/web --to-revision 3
  fleet rollout status deployment/web

  # Back to the last agent release that completed
  fleet rollout undo agentrollout/fleet`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutUndo(cmd.Context(), cli, args, o)
		},
	}
	cmd.Flags().Int64Var(&o.toRevision, "to-revision", 0, "the revision to roll back to (0: the last good one before the current)")
	return cmd
}

func runRolloutUndo(ctx context.Context, cli *cliContext, args []string, o rolloutUndoOptions) error {
	if name, ok := agentRolloutRef(args); ok {
		if o.toRevision != 0 {
			return fmt.Errorf("--to-revision is for deployments: an agentrollout goes back to its last good release")
		}
		return undoAgentRollout(ctx, cli, name)
	}
	name, err := rolloutDeployment("undo", args)
	if err != nil {
		return err
	}
	if o.toRevision < 0 {
		return fmt.Errorf("--to-revision %d: must be a revision number (0: the previous one)", o.toRevision)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	res, err := cl.Rollback(ctx, name, client.RollbackOptions{ToRevision: o.toRevision})
	switch {
	case client.IsNotFound(err) && o.toRevision > 0:
		return fmt.Errorf("%w (fleet rollout history deployment/%s lists the revisions)", err, name)
	case err != nil:
		return err
	case res.Unchanged:
		fmt.Fprintf(cli.stdout(), "deployment/%s skipped rollback (current template already matches revision %d)\n", name, res.ToRevision)
	default:
		fmt.Fprintf(cli.stdout(), "deployment/%s rolled back\n", name)
	}
	return nil
}

// newRolloutPauseCmd is "rollout pause" (pause) or "rollout resume".
func newRolloutPauseCmd(cli *cliContext, pause bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause (deployment NAME | deployment/NAME)",
		Short: "Stop moving devices to a deployment's new template",
		Long: `Pause a deployment's rollout: set spec.paused.

While a deployment is paused no device is moved to another template: each
keeps the pod it runs, and template changes (apply, restart, undo) are
recorded as revisions but wait. A device that newly matches the selector
gets the current template if some device already runs it, else the pod most
devices run, else nothing. Resume with "fleet rollout resume".

Pausing is a change of the deployment's spec (a new generation, no new
revision); "fleet describe deployment" shows it.`,
		Example: `  # Stop a rollout that looks wrong, look, then carry on
  fleet rollout pause deployment/web
  fleet get pods -l app=web
  fleet rollout resume deployment/web

  # Make several changes, rolled out as one
  fleet rollout pause deployment/web
  fleet apply -f web-image.yaml
  fleet apply -f web-env.yaml
  fleet rollout resume deployment/web`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutPause(cmd.Context(), cli, args, pause)
		},
	}
	if !pause {
		cmd.Use = "resume (deployment NAME | deployment/NAME)"
		cmd.Short = "Resume a paused deployment's rollout"
		cmd.Long = `Resume a paused deployment: clear spec.paused.

The devices then move to the current template per the deployment's strategy
(all at once, or maxUnavailable at a time for RollingUpdate).`
		cmd.Example = `  fleet rollout resume deployment/web
  fleet rollout status deployment/web`
	}
	return cmd
}

func runRolloutPause(ctx context.Context, cli *cliContext, args []string, pause bool) error {
	verb, done := "pause", "paused"
	if !pause {
		verb, done = "resume", "resumed"
	}
	name, err := rolloutDeployment(verb, args)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	_, written, err := cl.ModifyDeployment(ctx, name, func(d *schema.Deployment) (bool, error) {
		if d.Spec.Paused == pause {
			return false, nil
		}
		d.Spec.Paused = pause
		return true, nil
	})
	switch {
	case err != nil:
		return err
	case !written && pause:
		return fmt.Errorf("deployment/%s is already paused", name)
	case !written:
		return fmt.Errorf("deployment/%s is not paused", name)
	}
	fmt.Fprintf(cli.stdout(), "deployment/%s %s\n", name, done)
	return nil
}

func newRolloutRestartCmd(cli *cliContext) *cobra.Command {
	var now bool
	cmd := &cobra.Command{
		Use:   "restart (deployment NAME | deployment/NAME)",
		Short: "Restart a deployment's pod on every device",
		Long: `Restart a deployment's pod on every device it targets.

The pod template gets the annotation fleet/restartedAt with the current
time, as kubectl sets kubectl.kubernetes.io/restartedAt: a new template, so
a new revision, and every device replaces the pod's containers per the
deployment's strategy (all at once, or maxUnavailable at a time). The image
is not pulled again unless its imagePullPolicy is Always.

A paused deployment cannot be restarted: resume it first.

--now is for emergencies: the devices take the new revision at once,
skipping the deployment's spec.updateWindow (update locks still apply).
The deployment gets the annotation fleet/updateNow naming the new
revision's hash; the write is in the audit trail ("fleet audit").`,
		Example: `  # Restart the pod everywhere (to reread a file on the devices, say)
  fleet rollout restart deployment/web
  fleet rollout status deployment/web

  # An urgent fix must not wait for tonight's update window
  fleet apply -f web.yaml
  fleet rollout restart deployment/web --now`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutRestart(cmd.Context(), cli, args, now)
		},
	}
	cmd.Flags().BoolVar(&now, "now", false, "replace the pod at once on every device, skipping spec.updateWindow (audited)")
	return cmd
}

func runRolloutRestart(ctx context.Context, cli *cliContext, args []string, now bool) error {
	name, err := rolloutDeployment("restart", args)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	at := cli.now().UTC().Format(time.RFC3339)
	_, _, err = cl.ModifyDeployment(ctx, name, func(d *schema.Deployment) (bool, error) {
		if d.Spec.Paused {
			return false, fmt.Errorf("deployment/%s is paused and cannot be restarted: fleet rollout resume deployment/%s first", name, name)
		}
		m := d.Spec.Template.Metadata
		if m == nil {
			m = &schema.TemplateMeta{}
			d.Spec.Template.Metadata = m
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		changed := m.Annotations[schema.AnnotationRestartedAt] != at // else restarted this very second already
		m.Annotations[schema.AnnotationRestartedAt] = at
		if now {
			if d.Metadata.Annotations == nil {
				d.Metadata.Annotations = map[string]string{}
			}
			hash := schema.TemplateHash(d.Spec.Template)
			changed = changed || d.Metadata.Annotations[schema.AnnotationUpdateNow] != hash
			d.Metadata.Annotations[schema.AnnotationUpdateNow] = hash
		}
		return changed, nil
	})
	if err != nil {
		return err
	}
	if now {
		fmt.Fprintf(cli.stdout(), "deployment/%s restarted now (update window skipped)\n", name)
		return nil
	}
	fmt.Fprintf(cli.stdout(), "deployment/%s restarted\n", name)
	return nil
}
