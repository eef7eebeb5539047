package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/schema"
)

// Probes in the reconcile loop. A probe.Manager runs the probes of the
// running containers on its own goroutines; each pass reads its results
// (Diff and PodStatuses take them as input, so both stay pure) and then
// tells it which containers run (Sync). A change of a result wakes the
// loop, so readiness reaches the published status at once and a failed
// liveness probe is acted on at once. The probes do not depend on the
// MQTT connection: they run, and act, while the device is offline.
//
// A failed liveness or startup probe makes Diff plan a Kill: the
// container is stopped as for a removal (its preStop hook, then SIGTERM
// and SIGKILL after the pod's grace period), and its exit is
// restarted through the restart policy and crash-loop backoff, so
// RESTARTS grows and a container that keeps failing backs off. Events:
// Warning Unhealthy (the probe, from the Manager), Warning Killing (the
// stop), then Exited and Started as for any restart.

// newProbes returns the probe manager of a reconciler.
func newProbes(o Options) *probe.Manager {
	return probe.New(probe.Options{Exec: o.Runtime, Clock: o.Clock, Logger: o.Logger, Events: o.Events})
}

// probeFailure is why the current run of running container c, of spec,
// must be restarted ("" if it need not): its liveness or startup probe
// failed.
func probeFailure(spec schema.Container, c runtime.Container, probes probe.Results) string {
	if spec.LivenessProbe == nil && spec.StartupProbe == nil {
		return ""
	}
	res, ok := probes.Current(c.ID, c.StartedAt)
	if !ok {
		return ""
	}
	return res.Failed
}

// containerReady reports whether running container c, of spec, is ready:
// without a readiness or startup probe, always; otherwise when the
// probes say so for its current run. why says what a failing probe said.
func containerReady(spec schema.Container, c runtime.Container, probes probe.Results) (ready bool, why string) {
	if !probe.HasProbes(spec) {
		return true, ""
	}
	res, ok := probes.Current(c.ID, c.StartedAt)
	switch {
	case !ok:
		return spec.ReadinessProbe == nil && spec.StartupProbe == nil, ""
	case res.Failed != "":
		return false, res.Failed + "; restarting"
	case res.Ready:
		return true, ""
	}
	return false, res.NotReady
}

// probeTargets returns the running containers of pods (with their
// hashes) that have probes.
func probeTargets(pods []schema.Pod, hashes map[string]string, observed []runtime.Container) []probe.Target {
	specs := map[state.Key]schema.Container{}
	for _, p := range pods {
		for _, c := range p.Spec.Containers { // init containers have no probes
			if probe.HasProbes(c) {
				specs[state.Key{Pod: p.Name, Container: c.Name, Hash: hashes[p.Name]}] = c
			}
		}
	}
	if len(specs) == 0 {
		return nil
	}
	var out []probe.Target
	for _, c := range observed {
		spec, ok := specs[state.Key{Pod: c.Pod, Container: c.Name, Hash: c.PodHash}]
		if !ok || c.State != runtime.StateRunning {
			continue
		}
		out = append(out, probe.Target{ID: c.ID, Pod: c.Pod, Container: c.Name, StartedAt: c.StartedAt, Spec: spec})
	}
	return out
}

// wantedKeys returns the keys of every container (init containers
// included) of the plan's pods.
func wantedKeys(plan Plan) map[state.Key]bool {
	out := map[state.Key]bool{}
	for _, p := range plan.Pods {
		for _, c := range podContainers(p) {
			out[state.Key{Pod: p.Name, Container: c.Name, Hash: plan.Hashes[p.Name]}] = true
		}
	}
	return out
}

// kill stops a container whose liveness or startup probe failed. Its
// exit is accounted by the next pass (Diff marked it Unhealthy), which
// restarts it per policy, after the crash-loop backoff.
func (r *Reconciler) kill(ctx context.Context, a Action) outcome {
	log := r.log.With("pod", a.Key.Pod, "container", a.Key.Container, "id", a.ID)
	log.Warn("stopping unhealthy container", "why", a.Message)
	r.o.Events.Record(schema.EventWarning, "Killing", a.Key.Pod, a.Key.Container,
		fmt.Sprintf("stopping container %s: %s; it will be restarted per its restart policy", a.ID, a.Message))
	err := r.terminate(ctx, a) // preStop, then the pod's grace period, as a removal
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return outcome{action: a, err: fmt.Errorf("stop unhealthy container %s: %w", a.ID, err), reason: "KillFailed", at: r.o.Clock.Now()}
	}
	return outcome{action: a, at: r.o.Clock.Now()}
}
