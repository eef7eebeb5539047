package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/edgeagent/podconfig"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/volumes"
	"github.com/fleetmq/fleet/schema"
)

// What a container takes from beyond its own spec: the desired state's
// ConfigMaps and Secrets (env valueFrom and envFrom, configMap and secret
// volumes, imagePullSecrets), the device (device nodes, volumes) and the
// pod (volumes, terminationGracePeriodSeconds). The reconciler calls into
// this file at a few points of its loop: before Diff (beforeDiff), after
// it (afterDiff), when it creates, starts and removes a container, and
// once the device has converged (collectVolumes).

// Labels the agent puts on the containers it creates, beside runtime's.
const (
	// LabelConfigDigest is podconfig.EnvDigest of a container's
	// environment, on containers whose environment comes partly from
	// ConfigMaps or Secrets: when what they give changes, the container
	// is replaced (its pod hash, which the hub compares, stays the
	// template's).
	LabelConfigDigest = "fleet.config-digest"
	// LabelGracePeriod is the pod's terminationGracePeriodSeconds, when
	// set: how long a stop waits between SIGTERM and SIGKILL.
	LabelGracePeriod = "fleet.grace-period"
	// LabelPreStop is the JSON of the container's
	// lifecycle.preStop.exec.command, run in it before it is stopped.
	LabelPreStop = "fleet.prestop"
)

// ReasonConfigChanged is the reason of the removal of a container whose
// environment from ConfigMaps or Secrets changed: it is created again
// with the new one.
const ReasonConfigChanged = "ConfigChanged"

// configDrift marks, for Diff, the pod hash of a container whose
// environment from ConfigMaps or Secrets changed: Diff then replaces it
// like a container of an older revision (download, then replace).
const configDrift = "~config"

// maxLabelBytes bounds what the agent puts in one label (containerd's
// limit is 4096 bytes for key and value).
const maxLabelBytes = 3 << 10

// workloads is the reconciler's part for the above. The Run goroutine
// writes it; workers read the snapshot only.
type workloads struct {
	log  *slog.Logger
	vols *volumes.Manager // nil: volumes cannot be made (volErr says why)
	key  podconfig.Key

	volErr error
	cfgFor *schema.DesiredState // the state cfg was built from
	cfg    *podconfig.Set

	snap atomic.Pointer[workloadSnap]
	// collected is the key (volumesKey) of the last collection that
	// removed all it had to: the next one runs when the key changes.
	collected string

	mu     sync.Mutex
	warned map[string]string // pod → the last pull-secret problem logged
}

type podRev struct{ name, hash string }

// workloadSnap is what workers read: replaced, never modified.
type workloadSnap struct {
	cfg    *podconfig.Set
	pods   map[podRev]*schema.Pod       // the pods the device runs, by revision
	labels map[string]map[string]string // observed containers' labels, by ID
}

func newWorkloads(o Options) *workloads {
	w := &workloads{log: o.Logger, key: o.DeviceKey, vols: o.Volumes, warned: map[string]string{}}
	if w.vols == nil {
		w.vols, w.volErr = volumes.New(volumes.Options{StateDir: o.State.Root(), Logger: o.Logger})
	}
	w.cfg = podconfig.New(nil, w.key)
	w.snap.Store(&workloadSnap{cfg: w.cfg})
	return w
}

// beforeDiff takes in the ConfigMaps and Secrets of a newly accepted
// desired state (unsealing the Secrets once) and marks, in a copy of
// observed, the containers whose environment from them changed: Diff
// then replaces them. A container whose environment cannot be resolved
// now (a Secret gone, say) keeps running.
func (r *Reconciler) beforeDiff(observed []runtime.Container) []runtime.Container {
	w := r.wl
	if r.desired != w.cfgFor {
		w.cfg, w.cfgFor = podconfig.New(r.desired, w.key), r.desired
	}
	revs := map[podRev]*schema.Pod{}
	for i := range r.pods {
		revs[podRev{r.pods[i].Name, podHash(r.pods[i])}] = &r.pods[i]
	}
	for name, ro := range r.rollouts {
		if ro.Steady != nil {
			revs[podRev{name, podHash(ro.Steady.Pod)}] = &ro.Steady.Pod
		}
	}
	out, copied := observed, false
	for i, c := range observed {
		if c.State == runtime.StateUnknown {
			continue
		}
		p := revs[podRev{c.Pod, c.PodHash}]
		if p == nil {
			continue
		}
		spec := findContainer(p.Spec.Containers, c.Name)
		if spec == nil || !podconfig.UsesConfig(spec) {
			continue
		}
		env, err := w.cfg.Env(spec)
		if err != nil || podconfig.EnvDigest(env) == c.Labels[LabelConfigDigest] {
			continue
		}
		if !copied {
			out, copied = append([]runtime.Container(nil), observed...), true
		}
		out[i].PodHash += configDrift
		r.log.Debug("environment from ConfigMaps or Secrets changed; the container is replaced", "pod", c.Pod, "container", c.Name, "id", c.ID)
	}
	return out
}

