// Package reconcile converges the containers on a device toward the
// desired state. Diff is a pure function from (desired pods, observed
// containers, history, rollout records, now) to a Plan; the Reconciler
// runs a level-triggered loop that lists the runtime, diffs, and applies
// the plan with one worker per pod, so a slow pull of one pod never stalls
// the others.
//
// Rollouts are safe on the device: a new revision's images are pulled
// while the old version runs (download, then replace); a new revision that
// never starts is given up for the pod's last steady revision (see
// FailedStartLimit); and once the device has converged, the
// images the agent pulled that nothing needs are deleted, those of each
// pod's previous steady revision only when free disk space is below a
// floor (see PlanImageGC and DiskFloor).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/desired"
	"github.com/fleetmq/fleet/edgeagent/podconfig"
	"github.com/fleetmq/fleet/edgeagent/probe"
	"github.com/fleetmq/fleet/edgeagent/remote/logfile"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/state"
	"github.com/fleetmq/fleet/edgeagent/volumes"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// Recorder receives events for the device's event stream. It must not
// block.
type Recorder interface {
	Record(typ, reason, pod, container, message string)
}

// Status is the reconciler's part of the device status.
type Status struct {
	// Generation and Store of the desired state the agent holds (0 and ""
	// while it has none).
	Generation int64
	Store      string
	// ObservedGeneration is the generation fully applied: every action
	// for it was attempted and any failure is reported in Pods.
	ObservedGeneration int64
	Pods               []schema.PodStatus
	Message            string
}

// Options configures a Reconciler. Runtime, State and Inbox are required.
type Options struct {
	Runtime runtime.Runtime
	State   *state.Dir
	Inbox   *desired.Inbox
	// Desired and Agent are what was loaded from State at start.
	Desired *schema.DesiredState
	Agent   state.Agent

	Clock    clock.Clock
	Logger   *slog.Logger
	Events   Recorder
	OnStatus func(Status)

	// ResyncInterval is the period of full resyncs (default 30 s).
	ResyncInterval time.Duration
	// CrashLoop is the restart backoff (default DefaultCrashLoop).
	CrashLoop CrashLoop
	// SteadyAfter is how long a container must run without exiting to
	// have started; see FailedStartLimit (default DefaultSteadyAfter).
	SteadyAfter time.Duration
	// ImageGCMinFree is the free-space floor of the filesystem holding
	// the images: below it, the image garbage collector also deletes the
	// images kept for a fast undo, oldest first (default
	// DefaultDiskFloor, 10 %; DiskFloor{Off: true} disables it).
	ImageGCMinFree DiskFloor
	// ImageGCInterval is the longest time between two image garbage
	// collections of a converged device (default
	// DefaultImageGCInterval); a change of the images needed triggers
	// one at the next converged pass.
	ImageGCInterval time.Duration
	// Retry is the backoff after a failure to pull, create or start
	// (default 5 s doubling to 5 min, 50 % jitter).
	Retry backoff.Policy
	// StopTimeout is the grace period between SIGTERM and SIGKILL when a
	// container is removed (default 10 s).
	StopTimeout time.Duration
	// PullTimeout bounds one EnsureImage (default 15 min: cellular links).
	PullTimeout time.Duration
	// OpTimeout bounds every other runtime call (default 1 min).
	OpTimeout time.Duration
	// MaxParallel bounds the pods worked on at once (default 4).
	MaxParallel int
	// Seed feeds the jitter (0: random).
	Seed uint64

	// DeviceKey unseals the desired state's Secrets (*devicekey.Key; nil:
	// none can be used). Volumes makes the pods' volumes (default: a
	// volumes.Manager on State's directory). See workload.go.
	DeviceKey podconfig.Key
	Volumes   *volumes.Manager

	// Location is the device's time zone, in which update windows with
	// timeZone device are read (default time.Local: the TZ variable, else
	// /etc/localtime). LockRoot is the directory holding each pod's
	// update lock directory (default State's root, "locks"). See
	// update.go.
	Location *time.Location
	LockRoot string
}

