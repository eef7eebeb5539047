package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// Internal labels: state containerd does not keep once a task is deleted,
// and what Start needs to recreate a task. List does not return them.
const (
	internalPrefix  = "fleet.runtime/"
	labelImage      = internalPrefix + "image"       // image as the spec gave it
	labelLogPath    = internalPrefix + "log-path"    // ContainerSpec.LogPath
	labelStartedAt  = internalPrefix + "started-at"  // RFC 3339, last Start
	labelFinishedAt = internalPrefix + "finished-at" // RFC 3339, last recorded exit
	labelExitCode   = internalPrefix + "exit-code"   // last recorded exit code
	// Log limits of ContainerSpec (absent: the runtime's), and whether the
	// current task's log is written by Options.LogWriter ("true") or by
	// the shim (absent): see logs.go.
	labelLogMaxBytes = internalPrefix + "log-max-bytes"
	labelLogMaxFiles = internalPrefix + "log-max-files"
	labelLogWriter   = internalPrefix + "log-writer"
)

// managedFilter selects Fleet's containers.
var managedFilter = fmt.Sprintf(`labels.%q==true`, runtime.LabelManaged)

// cpuPeriod is the CFS period; CPUMillis m gives a quota of m*100 µs.
const cpuPeriod = 100000

// Create creates the container and its root filesystem snapshot (keyed by
// the container ID). The image must be present (EnsureImage): otherwise
// the error wraps runtime.ErrImage. Bind-mount host paths must exist.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) error {
	ctx = r.nsCtx(ctx)
	if spec.ID == "" {
		return errors.New("create container: empty ID")
	}
	unlock := r.locks.lock(spec.ID)
	defer unlock()

	specOpts, err := r.checkSpec(spec)
	if err != nil {
		return fmt.Errorf("create container %s: %w", spec.ID, err)
	}
	if _, err := r.client.ContainerService().Get(ctx, spec.ID); err == nil {
		return fmt.Errorf("create container %s: %w", spec.ID, runtime.ErrAlreadyExists)
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("create container %s: %w", spec.ID, err)
	}

	ref, err := normalizeRef(spec.Image)
	if err != nil {
		return fmt.Errorf("create container %s: %w", spec.ID, err)
	}
	img, err := r.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("create container %s: image %s not present: %w", spec.ID, spec.Image, runtime.ErrImage)
	}
	if err != nil {
		return fmt.Errorf("create container %s: image %s: %w", spec.ID, spec.Image, err)
	}
	if err := r.ensureUnpacked(ctx, img); err != nil {
		return fmt.Errorf("create container %s: image %s: %w: %w", spec.ID, spec.Image, runtime.ErrImage, err)
	}

	// A snapshot without a container is left over from a failed Create.
	sn := r.client.SnapshotService(r.opts.Snapshotter)
	if _, err := sn.Stat(ctx, spec.ID); err == nil {
		r.log.Warn("removing orphaned snapshot", "container", spec.ID)
		if err := sn.Remove(ctx, spec.ID); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("create container %s: remove orphaned snapshot: %w", spec.ID, err)
		}
	}

	opts := []oci.SpecOpts{oci.WithImageConfig(img)}
	switch {
	case len(spec.Command) > 0:
		// Command replaces the entrypoint, Args the image's CMD.
		opts = append(opts, oci.WithProcessArgs(append(slices.Clone(spec.Command), spec.Args...)...))
	case len(spec.Args) > 0:
		opts = append(opts, oci.WithImageConfigArgs(img, spec.Args))
	}
	opts = append(opts, specOpts...)

	_, err = r.client.NewContainer(ctx, spec.ID,
		ctrd.WithImage(img),
		ctrd.WithSnapshotter(r.opts.Snapshotter),
		ctrd.WithNewSnapshot(spec.ID, img),
		ctrd.WithNewSpec(opts...),
		ctrd.WithContainerLabels(containerLabels(spec)),
	)
	if err != nil {
		// NewContainer does not undo the snapshot it prepared.
		if rerr := sn.Remove(ctx, spec.ID); rerr != nil && !errdefs.IsNotFound(rerr) {
			r.log.Warn("remove snapshot after failed create", "container", spec.ID, "err", rerr)
		}
		if errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("create container %s: %w: %w", spec.ID, runtime.ErrAlreadyExists, err)
		}
		return fmt.Errorf("create container %s: %w", spec.ID, err)
	}
	r.log.Debug("created container", "container", spec.ID, "image", spec.Image)
	return nil
}