// afterDiff names the removals beforeDiff caused, publishes what workers
// need to the snapshot, and updates the configMap and secret volumes of
// the pods the device runs in place.
func (r *Reconciler) afterDiff(plan *Plan, observed []runtime.Container) {
	w := r.wl
	for i, a := range plan.Actions {
		if a.Kind == Remove && strings.HasSuffix(a.Key.Hash, configDrift) {
			plan.Actions[i].Key.Hash = strings.TrimSuffix(a.Key.Hash, configDrift)
			plan.Actions[i].Reason = ReasonConfigChanged
		}
	}
	snap := &workloadSnap{cfg: w.cfg, pods: make(map[podRev]*schema.Pod, len(plan.Pods)), labels: make(map[string]map[string]string, len(observed))}
	var revs []volumes.Pod
	for i := range plan.Pods {
		p := &plan.Pods[i]
		hash := podHash(*p)
		snap.pods[podRev{p.Name, hash}] = p
		if len(p.Spec.Volumes) > 0 {
			revs = append(revs, volumes.Pod{Name: p.Name, Hash: hash, Spec: &p.Spec})
		}
	}
	for _, c := range observed {
		snap.labels[c.ID] = c.Labels
	}
	w.snap.Store(snap)
	if w.vols != nil && len(revs) > 0 {
		for _, v := range w.vols.Refresh(revs, w.cfg) {
			pod, vol, _ := strings.Cut(v, "/")
			r.o.Events.Record(schema.EventNormal, "VolumeUpdated", pod, "", fmt.Sprintf("volume %s updated in place from its ConfigMap or Secret", vol))
		}
	}
}

// collectVolumes removes, once the device has converged, the volumes of
// pod revisions that neither run nor are desired, and the persistent
// volumes of pods no longer on the device (see volumes.Manager.Collect).
func (r *Reconciler) collectVolumes(observed []runtime.Container, plan Plan) {
	w := r.wl
	if w.vols == nil || r.desired == nil {
		return
	}
	revs, pods := map[podRev]bool{}, map[string]bool{}
	for _, p := range plan.Pods {
		revs[podRev{p.Name, podHash(p)}], pods[p.Name] = true, true
	}
	for _, p := range r.pods {
		pods[p.Name] = true
	}
	for _, c := range observed {
		revs[podRev{c.Pod, strings.TrimSuffix(c.PodHash, configDrift)}], pods[c.Pod] = true, true
	}
	// Volumes are made only for the revisions kept here: while they stay
	// the same, a collection that left nothing behind has nothing to do.
	key := volumesKey(revs, pods)
	if key == w.collected {
		return
	}
	removed, err := w.vols.Collect(
		func(pod, hash string) bool { return revs[podRev{pod, hash}] },
		func(pod string) bool { return pods[pod] })
	w.collected = key
	if err != nil {
		w.collected = ""
		r.log.Warn("removing volumes failed; retrying later", "err", err)
	}
	for _, p := range removed {
		if rest, ok := strings.CutPrefix(p, "volumes/"); ok {
			pod, vol, _ := strings.Cut(rest, "/")
			r.o.Events.Record(schema.EventNormal, "VolumeRemoved", pod, "", fmt.Sprintf("persistent volume %s removed: the pod no longer runs on this device", vol))
		}
	}
}

// volumesKey identifies what collectVolumes keeps: the revisions and the
// pods, sorted.
func volumesKey(revs map[podRev]bool, pods map[string]bool) string {
	keys := make([]string, 0, len(revs)+len(pods))
	for r := range revs {
		keys = append(keys, r.name+"/"+r.hash)
	}
	for p := range pods {
		keys = append(keys, p) // no "/": apart from the revisions
	}
	slices.Sort(keys)
	return strings.Join(keys, " ")
}