func (o *Options) ensureDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Events == nil {
		o.Events = nopRecorder{}
	}
	if o.OnStatus == nil {
		o.OnStatus = func(Status) {}
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = 30 * time.Second
	}
	if o.CrashLoop == (CrashLoop{}) {
		o.CrashLoop = DefaultCrashLoop
	}
	if o.SteadyAfter <= 0 {
		o.SteadyAfter = DefaultSteadyAfter
	}
	if o.ImageGCMinFree == (DiskFloor{}) {
		o.ImageGCMinFree = DefaultDiskFloor
	}
	if o.ImageGCInterval <= 0 {
		o.ImageGCInterval = DefaultImageGCInterval
	}
	if o.Retry == (backoff.Policy{}) {
		o.Retry = backoff.Policy{Initial: 5 * time.Second, Max: 5 * time.Minute, Jitter: 0.5}
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.PullTimeout <= 0 {
		o.PullTimeout = 15 * time.Minute
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = time.Minute
	}
	if o.MaxParallel <= 0 {
		o.MaxParallel = 4
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.LockRoot == "" && o.State != nil {
		o.LockRoot = filepath.Join(o.State.Root(), "locks")
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
}

type nopRecorder struct{}

func (nopRecorder) Record(string, string, string, string, string) {}

// Reconciler owns the loop. Its state is touched only by the Run goroutine;
// pod workers report back through a channel.
type Reconciler struct {
	o   Options
	log *slog.Logger
	rnd *rand.Rand

	desired *schema.DesiredState
	// pods are desired's pods with Hash set to the agent's own
	// PodSpecHash, computed once per accepted state instead of twice a
	// pass.
	pods          []schema.Pod
	hist          state.History
	rollouts      state.Rollouts
	wanted        map[state.Key]bool
	observedGen   int64
	observedStore string
	// unsaved is the payload of desired while it is not yet persisted:
	// the pass that accepts it saves it with the agent state, before it
	// acts on it.
	unsaved      []byte
	listFailures int
	adopted      bool

	busy        map[string]*worker
	removeRetry map[string]retry
	results     chan result
	workers     sync.WaitGroup

	gc     imageGC
	wl     *workloads
	probes *probe.Manager // see probes.go
	// logDirs are the log directories made (or found) since the start,
	// so that a create does not make them again; a failed create
	// forgets its own. Workers use it.
	logDirs sync.Map

	exitWake chan struct{}
	ready    chan struct{}

	updates *updateGate     // update windows and locks (update.go)
	holds   map[string]Hold // the last pass's
}

type worker struct {
	hash        string // desired hash of the pod when dispatched ("" if not desired)
	removalOnly bool
	cancel      context.CancelFunc
}

type retry struct {
	at       time.Time
	failures int
}

// outcome is the result of one action.
type outcome struct {
	action Action
	err    error
	reason string
	at     time.Time
}

type result struct {
	pod      string
	outcomes []outcome
}

// New returns a Reconciler.
func New(o Options) (*Reconciler, error) {
	if o.Runtime == nil || o.State == nil || o.Inbox == nil {
		return nil, errors.New("reconcile: Runtime, State and Inbox are required")
	}
	o.ensureDefaults()
	r := &Reconciler{
		o:           o,
		log:         o.Logger,
		rnd:         rand.New(rand.NewPCG(o.Seed, o.Seed^0x5bd1e995)),
		desired:     o.Desired,
		pods:        hashedPods(o.Desired),
		hist:        o.Agent.Containers.Clone(),
		rollouts:    o.Agent.Rollouts.Clone(),
		busy:        map[string]*worker{},
		removeRetry: map[string]retry{},
		results:     make(chan result, o.MaxParallel),
		exitWake:    wake.New(),
		ready:       make(chan struct{}),
	}
	if r.hist == nil {
		r.hist = state.History{}
	}
	r.wl = newWorkloads(o)
	r.updates = &updateGate{loc: o.Location, lockRoot: o.LockRoot, seen: map[string]lockSeen{}}
	r.probes = newProbes(o)
	r.rollouts = checkRollouts(r.rollouts, r.log)
	if d := o.Desired; d != nil && o.Agent.Store == d.Store && o.Agent.AppliedGeneration <= d.Generation {
		r.observedGen, r.observedStore = o.Agent.AppliedGeneration, o.Agent.Store
	}
	return r, nil
}

// Ready is closed once the first pass (from persisted state, before any
// network) has run.
func (r *Reconciler) Ready() <-chan struct{} { return r.ready }

// Run reconciles until ctx is done. Cancelling ctx stops the loop and
// abandons in-flight operations; it never stops a container.
func (r *Reconciler) Run(ctx context.Context) error {
	wctx, cancelWork := context.WithCancel(ctx)
	defer cancelWork()

	var watch sync.WaitGroup
	watch.Go(func() { r.watchExits(wctx) })
	defer r.probes.Close()

	resync := r.o.Clock.NewTimer(r.o.ResyncInterval)
	defer resync.Stop()
	wake := r.o.Clock.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()

	first := true
	for {
		next, ok := r.pass(wctx)
		if first {
			close(r.ready)
			first = false
		}
		wake.Stop()
		if ok {
			wake.Reset(max(next.Sub(r.o.Clock.Now()), 0))
		}
		resync.Reset(r.o.ResyncInterval)

		select {
		case <-ctx.Done():
			cancelWork()
			r.shutdown()
			watch.Wait()
			return nil
		case <-r.o.Inbox.Wake():
		case <-r.exitWake:
		case <-r.probes.Changed():
		case res := <-r.results:
			r.handle(res)
		case <-resync.C():
			r.log.Debug("periodic resync")
		case <-wake.C():
		}
	}
}

// shutdown waits for the workers (their context is cancelled), records
// what they finished and persists. Containers are left as they are.
func (r *Reconciler) shutdown() {
	done := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case res := <-r.results:
			r.handle(res)
		case <-done:
			waiting = false
		}
	}
	for len(r.results) > 0 {
		r.handle(<-r.results)
	}
	r.persist()
}