// checkSpec validates what containerd would only reject late (or not at
// all) and returns the spec options that do not depend on the image.
func (r *Runtime) checkSpec(spec runtime.ContainerSpec) ([]oci.SpecOpts, error) {
	opts := []oci.SpecOpts{
		oci.WithHostNamespace(specs.NetworkNamespace),
		oci.WithHostname(r.hostname),
	}
	for _, f := range []struct {
		path string
		opt  oci.SpecOpts
	}{
		{"/etc/hosts", oci.WithHostHostsFile},
		{"/etc/resolv.conf", oci.WithHostResolvconf},
	} {
		if _, err := os.Stat(f.path); err == nil {
			opts = append(opts, f.opt)
		}
	}
	if len(spec.Env) > 0 {
		for _, e := range spec.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				return nil, fmt.Errorf("env %q: want KEY=VALUE", e)
			}
		}
		opts = append(opts, oci.WithEnv(spec.Env))
	}
	if spec.WorkingDir != "" {
		if !filepath.IsAbs(spec.WorkingDir) {
			return nil, fmt.Errorf("working dir %q is not absolute", spec.WorkingDir)
		}
		opts = append(opts, oci.WithProcessCwd(spec.WorkingDir))
	}
	var mounts []specs.Mount
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("mount path %q is not absolute", m.MountPath)
		}
		if !filepath.IsAbs(m.HostPath) {
			return nil, fmt.Errorf("mount host path %q is not absolute", m.HostPath)
		}
		if _, err := os.Stat(m.HostPath); err != nil {
			return nil, fmt.Errorf("mount %s: host path: %w", m.MountPath, err)
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		mounts = append(mounts, specs.Mount{
			Type:        "bind",
			Source:      m.HostPath,
			Destination: m.MountPath,
			Options:     []string{"rbind", mode},
		})
	}
	if len(mounts) > 0 {
		opts = append(opts, oci.WithMounts(mounts))
	}
	if spec.MemoryLimitBytes < 0 || spec.CPUMillis < 0 {
		return nil, errors.New("negative resource limit")
	}
	if spec.MemoryLimitBytes > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(spec.MemoryLimitBytes)))
	}
	if spec.CPUMillis > 0 {
		opts = append(opts, oci.WithCPUCFS(spec.CPUMillis*cpuPeriod/1000, cpuPeriod))
	}
	if spec.LogPath != "" && !filepath.IsAbs(spec.LogPath) {
		return nil, fmt.Errorf("log path %q is not absolute", spec.LogPath)
	}
	if spec.LogMaxBytes < 0 || spec.LogMaxFiles < 0 {
		return nil, errors.New("negative log limit")
	}
	sec, err := securityOpts(spec)
	if err != nil {
		return nil, err
	}
	return append(opts, sec...), nil
}

func containerLabels(spec runtime.ContainerSpec) map[string]string {
	l := make(map[string]string, len(spec.Labels)+6)
	for k, v := range spec.Labels {
		if !strings.HasPrefix(k, internalPrefix) {
			l[k] = v
		}
	}
	l[runtime.LabelManaged] = "true"
	l[runtime.LabelPod] = spec.Pod
	l[runtime.LabelContainer] = spec.Name
	l[runtime.LabelPodHash] = spec.PodHash
	l[labelImage] = spec.Image
	if spec.LogPath != "" {
		l[labelLogPath] = spec.LogPath
	}
	if spec.LogMaxBytes > 0 {
		l[labelLogMaxBytes] = strconv.FormatInt(spec.LogMaxBytes, 10)
	}
	if spec.LogMaxFiles > 0 {
		l[labelLogMaxFiles] = strconv.Itoa(spec.LogMaxFiles)
	}
	return l
}