func findContainer(list []schema.Container, name string) *schema.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// podContainer finds a container of a pod revision the device runs, in
// its containers or init containers.
func (s *workloadSnap) podContainer(k podRev, name string) (*schema.Pod, *schema.Container) {
	p := s.pods[k]
	if p == nil {
		return nil, nil
	}
	if c := findContainer(p.Spec.Containers, name); c != nil {
		return p, c
	}
	return p, findContainer(p.Spec.InitContainers, name)
}

// containerSpec is ContainerSpec with what the container takes from
// beyond its own spec: its environment from ConfigMaps and Secrets, its
// volumes (made when setup is set: creating it; only checked when it is
// not: preparing a replacement while the old version runs), its device
// nodes (which must exist on the device: the node may appear later, so
// this is retried), the pod's grace period and the preStop hook. Every
// error is a configuration error: ReasonConfigError.
func (r *Reconciler) containerSpec(a Action, setup bool) (runtime.ContainerSpec, error) {
	snap := r.wl.snap.Load()
	c := &a.Container
	spec, err := ContainerSpec(a.Key, a.ID, *c, r.o.State.LogPath(a.Key.Pod, a.Key.Container))
	if err != nil {
		return spec, err
	}
	fail := func(err error) (runtime.ContainerSpec, error) {
		return spec, fmt.Errorf("container %s: %w", a.Key.Container, err)
	}
	env, err := snap.cfg.Env(c)
	if err != nil {
		return fail(err)
	}
	spec.Env = env
	labels := map[string]string{}
	if podconfig.UsesConfig(c) {
		labels[LabelConfigDigest] = podconfig.EnvDigest(env)
	}
	for _, d := range c.Devices {
		if err := checkDeviceNode(d.HostPath); err != nil {
			return fail(err)
		}
	}
	p := snap.pods[podRev{a.Key.Pod, a.Key.Hash}]
	if p != nil {
		ll, err := schema.ParseLogLimits(p.Annotations)
		if err != nil {
			return fail(err)
		}
		spec.LogMaxBytes, spec.LogMaxFiles = ll.MaxBytes, ll.MaxFiles
	}
	if p != nil && p.Spec.TerminationGracePeriodSeconds != nil {
		labels[LabelGracePeriod] = strconv.FormatInt(*p.Spec.TerminationGracePeriodSeconds, 10)
	}
	if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Exec != nil && len(l.PreStop.Exec.Command) > 0 {
		b, err := json.Marshal(l.PreStop.Exec.Command)
		if err != nil || len(b) > maxLabelBytes {
			return fail(fmt.Errorf("lifecycle.preStop.exec.command: at most %d bytes", maxLabelBytes))
		}
		labels[LabelPreStop] = string(b)
	}
	if len(labels) > 0 {
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		for k, v := range labels {
			spec.Labels[k] = v
		}
	}
	if p != nil && p.UpdateLock != nil {
		dir := r.updates.lockDir(a.Key.Pod)
		if setup {
			var err error
			if dir, err = r.updates.ensureLockDir(a.Key.Pod); err != nil {
				return fail(err)
			}
		}
		spec.Mounts = append(spec.Mounts, schema.Mount{HostPath: dir, MountPath: p.UpdateLock.LockPath()})
	}
	if len(c.VolumeMounts) == 0 {
		return spec, nil
	}
	switch {
	case p == nil:
		return fail(fmt.Errorf("pod revision %s is not one the device runs", shortHash(a.Key.Hash)))
	case r.wl.vols == nil:
		return fail(fmt.Errorf("volumes: %w", r.wl.volErr))
	case setup:
		mounts, err := r.wl.vols.Mounts(volumes.Pod{Name: a.Key.Pod, Hash: a.Key.Hash, Spec: &p.Spec}, c, snap.cfg)
		if err != nil {
			return fail(err)
		}
		spec.Mounts = append(spec.Mounts, mounts...)
	default:
		if err := checkVolumes(&p.Spec, c, snap.cfg); err != nil {
			return fail(err)
		}
	}
	return spec, nil
}