func (r *Reconciler) watchExits(ctx context.Context) {
	b := backoff.New(backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.5}, r.o.Seed+1)
	for {
		ch, err := r.o.Runtime.Exits(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("subscribe to container exits failed", "err", err)
		} else {
			for ev := range ch {
				b.Reset()
				r.log.Debug("container exited", "id", ev.ID, "exitCode", ev.ExitCode)
				wake.Signal(r.exitWake)
			}
		}
		if ctx.Err() != nil {
			return
		}
		wake.Signal(r.exitWake) // the stream ended: re-list, exits may have been missed
		t := r.o.Clock.NewTimer(b.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// pass is one level-triggered reconcile: it reads the whole desired and
// observed state. It returns when the loop should wake for a backoff.
func (r *Reconciler) pass(ctx context.Context) (time.Time, bool) {
	if ds, payload, ok := r.o.Inbox.Take(); ok {
		r.accept(ds, payload)
	}
	now := r.o.Clock.Now()
	lctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	observed, err := r.o.Runtime.List(lctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		r.listFailures++
		r.log.Warn("list containers failed", "err", err, "failures", r.listFailures)
		if r.listFailures == 1 {
			r.o.Events.Record(schema.EventWarning, "RuntimeUnavailable", "", "", err.Error())
		}
		r.persist() // a state accepted meanwhile
		r.report(nil, now, err)
		return now.Add(r.o.Retry.Jittered(r.listFailures-1, r.rnd)), true
	}
	if r.listFailures > 0 {
		r.log.Info("container runtime is back", "after_failures", r.listFailures)
		r.listFailures = 0
	}

	if r.desired == nil {
		// Without any desired state (first boot, or unreadable state
		// file) the agent must not read "nothing desired" as "remove
		// everything": it adopts what runs and waits for the hub.
		r.report(observed, now, nil)
		return time.Time{}, false
	}

	observed = r.beforeDiff(observed)
	holds, holdWake := r.updates.holds(r.pods, observed, r.rollouts, now, r.o.Events)
	r.logHolds(holds)
	plan := Diff(r.pods, observed, r.probes.Results(), r.hist, r.rollouts, now, Policy{CrashLoop: r.o.CrashLoop, SteadyAfter: r.o.SteadyAfter, Holds: holds})
	if !r.adopted {
		r.adopted = true
		r.logAdoption(observed, plan)
	}
	r.afterDiff(&plan, observed)
	r.hist, r.rollouts = plan.History, plan.Rollouts
	r.wanted = wantedKeys(plan)
	r.probes.Sync(probeTargets(plan.Pods, plan.Hashes, observed))
	for _, ex := range plan.Exits {
		r.exitEvent(ex)
	}
	for _, st := range plan.Steadied {
		r.log.Info("pod revision runs steadily", "pod", st.Pod, "hash", st.Hash, "previous", st.Previous)
	}
	for _, rb := range plan.RolledBack {
		msg := fmt.Sprintf("revision %s failed to start (%s); going back to the previous version, revision %s", shortHash(rb.Failure.Hash), rb.Failure.Message, shortHash(rb.To))
		r.log.Warn("new revision failed to start; going back to the previous version", "pod", rb.Pod,
			"hash", rb.Failure.Hash, "to", rb.To, "container", rb.Failure.Container, "reason", rb.Failure.Reason, "detail", rb.Failure.Message)
		r.o.Events.Record(schema.EventWarning, "RolledBack", rb.Pod, rb.Failure.Container, msg)
	}

	// Nothing to dispatch and nothing in flight: the desired state is
	// applied. The pass persists before it acts: a newly accepted
	// desired state and the agent state in one save.
	converged := !r.hasWork(plan, now)
	if converged && (r.observedGen != r.desired.Generation || r.observedStore != r.desired.Store) {
		r.observedGen, r.observedStore = r.desired.Generation, r.desired.Store
		r.log.Info("desired state applied", "generation", r.observedGen, "store", r.observedStore)
	}
	r.persist()
	next, hasNext := plan.NextWake()
	if !holdWake.IsZero() && (!hasNext || holdWake.Before(next)) {
		next, hasNext = holdWake, true
	}
	r.dispatch(ctx, plan, now, func(t time.Time) {
		if !hasNext || t.Before(next) {
			next, hasNext = t, true
		}
	})
	r.report(observed, now, nil)
	if converged {
		// After the status: a collection never delays a report.
		r.collectImages(ctx, observed, plan, now)
		r.collectVolumes(observed, plan)
	}
	return next, hasNext
}

// logAdoption says, once after start, what the agent found running and
// kept: the operator's evidence that a restarted agent restarted nothing.
func (r *Reconciler) logAdoption(observed []runtime.Container, plan Plan) {
	touched := map[string]bool{}
	for _, a := range plan.Actions {
		touched[a.ID] = true
	}
	kept := 0
	for _, c := range observed {
		if c.State == runtime.StateRunning && !touched[c.ID] {
			kept++
		}
	}
	r.log.Info("adopted existing containers", "running_kept", kept, "observed", len(observed), "actions", len(plan.Actions))
}

// hasWork reports whether plan leaves work for dispatch (started now or
// deferred by it), or workers are in flight: whether the pass has not
// converged. It is known before dispatch starts anything, so the pass
// persists the applied generation before it acts.
func (r *Reconciler) hasWork(plan Plan, now time.Time) bool {
	if len(r.busy) > 0 {
		return true
	}
	for _, a := range plan.Actions {
		if a.Kind == Remove || a.Kind == Kill {
			if rt, ok := r.removeRetry[a.ID]; ok && rt.at.After(now) {
				continue // deferred: only wakes the loop
			}
		}
		return true
	}
	return false
}

// dispatch starts one worker per pod with work, in plan order: removal of
// pods no longer desired first; creation of new pods waits while such
// removals are in flight (memory on a small device is scarce). Work it
// defers is pending all the same (hasWork).
func (r *Reconciler) dispatch(ctx context.Context, plan Plan, now time.Time, wakeAt func(time.Time)) {
	type group struct {
		pod                       string
		actions                   []Action
		hasRemove, hasCreate, rep bool
	}
	var groups []*group
	byPod := map[string]*group{}
	for _, a := range plan.Actions {
		if a.Kind == Remove || a.Kind == Kill {
			if rt, ok := r.removeRetry[a.ID]; ok && rt.at.After(now) {
				wakeAt(rt.at)
				continue
			}
		}
		g := byPod[a.Key.Pod]
		if g == nil {
			g = &group{pod: a.Key.Pod}
			byPod[a.Key.Pod] = g
			groups = append(groups, g)
		}
		g.actions = append(g.actions, a)
		switch {
		case a.Kind == Remove:
			g.hasRemove = true
		case a.Kind == Create && a.Replace:
			g.rep = true
		case a.Kind == Create:
			g.hasCreate = true
		}
	}

	removalInFlight := false
	for _, w := range r.busy {
		removalInFlight = removalInFlight || w.removalOnly
	}
	for _, g := range groups {
		hash, desiredPod := plan.Hashes[g.pod]
		if w, ok := r.busy[g.pod]; ok {
			if w.hash != hash {
				r.log.Info("pod changed while being worked on; cancelling", "pod", g.pod)
				w.cancel()
			}
			continue
		}
		removalOnly := !desiredPod
		if g.hasCreate && !g.hasRemove && !g.rep && removalInFlight {
			continue // after the removals finish (their results wake us)
		}
		if len(r.busy) >= r.o.MaxParallel {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		r.busy[g.pod] = &worker{hash: hash, removalOnly: removalOnly, cancel: cancel}
		if removalOnly {
			removalInFlight = true
		}
		actions := g.actions
		pod := g.pod
		r.workers.Go(func() {
			defer cancel()
			res := r.work(wctx, pod, actions)
			r.results <- res
		})
	}
}

// work applies one pod's actions in order. It runs in its own goroutine
// and touches no Reconciler state except through its result.
func (r *Reconciler) work(ctx context.Context, pod string, actions []Action) result {
	res := result{pod: pod}
	for _, a := range actions {
		if ctx.Err() != nil {
			break
		}
		var o outcome
		switch a.Kind {
		case Remove:
			o = r.remove(ctx, a)
		case Create:
			o = r.create(ctx, a)
		case Start, Restart:
			o = r.start(ctx, a)
		case Prepare:
			o = r.prepare(ctx, a)
		case Kill:
			o = r.kill(ctx, a)
		}
		if o.err != nil && ctx.Err() != nil {
			break // cancelled (shutdown or spec change): not a failure
		}
		res.outcomes = append(res.outcomes, o)
	}
	return res
}

func (r *Reconciler) remove(ctx context.Context, a Action) outcome {
	log := r.log.With("pod", a.Key.Pod, "container", a.Key.Container, "id", a.ID)
	log.Info("removing container", "reason", a.Reason)
	err := r.terminate(ctx, a) // preStop, then the pod's grace period
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		log.Warn("stop failed; removing anyway", "err", err)
	}
	rctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	err = r.o.Runtime.Remove(rctx, a.ID)
	cancel()
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return outcome{action: a, err: fmt.Errorf("remove container %s: %w", a.ID, err), reason: "RemoveFailed", at: r.o.Clock.Now()}
	}
	r.o.Events.Record(schema.EventNormal, "Removed", a.Key.Pod, a.Key.Container, fmt.Sprintf("removed container %s (%s)", a.ID, a.Reason))
	return outcome{action: a, at: r.o.Clock.Now()}
}

func (r *Reconciler) create(ctx context.Context, a Action) outcome {
	log := r.log.With("pod", a.Key.Pod, "container", a.Key.Container, "id", a.ID)
	fail := func(reason string, err error) outcome {
		return outcome{action: a, err: err, reason: reason, at: r.o.Clock.Now()}
	}
	spec, err := r.containerSpec(a, true)
	if err != nil {
		return fail(ReasonConfigError, err)
	}
	pctx, cancel := context.WithTimeout(r.pullContext(ctx, a), r.o.PullTimeout)
	err = r.o.Runtime.EnsureImage(pctx, spec.Image, spec.PullPolicy)
	cancel()
	if err != nil {
		return fail(ReasonErrImagePull, fmt.Errorf("ensure image %s: %w", spec.Image, err))
	}
	r.o.Events.Record(schema.EventNormal, "Pulled", a.Key.Pod, a.Key.Container, "image "+spec.Image+" is present")
	logDir := filepath.Dir(spec.LogPath)
	if _, made := r.logDirs.Load(logDir); !made {
		if err := os.MkdirAll(logDir, 0o750); err != nil {
			log.Warn("cannot create log directory; container output is discarded", "err", err)
			spec.LogPath = ""
		} else {
			r.logDirs.Store(logDir, true)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	err = r.o.Runtime.Create(cctx, spec)
	cancel()
	if err != nil && !errors.Is(err, runtime.ErrAlreadyExists) {
		r.logDirs.Delete(logDir) // made again next time, in case it went
	}
	switch {
	case errors.Is(err, runtime.ErrAlreadyExists):
		// Created by an earlier agent that stopped before starting it (or
		// before List saw it): start what is there.
		log.Info("container already exists; starting it")
	case err != nil:
		return fail(ReasonCreateError, fmt.Errorf("create container %s: %w", a.ID, err))
	}
	return r.start(ctx, a)
}

// prepare makes sure the image of a container that will replace a running
// older version is present, while that version keeps running. A spec that
// cannot be turned into a container fails here too, before anything stops.
func (r *Reconciler) prepare(ctx context.Context, a Action) outcome {
	fail := func(reason string, err error) outcome {
		return outcome{action: a, err: err, reason: reason, at: r.o.Clock.Now()}
	}
	spec, err := r.containerSpec(a, false)
	if err != nil {
		return fail(ReasonConfigError, fmt.Errorf("%w; the running version keeps running", err))
	}
	pctx, cancel := context.WithTimeout(r.pullContext(ctx, a), r.o.PullTimeout)
	err = r.o.Runtime.EnsureImage(pctx, spec.Image, spec.PullPolicy)
	cancel()
	if err != nil {
		return fail(ReasonErrImagePull, fmt.Errorf("ensure image %s: %w; the running version keeps running", spec.Image, err))
	}
	r.o.Events.Record(schema.EventNormal, "Pulled", a.Key.Pod, a.Key.Container, "image "+spec.Image+" is present; replacing the running version")
	return outcome{action: a, at: r.o.Clock.Now()}
}

func (r *Reconciler) start(ctx context.Context, a Action) outcome {
	if err := r.beforeStart(a); err != nil { // volumes, again after a reboot
		return outcome{action: a, err: err, reason: ReasonConfigError, at: r.o.Clock.Now()}
	}
	sctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	err := r.o.Runtime.Start(sctx, a.ID)
	cancel()
	if err != nil && !errors.Is(err, runtime.ErrAlreadyExists) {
		return outcome{action: a, err: fmt.Errorf("start container %s: %w", a.ID, err), reason: ReasonStartError, at: r.o.Clock.Now()}
	}
	msg := "started container " + a.ID
	if a.Kind == Restart {
		msg = "restarted container " + a.ID
	}
	r.log.Info(msg, "pod", a.Key.Pod, "container", a.Key.Container)
	r.o.Events.Record(schema.EventNormal, "Started", a.Key.Pod, a.Key.Container, msg)
	return outcome{action: a, at: r.o.Clock.Now()}
}

// handle records a worker's outcomes in the history.
func (r *Reconciler) handle(res result) {
	if w, ok := r.busy[res.pod]; ok {
		w.cancel()
		delete(r.busy, res.pod)
	}
	for _, o := range res.outcomes {
		a := o.action
		if a.Kind == Remove || a.Kind == Kill {
			if o.err != nil {
				rt := r.removeRetry[a.ID]
				rt.at = o.at.Add(r.o.Retry.Jittered(rt.failures, r.rnd))
				rt.failures++
				r.removeRetry[a.ID] = rt
				r.log.Warn(a.Kind.String()+" failed", "pod", a.Key.Pod, "container", a.Key.Container, "err", o.err, "retry_at", rt.at)
				r.o.Events.Record(schema.EventWarning, o.reason, a.Key.Pod, a.Key.Container, o.err.Error())
			} else {
				delete(r.removeRetry, a.ID)
			}
			continue
		}
		if !r.wanted[a.Key] {
			continue // no longer desired; its record is gone
		}
		rec := r.hist[a.Key]
		if o.err != nil {
			rec.Failures++
			rec.RetryAt = o.at.Add(r.o.Retry.Jittered(int(rec.Failures-1), r.rnd))
			rec.Reason = o.reason
			rec.Message = schema.Truncate(o.err.Error(), 512, "…")
			if a.Kind != Prepare && isStartFailure(o.reason) {
				rec.FailedStarts++
			}
			r.log.Warn("container failed to start", "action", a.Kind, "pod", a.Key.Pod, "container", a.Key.Container,
				"reason", o.reason, "err", o.err, "failures", rec.Failures, "retry_at", rec.RetryAt)
			r.o.Events.Record(schema.EventWarning, o.reason, a.Key.Pod, a.Key.Container,
				fmt.Sprintf("%s (attempt %d; next at %s)", rec.Message, rec.Failures, rec.RetryAt.UTC().Format(time.RFC3339)))
		} else if a.Kind == Prepare {
			rec.Prepared = true
			rec.Failures, rec.RetryAt, rec.Reason, rec.Message = 0, time.Time{}, "", ""
		} else {
			if a.Kind == Restart {
				rec.Restarts++
			}
			rec.LastStart = o.at
			if rec.LastExitAt.IsZero() {
				// Only for runtimes that report no exit times: exits are
				// then told apart by this flag (see Diff).
				rec.ExitSeen = false
			}
			rec.Failures, rec.RetryAt, rec.Reason, rec.Message = 0, time.Time{}, "", ""
		}
		r.hist[a.Key] = rec
	}
}

// EventRecorder is a Recorder that also takes whole events, which carry
// what Record cannot: the exit code and the crash report (the end of
// the container's log) of an exit. status.Events implements it; a
// Recorder without it gets the events without those fields.
type EventRecorder interface {
	RecordEvent(ev schema.Event)
}

func (r *Reconciler) exitEvent(ex Exit) {
	typ := schema.EventNormal
	if ex.Code != 0 {
		typ = schema.EventWarning
	}
	// A crash report: the end of the log, read now, before a restart
	// moves the run's log to PATH.previous.
	var tail string
	if ex.Code != 0 {
		tail = r.crashLog(ex)
	}
	code := ex.Code
	var msg string
	switch {
	case ex.GaveUp:
		msg = fmt.Sprintf("container exited with code %d; its revision failed to start, going back to the previous version", ex.Code)
	case ex.Restart:
		msg = fmt.Sprintf("container exited with code %d; restarting in %s (policy %s)", ex.Code, ex.Delay, ex.Policy)
		if ex.Delay > r.o.CrashLoop.Initial {
			r.record(schema.Event{Type: schema.EventWarning, Reason: "BackOff", Pod: ex.Key.Pod, Container: ex.Key.Container,
				Message: fmt.Sprintf("back-off %s restarting failed container", ex.Delay), ExitCode: &code, LogTail: tail})
		}
	default:
		msg = fmt.Sprintf("container exited with code %d; not restarting (policy %s)", ex.Code, ex.Policy)
	}
	r.log.Info("container exited", "pod", ex.Key.Pod, "container", ex.Key.Container, "exitCode", ex.Code, "restart", ex.Restart, "delay", ex.Delay)
	r.record(schema.Event{Type: typ, Reason: "Exited", Pod: ex.Key.Pod, Container: ex.Key.Container, Message: msg, ExitCode: &code, LogTail: tail})
}

// record passes ev to the Recorder, whole if it takes whole events.
func (r *Reconciler) record(ev schema.Event) {
	if er, ok := r.o.Events.(EventRecorder); ok {
		er.RecordEvent(ev)
		return
	}
	r.o.Events.Record(ev.Type, ev.Reason, ev.Pod, ev.Container, ev.Message)
}

// crashLog returns the last lines of an exited container's log (at most
// schema.MaxCrashLogLines lines and schema.MaxCrashLogBytes bytes).
func (r *Reconciler) crashLog(ex Exit) string {
	if r.o.State == nil {
		return ""
	}
	tail, err := logfile.Tail(r.o.State.LogPath(ex.Key.Pod, ex.Key.Container), schema.MaxCrashLogLines, schema.MaxCrashLogBytes)
	if err != nil {
		r.log.Warn("read crash log", "pod", ex.Key.Pod, "container", ex.Key.Container, "err", err)
	}
	return tail
}

// accept makes ds the desired state; the pass persists payload (see
// persist) before it acts on it.
func (r *Reconciler) accept(ds *schema.DesiredState, payload []byte) {
	r.desired, r.pods, r.unsaved = ds, hashedPods(ds), payload
	r.log.Info("accepted desired state", "generation", ds.Generation, "store", ds.Store, "pods", len(ds.Pods))
}

// hashedPods returns a copy of ds's pods with Hash set by this agent: a
// hash that came with the payload is not trusted.
func hashedPods(ds *schema.DesiredState) []schema.Pod {
	if ds == nil {
		return nil
	}
	pods := slices.Clone(ds.Pods)
	for i := range pods {
		pods[i].Hash = schema.PodHash(pods[i])
	}
	return pods
}

// podHash is p's Hash, or schema.PodHash of it when unset.
func podHash(p schema.Pod) string {
	if p.Hash != "" {
		return p.Hash
	}
	return schema.PodHash(p)
}

// persist writes a newly accepted desired state and agent.json when its
// content changed, in one save (state.Dir.Save skips an unchanged
// agent.json). A desired state that cannot be persisted is applied from
// memory all the same: the hub's retained copy is re-read on the next
// connect, and a reboot falls back to the previous file.
func (r *Reconciler) persist() {
	a := state.Agent{Version: state.LayoutVersion, Store: r.observedStore, AppliedGeneration: r.observedGen, Containers: r.hist, Rollouts: r.rollouts}
	unsaved := r.unsaved
	r.unsaved = nil
	if err := r.o.State.Save(unsaved, &a); err != nil {
		if unsaved == nil {
			r.log.Error("persist agent state failed", "err", err)
			return
		}
		r.log.Error("persist desired state failed", "err", err, "generation", r.desired.Generation)
		r.o.Events.Record(schema.EventWarning, "PersistFailed", "", "", err.Error())
	}
}

func (r *Reconciler) report(observed []runtime.Container, now time.Time, listErr error) {
	st := Status{ObservedGeneration: r.observedGen}
	if r.desired == nil {
		st.Message = fmt.Sprintf("no desired state received yet; leaving %d existing containers untouched", len(observed))
		if listErr != nil {
			st.Message = "no desired state received yet; cannot list containers: " + listErr.Error()
		}
		r.o.OnStatus(st)
		return
	}
	st.Generation, st.Store = r.desired.Generation, r.desired.Store
	if r.observedStore != r.desired.Store {
		st.ObservedGeneration = 0
	}
	busy := make(map[string]bool, len(r.busy))
	for p := range r.busy {
		busy[p] = true
	}
	st.Pods = PodStatuses(r.pods, observed, r.probes.Results(), r.hist, r.rollouts, busy, now, listErr)
	if listErr == nil {
		r.addUpdates(st.Pods, observed, busy, now)
	}
	if listErr != nil {
		st.Message = "cannot list containers: " + listErr.Error()
	}
	r.o.OnStatus(st)
}

// logHolds logs and records the pods whose replacement starts or stops
// being held back, and keeps holds for the status.
func (r *Reconciler) logHolds(holds map[string]Hold) {
	for pod, h := range holds {
		if old, ok := r.holds[pod]; !ok || old.Reason != h.Reason {
			r.log.Info("pod update held back", "pod", pod, "reason", h.Reason, "until", h.Until, "detail", h.Message)
			if h.Reason == schema.UpdateReasonWindow {
				r.o.Events.Record(schema.EventNormal, "WaitingForWindow", pod, "", "new revision downloaded or downloading; "+h.Message)
			}
		}
	}
	for pod, old := range r.holds {
		if _, ok := holds[pod]; !ok {
			r.log.Info("pod update no longer held back", "pod", pod, "was", old.Reason)
		}
	}
	r.holds = holds
}

// addUpdates adds each desired pod's pending update to its status
// (updateStatus).
func (r *Reconciler) addUpdates(pods []schema.PodStatus, observed []runtime.Container, busy map[string]bool, now time.Time) {
	var byKey map[state.Key]runtime.Container
	for i, p := range r.pods {
		if i >= len(pods) || pods[i].FailedRevision != nil {
			continue
		}
		hash := podHash(p)
		pending := pendingReplace(p, hash, observed)
		var hold *Hold
		var running *schema.PodStatus
		if h, ok := r.holds[p.Name]; ok && pending {
			hold = &h
			if rev := runningRevision(p.Name, hash, observed, r.rollouts); rev != nil {
				if byKey == nil {
					byKey = observedByKey(observed)
				}
				ps := podStatus(*rev, byKey, r.probes.Results(), r.hist, busy, now, nil)
				running = &ps
			}
		}
		pods[i] = updateStatus(pods[i], p, hash, pending, preparedRevision(p, hash, r.hist), hold, running)
	}
}