// load returns a managed container; runtime.ErrNotFound otherwise.
func (r *Runtime) load(ctx context.Context, op, id string) (ctrd.Container, containers.Container, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, containers.Container{}, fmt.Errorf("%s container %s: %w", op, id, runtime.ErrNotFound)
	}
	if err != nil {
		return nil, containers.Container{}, fmt.Errorf("%s container %s: %w", op, id, err)
	}
	info, err := c.Info(ctx, ctrd.WithoutRefreshedMetadata)
	if err != nil {
		return nil, containers.Container{}, fmt.Errorf("%s container %s: %w", op, id, err)
	}
	if info.Labels[runtime.LabelManaged] != "true" {
		return nil, containers.Container{}, fmt.Errorf("%s container %s: not managed by fleet: %w", op, id, runtime.ErrNotFound)
	}
	return c, info, nil
}

// Start starts the container's task, deleting an exited one first. A
// running task is left alone and Start returns runtime.ErrAlreadyExists. The task's output goes to the container's
// log path through the shim, so it keeps running without this process.
func (r *Runtime) Start(ctx context.Context, id string) error {
	ctx = r.nsCtx(ctx)
	unlock := r.locks.lock(id)
	defer unlock()

	c, info, err := r.load(ctx, "start", id)
	if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	switch {
	case err == nil:
		st, err := task.Status(ctx)
		if err != nil {
			return fmt.Errorf("start container %s: task status: %w", id, err)
		}
		if isRunning(st.Status) {
			return fmt.Errorf("start container %s: task %w", id, runtime.ErrAlreadyExists)
		}
		// Exited, or created by a Start that died half-way.
		if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("start container %s: delete old task: %w", id, err)
		}
	case !errdefs.IsNotFound(err):
		return fmt.Errorf("start container %s: load task: %w", id, err)
	}

	// Exits are observed through the event stream (Exits) and Stop waits
	// on the task itself, so nothing here needs a Wait channel: a task
	// that exits at once stays in containerd as stopped until deleted.
	task, byWriter, err := r.newTask(ctx, c, info.Labels)
	if err != nil {
		return fmt.Errorf("start container %s: create task: %w", id, err)
	}
	// Taken before Start, so that a task that exits at once never looks
	// finished before it started.
	startedAt := time.Now()
	if err := task.Start(ctx); err != nil {
		if _, derr := task.Delete(ctx, ctrd.WithProcessKill); derr != nil && !errdefs.IsNotFound(derr) {
			r.log.Warn("delete task after failed start", "container", id, "err", derr)
		}
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if _, err := c.SetLabels(ctx, map[string]string{
		labelStartedAt:  startedAt.UTC().Format(time.RFC3339Nano),
		labelFinishedAt: "", // empty deletes
		labelExitCode:   "",
		labelLogWriter:  byWriter,
	}); err != nil {
		// The task runs; only the reported start time is off (and, with
		// a log writer, the rotator copy-truncates its file too).
		r.log.Warn("record start time", "container", id, "err", err)
	}
	r.log.Debug("started container", "container", id, "pid", task.Pid())
	return nil
}

func isRunning(s ctrd.ProcessStatus) bool {
	return s == ctrd.Running || s == ctrd.Paused || s == ctrd.Pausing
}

// Stop sends SIGTERM, waits up to timeout, sends SIGKILL, and deletes the
// task, recording its exit code and time. A timeout ≤ 0 kills at once.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	ctx = r.nsCtx(ctx)
	unlock := r.locks.lock(id)
	defer unlock()

	c, _, err := r.load(ctx, "stop", id)
	if err != nil {
		return err
	}
	return r.stop(ctx, c, timeout)
}

func (r *Runtime) stop(ctx context.Context, c ctrd.Container, timeout time.Duration) error {
	id := c.ID()
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop container %s: load task: %w", id, err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return fmt.Errorf("stop container %s: task status: %w", id, err)
	}
	if isRunning(st.Status) {
		if err := terminate(ctx, task, timeout); err != nil {
			return fmt.Errorf("stop container %s: %w", id, err)
		}
	}
	es, err := task.Delete(ctx, ctrd.WithProcessKill)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop container %s: delete task: %w", id, err)
	}
	if _, err := c.SetLabels(ctx, map[string]string{
		labelExitCode:   strconv.FormatUint(uint64(es.ExitCode()), 10),
		labelFinishedAt: es.ExitTime().UTC().Format(time.RFC3339Nano),
	}); err != nil && !errdefs.IsNotFound(err) {
		r.log.Warn("record exit", "container", id, "err", err)
	}
	r.log.Debug("stopped container", "container", id, "exitCode", es.ExitCode())
	return nil
}

