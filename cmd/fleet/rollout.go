package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// rolloutPoll is how often rollout status reads the deployment. Its status
// is the controller's aggregate of the device reports, which the hub does
// not stream as watch events.
const rolloutPoll = time.Second

func newRolloutCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Follow the rollout of a deployment to its devices",
		Long: `Follow the rollout of a deployment to the devices its selector matches.

A rollout starts when a deployment is created or its pod template changes
(its generation is bumped); it is finished when every targeted device runs the
new pod and reports it ready.`,
		Example: `  # Apply, then wait until every targeted device runs the new pod
  fleet apply -f web.yaml
  fleet rollout status deployment/web`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newRolloutStatusCmd(cli))
	addRolloutRevisionCmds(cmd, cli)
	return cmd
}

type rolloutStatusOptions struct {
	watch   bool
	timeout time.Duration
}

func newRolloutStatusCmd(cli *cliContext) *cobra.Command {
	o := rolloutStatusOptions{watch: true}
	cmd := &cobra.Command{
		Use:   "status (deployment NAME | deployment/NAME) [--timeout DURATION] [-w=false]",
		Short: "Wait until a deployment runs its latest pod on every targeted device",
		Long: `Show the progress of a deployment's rollout and wait until it is finished:
the hub has seen the latest generation and every device the selector matches
reports the new pod ready (a pod with restartPolicy Never or OnFailure that
exited successfully counts as done).

A line is printed each time the progress changes: devices updated (running
the new pod), ready, failed (the pod fails on an online device; see
"fleet describe device NAME") and pending (on their way, or offline).
When devices pull the new revision ahead (always, and outside a
spec.updateWindow or while an update lock is held), the line ends with
"(N downloading, N downloaded, N waiting, N switched: waiting for window
until TIME)".

An offline device holds the rollout until it reconnects and converges;
--timeout bounds the wait. The exit status is 0 once the rollout is
finished, 1 when the timeout expires or the deployment is deleted. With
-w=false the progress is printed once and the command exits 0, as kubectl's
does.

For a Staged deployment each line shows the waves: the revision, the step,
the counts, and what the rollout waits for and until when (devices to
become healthy, a step's pause, an operator's resume). The rollout is
finished when its last step is done; if too many devices fail it stops, or
rolls back to the last good revision, and the command prints why and exits
1, with or without -w. A rollback the hub made by itself is written as
"fleet rollout undo" writes it: the last good template becomes the current
revision (under a new number), and the failed revision stays in "fleet
rollout history", marked Failed; until the next change of the template
rollout status says which revision failed and why, and exits 1.`,
		Example: `  # Wait for a rollout, as long as it takes (Ctrl-C to stop)
  fleet rollout status deployment/web

  # In a script: apply, then fail if the devices are not done in 5 minutes
  fleet apply -f web.yaml && fleet rollout status deployment web --timeout 5m

  # Print the progress once
  fleet rollout status deploy/web -w=false

  # Follow a Staged rollout wave by wave; exit 1 if it is rolled back
  fleet rollout status deployment/web
  # Waiting for deployment "web" revision 4 to roll out: step 2 of 4, 10 of 100 devices
  #   updated, 9 ready, 0 failed, 91 pending; waiting for 1 device to become healthy
  #   (1 starting), until 2026-11-25T12:10:00Z...`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cli.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutStatus(cmd.Context(), cli, args, o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.watch, "watch", "w", true, "wait until the rollout is finished (false: print the progress once)")
	// Shadows the global --timeout (each request's limit), as kubectl's
	// rollout status --timeout does its --request-timeout.
	f.DurationVar(&o.timeout, "timeout", 0, "how long to wait before giving up (0: wait until the rollout finishes); each request still has the default limit of "+defaultTimeout.String())
	return cmd
}

// rolloutTarget reads "deployment NAME" or "deployment/NAME".
func rolloutTarget(args []string) (string, error) { return rolloutDeployment("status", args) }

func runRolloutStatus(ctx context.Context, cli *cliContext, args []string, o rolloutStatusOptions) error {
	name, err := rolloutTarget(args)
	if err != nil {
		return err
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %s: must not be negative", o.timeout)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	wait := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	tick := time.NewTicker(rolloutPoll)
	defer tick.Stop()
	var last string
	var dep *schema.Deployment
	var unreachable error
	for first := true; ; first = false {
		d, err := getDeployment(wait, cli, cl, name)
		switch {
		case err == nil:
			dep, unreachable = d, nil
			progress, done := rolloutProgress(dep)
			if progress != last {
				fmt.Fprintln(cli.stdout(), progress)
				last = progress
			}
			if stopped := rolloutStopped(dep); stopped != "" {
				// Final: the rollout will not finish by itself.
				return &exitError{code: 1, err: errors.New(stopped)}
			}
			if done || !o.watch {
				return nil
			}
		case wait.Err() != nil:
			// The wait ended during the request.
		case client.IsNotFound(err) && !first:
			return fmt.Errorf("deployment %q was deleted while its rollout was followed", name)
		case first || errors.As(err, new(*client.APIError)):
			return err
		default:
			// A hub restarting, a dropped connection: keep following,
			// and say so once.
			if unreachable == nil {
				fmt.Fprintf(cli.stderr(), "warning: cannot read deployment %q, retrying: %v\n", name, err)
			}
			unreachable = err
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				// Interrupted: the user stopped following.
				return &exitError{code: 130}
			}
			return rolloutTimeout(name, o.timeout, dep, unreachable)
		case <-tick.C:
		}
	}
}

func getDeployment(ctx context.Context, cli *cliContext, cl *client.Client, name string) (*schema.Deployment, error) {
	return cl.GetDeployment(ctx, name)
}

func rolloutTimeout(name string, timeout time.Duration, dep *schema.Deployment, unreachable error) error {
	msg := fmt.Sprintf("timed out after %s waiting for deployment %q to roll out", timeout, name)
	if dep != nil && dep.Status != nil {
		msg += ": " + rolloutShortfall(dep)
	}
	if unreachable != nil {
		msg += fmt.Sprintf("; the last request failed: %v", unreachable)
	}
	return errors.New(msg)
}

// rolloutShortfall says what an unfinished rollout still waits for, from
// the deployment's status (not nil): "1 of 2 devices ready, 1 pending
// (fleet get devices -l site=lab shows which)". fleet wait uses it too.
func rolloutShortfall(dep *schema.Deployment) string {
	s := dep.Status
	msg := fmt.Sprintf("%d of %d devices ready", s.Ready, s.Targeted)
	if s.Failed > 0 {
		msg += fmt.Sprintf(", %d failed", s.Failed)
	}
	if s.Pending > 0 {
		which := "fleet get devices"
		if sel := dep.Spec.Selector.MatchLabels; len(sel) > 0 {
			which += " -l " + printers.Labels(sel)
		}
		msg += fmt.Sprintf(", %d pending (%s shows which)", s.Pending, which)
	}
	return msg
}

// stagedRollout returns the status of the deployment's Staged rollout of
// its current revision, or nil (another strategy, or not planned yet).
func stagedRollout(d *schema.Deployment) *schema.RolloutStatus {
	s := d.Status
	if d.Spec.Strategy.Type != schema.StrategyStaged || s == nil || s.Rollout == nil || s.Rollout.Revision != s.Revision {
		return nil
	}
	return s.Rollout
}

// rolloutStopped says, for a Staged rollout that stopped or rolled back,
// why; "" otherwise.
func rolloutStopped(d *schema.Deployment) string {
	r := stagedRollout(d)
	if r == nil || d.Status.ObservedGeneration < d.Metadata.Generation {
		return ""
	}
	switch r.Phase {
	case schema.RolloutComplete:
		if rb := r.RolledBackFrom; rb != nil {
			return fmt.Sprintf("deployment %q revision %d was rolled back: %s; revision %d, the template of revision %d, is current",
				d.Metadata.Name, rb.Revision, rb.Reason, r.Revision, rb.ToRevision)
		}
	case schema.RolloutRolledBack:
		return fmt.Sprintf("deployment %q revision %d was rolled back: %s", d.Metadata.Name, r.Revision, r.Reason)
	case schema.RolloutStopped:
		return fmt.Sprintf("deployment %q revision %d stopped: %s", d.Metadata.Name, r.Revision, r.Reason)
	}
	return ""
}

// stagedProgress is rolloutProgress for a Staged rollout: the revision,
// the step, the counts, and what it waits for and until when.
func stagedProgress(name string, r *schema.RolloutStatus) (string, bool) {
	counts := fmt.Sprintf("%d of %d %s updated, %d ready, %d failed, %d pending",
		r.Updated, r.Targeted, plural(r.Targeted, "device", "devices"), r.Ready, r.Failed, r.Pending)
	switch r.Phase {
	case schema.RolloutComplete:
		if rb := r.RolledBackFrom; rb != nil {
			// The hub's own rollback of a failed revision: what runs is
			// the last good template, under the current revision.
			return fmt.Sprintf("deployment %q revision %d rolled back at step %d of %d: revision %d (the template of revision %d) runs, %s",
				name, rb.Revision, rb.Step, rb.Steps, r.Revision, rb.ToRevision, counts), false
		}
		return fmt.Sprintf("deployment %q successfully rolled out: revision %d, %s", name, r.Revision, counts), true
	case schema.RolloutRolledBack:
		return fmt.Sprintf("deployment %q revision %d rolled back at step %d of %d: %s", name, r.Revision, r.Step, r.Steps, counts), false
	case schema.RolloutStopped:
		return fmt.Sprintf("deployment %q revision %d stopped at step %d of %d: %s", name, r.Revision, r.Step, r.Steps, counts), false
	}
	msg := fmt.Sprintf("Waiting for deployment %q revision %d to roll out: step %d of %d, %s", name, r.Revision, r.Step, r.Steps, counts)
	if w := strings.TrimPrefix(r.Waiting, fmt.Sprintf("step %d of %d: ", r.Step, r.Steps)); w != "" {
		if w[0] >= '0' && w[0] <= '9' {
			w = "waiting for " + w
		}
		msg += "; " + w
		if !r.WaitUntil.IsZero() {
			msg += ", until " + r.WaitUntil.UTC().Format(time.RFC3339)
		}
	}
	return msg + "...", false
}

// rolloutProgress describes where the deployment's rollout stands, in the
// words of kubectl's rollout status, and whether it is finished.
func rolloutProgress(d *schema.Deployment) (string, bool) {
	name := d.Metadata.Name
	s := d.Status
	if s == nil || s.ObservedGeneration < d.Metadata.Generation {
		return fmt.Sprintf("Waiting for deployment %q spec update to be observed...", name), false
	}
	if d.Spec.Strategy.Type == schema.StrategyStaged && s.Targeted > 0 {
		if r := stagedRollout(d); r != nil {
			msg, done := stagedProgress(name, r)
			if !done {
				msg += updateProgress(s.Updates)
			}
			return msg, done
		}
		return fmt.Sprintf("Waiting for deployment %q revision %d rollout to be planned...", name, s.Revision), false
	}
	switch {
	case s.Targeted == 0:
		return fmt.Sprintf("deployment %q successfully rolled out (no device matches its selector)", name), true
	case s.Ready >= s.Targeted && s.Updated >= s.Targeted:
		return fmt.Sprintf("deployment %q successfully rolled out to %d %s", name, s.Targeted, plural(s.Targeted, "device", "devices")), true
	}
	msg := fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d %s updated, %d ready", name, s.Updated, s.Targeted, plural(s.Targeted, "device", "devices"), s.Ready)
	if s.Failed > 0 {
		msg += fmt.Sprintf(", %d failed", s.Failed)
	}
	if s.Pending > 0 {
		msg += fmt.Sprintf(", %d pending", s.Pending)
	}
	return msg + "..." + updateProgress(s.Updates), false
}

// updateProgress is the line's part on pulled-ahead updates: devices
// downloading, downloaded, waiting for their window or lock (until
// when) and switched.
func updateProgress(u *schema.UpdateCounts) string {
	if u == nil {
		return ""
	}
	msg := fmt.Sprintf(" (%d downloading, %d downloaded, %d waiting, %d switched", u.Downloading, u.Downloaded, u.Waiting, u.Switched)
	if u.Waiting > 0 && u.WaitingUntil != nil {
		msg += ": waiting for window until " + u.WaitingUntil.Format(time.RFC3339)
	}
	return msg + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