// checkVolumes checks, without making anything, that the configMap and
// secret volumes c mounts can be made now.
func checkVolumes(spec *schema.PodSpec, c *schema.Container, cfg *podconfig.Set) error {
	for _, vm := range c.VolumeMounts {
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			if v.Name != vm.Name {
				continue
			}
			var err error
			switch {
			case v.ConfigMap != nil:
				_, err = cfg.ConfigMapFiles(v.ConfigMap)
			case v.Secret != nil:
				_, err = cfg.SecretFiles(v.Secret)
			}
			if err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
	}
	return nil
}

// checkDeviceNode checks that a device node the container maps exists
// (a symbolic link to one is followed).
func checkDeviceNode(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("device %s does not exist on this device", path)
	case err != nil:
		return fmt.Errorf("device %s: %w", path, err)
	case fi.Mode()&fs.ModeDevice == 0:
		return fmt.Errorf("device %s is not a device node", path)
	}
	return nil
}

// beforeStart makes the volumes of a container about to start again:
// after a reboot, its tmpfs and subPath mounts are gone, and a configMap
// volume may have changed while it was stopped.
func (r *Reconciler) beforeStart(a Action) error {
	snap := r.wl.snap.Load()
	p, c := snap.podContainer(podRev{a.Key.Pod, a.Key.Hash}, a.Key.Container)
	if c == nil || len(c.VolumeMounts) == 0 {
		return nil
	}
	if r.wl.vols == nil {
		return fmt.Errorf("container %s: volumes: %w", a.Key.Container, r.wl.volErr)
	}
	if _, err := r.wl.vols.Mounts(volumes.Pod{Name: a.Key.Pod, Hash: a.Key.Hash, Spec: &p.Spec}, c, snap.cfg); err != nil {
		return fmt.Errorf("container %s: %w", a.Key.Container, err)
	}
	return nil
}

// pullContext carries the registry credentials of the pod's
// imagePullSecrets to EnsureImage. A pull secret that cannot be used is
// logged (once per change) and left out, as Kubernetes does: the image
// may not need it.
func (r *Reconciler) pullContext(ctx context.Context, a Action) context.Context {
	snap := r.wl.snap.Load()
	p := snap.pods[podRev{a.Key.Pod, a.Key.Hash}]
	if p == nil || len(p.Spec.ImagePullSecrets) == 0 {
		return ctx
	}
	creds, problems := snap.cfg.PullCredentials(p.Spec.ImagePullSecrets)
	msg := strings.Join(problems, "; ")
	w := r.wl
	w.mu.Lock()
	changed := w.warned[a.Key.Pod] != msg
	w.warned[a.Key.Pod] = msg
	w.mu.Unlock()
	if changed && msg != "" {
		r.log.Warn("pulling without some image pull secrets", "pod", a.Key.Pod, "problem", msg)
		r.o.Events.Record(schema.EventWarning, "FailedToRetrieveImagePullSecret", a.Key.Pod, a.Key.Container, msg)
	}
	return runtime.WithPullCredentials(ctx, creds)
}

// terminate stops a container for its removal: its preStop hook first
// (see preStop), then SIGTERM, and SIGKILL once the pod's
// terminationGracePeriodSeconds (label LabelGracePeriod; default
// Options.StopTimeout) has passed since the stop began.
func (r *Reconciler) terminate(ctx context.Context, a Action) error {
	labels := r.wl.snap.Load().labels[a.ID]
	grace := r.o.StopTimeout
	if s, ok := labels[LabelGracePeriod]; ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && n <= schema.MaxTerminationGracePeriodSeconds {
			grace = time.Duration(n) * time.Second
		}
	}
	start := r.o.Clock.Now()
	r.preStop(ctx, a, labels[LabelPreStop], grace)
	left := max(grace-r.o.Clock.Now().Sub(start), 0)
	if grace > 0 && left < minTermGrace {
		left = minTermGrace // as the kubelet: SIGTERM gets a moment even after a long preStop
	}
	sctx, cancel := context.WithTimeout(ctx, left+r.o.OpTimeout)
	defer cancel()
	return r.o.Runtime.Stop(sctx, a.ID, left)
}

// minTermGrace is the least time between SIGTERM and SIGKILL when a
// preStop hook used up the grace period (unless it is 0).
const minTermGrace = 2 * time.Second