// terminate sends SIGTERM, then SIGKILL after timeout, and waits for exit.
func terminate(ctx context.Context, task ctrd.Task, timeout time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited, err := task.Wait(wctx) // before Kill, so the exit cannot be missed
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	if timeout > 0 {
		if err := task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("sigterm: %w", err)
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-exited:
			return nil
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := task.Kill(ctx, syscall.SIGKILL, ctrd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("sigkill: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove stops the task (SIGTERM, SIGKILL after Options.RemoveTimeout) and
// deletes the container and its snapshot. The log file stays.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	ctx = r.nsCtx(ctx)
	unlock := r.locks.lock(id)
	defer unlock()

	c, _, err := r.load(ctx, "remove", id)
	if err != nil {
		return err
	}
	if err := r.stop(ctx, c, r.opts.RemoveTimeout); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if err := c.Delete(ctx, ctrd.WithSnapshotCleanup); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("remove container %s: %w", id, runtime.ErrNotFound)
		}
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	r.log.Debug("removed container", "container", id)
	return nil
}

// List returns every managed container, sorted by ID, with its task state:
// two requests to containerd whatever the number of containers.
func (r *Runtime) List(ctx context.Context) ([]runtime.Container, error) {
	ctx = r.nsCtx(ctx)
	ctrs, err := r.client.ContainerService().List(ctx, managedFilter)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	resp, err := r.client.TaskService().List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	tasks := make(map[string]*tasktypes.Process, len(resp.Tasks))
	for _, t := range resp.Tasks {
		// Daemons before 2.0 leave ContainerID empty; a task's init process
		// has the container's ID.
		id := t.ContainerID
		if id == "" {
			id = t.ID
		}
		tasks[id] = t
	}
	out := make([]runtime.Container, 0, len(ctrs))
	for _, c := range ctrs {
		out = append(out, observe(c, tasks[c.ID]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// observe maps a container record and its task (nil if none) to the
// runtime's view.
func observe(c containers.Container, t *tasktypes.Process) runtime.Container {
	rc := runtime.Container{
		ID:      c.ID,
		Pod:     c.Labels[runtime.LabelPod],
		Name:    c.Labels[runtime.LabelContainer],
		PodHash: c.Labels[runtime.LabelPodHash],
		Image:   c.Labels[labelImage],
		Labels:  make(map[string]string, len(c.Labels)),
	}
	if rc.Image == "" {
		rc.Image = c.Image
	}
	for k, v := range c.Labels {
		if !strings.HasPrefix(k, internalPrefix) {
			rc.Labels[k] = v
		}
	}
	rc.StartedAt = parseTime(c.Labels[labelStartedAt])
	if t == nil {
		switch {
		case rc.StartedAt.IsZero():
			rc.State = runtime.StateCreated
		case c.Labels[labelExitCode] != "":
			rc.State = runtime.StateExited
			code, _ := strconv.ParseInt(c.Labels[labelExitCode], 10, 32) // written by us
			rc.ExitCode = int32(code)
			rc.FinishedAt = parseTime(c.Labels[labelFinishedAt])
		default:
			// Started, and the task vanished without us recording its exit:
			// the daemon or the device restarted.
			rc.State = runtime.StateExited
			rc.ExitCode = int32(ctrd.UnknownExitStatus)
		}
		return rc
	}
	switch t.Status {
	case tasktypes.Status_RUNNING, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		rc.State = runtime.StateRunning
	case tasktypes.Status_CREATED:
		rc.State = runtime.StateCreated
	case tasktypes.Status_STOPPED:
		rc.State = runtime.StateExited
		rc.ExitCode = int32(t.ExitStatus)
		if t.ExitedAt != nil {
			rc.FinishedAt = t.ExitedAt.AsTime()
		}
	default:
		rc.State = runtime.StateUnknown
	}
	return rc
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
