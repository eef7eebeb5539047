package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// preStop runs a container's lifecycle.preStop.exec command (cmdJSON, the
// LabelPreStop label) in it before the stop's SIGTERM, as the kubelet
// does: the hook has the grace period, and whatever it leaves of it is
// the wait between SIGTERM and SIGKILL. A hook that fails, exits non-zero
// or outlives the grace period is reported (log and a
// FailedPreStopHook event) and the stop goes on. A container that does
// not run has no hook to run.
func (r *Reconciler) preStop(ctx context.Context, a Action, cmdJSON string, grace time.Duration) {
	if cmdJSON == "" {
		return
	}
	log := r.log.With("pod", a.Key.Pod, "container", a.Key.Container, "id", a.ID)
	var cmd []string
	if err := json.Unmarshal([]byte(cmdJSON), &cmd); err != nil || len(cmd) == 0 {
		log.Warn("preStop hook label unreadable; not running it", "err", err)
		return
	}
	if grace <= 0 {
		log.Info("terminationGracePeriodSeconds is 0: the preStop hook is not run")
		return
	}
	log.Info("running preStop hook", "grace_period", grace)
	code, out, err := r.o.Runtime.Exec(ctx, a.ID, cmd, grace)
	switch {
	case errors.Is(err, runtime.ErrNotRunning), errors.Is(err, runtime.ErrNotFound):
		return
	case err != nil:
		msg := fmt.Sprintf("preStop hook %q failed: %v", cmd[0], err)
		if errors.Is(err, context.DeadlineExceeded) {
			msg = fmt.Sprintf("preStop hook %q still ran after the grace period of %s; stopping the container", cmd[0], grace)
		}
		log.Warn(msg)
		r.o.Events.Record(schema.EventWarning, "FailedPreStopHook", a.Key.Pod, a.Key.Container, msg)
	case code != 0:
		msg := fmt.Sprintf("preStop hook %q exited with code %d: %s", cmd[0], code, schema.Truncate(string(out), 256, "…"))
		log.Warn(msg)
		r.o.Events.Record(schema.EventWarning, "FailedPreStopHook", a.Key.Pod, a.Key.Container, msg)
	default:
		log.Debug("preStop hook done")
	}
}
