// Package probe runs the liveness, readiness and startup probes of a
// device's running containers, as the kubelet does: exec (a command in
// the container), httpGet and tcpSocket (to 127.0.0.1 unless the probe
// names a host: pods use the device's network), with Kubernetes' timing
// fields and defaults (schema.Probe.ProbeDefaults).
//
// A Manager runs one goroutine per probe of each running container, on
// the agent's clock and independent of the MQTT connection, so probes
// keep running while the device is offline. The reconciler tells it which
// containers run (Sync) and reads what the probes say (Results): it never
// waits for a probe. A result is about one run of a container (its
// StartedAt): a restarted container is probed afresh.
//
//   - A startup probe holds the others back until it succeeds once; when
//     it fails failureThreshold times in a row, the container must be
//     restarted (Result.Failed).
//   - A liveness probe that fails failureThreshold times in a row makes
//     the container fail (Result.Failed); the reconciler restarts it.
//   - A readiness probe decides Result.Ready: ready after
//     successThreshold successes in a row, not ready after
//     failureThreshold failures in a row; not ready until it first
//     succeeds.
//
// Each change of a result wakes Changed, and failures raise Unhealthy
// events ("liveness probe failed: exec [cat /tmp/healthy]: exit code 1").
package probe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/clock"
	"github.com/fleetmq/fleet/edgeagent/wake"
	"github.com/fleetmq/fleet/schema"
)

// Kind is the kind of a probe.
type Kind string

// The kinds of probes.
const (
	Liveness  Kind = "liveness"
	Readiness Kind = "readiness"
	Startup   Kind = "startup"
)

// Recorder receives events for the device's event stream; it must not
// block.
type Recorder interface {
	Record(typ, reason, pod, container, message string)
}

// Event reasons.
const (
	// ReasonUnhealthy: a probe failed (Warning).
	ReasonUnhealthy = "Unhealthy"
	// ReasonReady: a container that was not ready passes its readiness
	// probe again (Normal).
	ReasonReady = "Ready"
)

// Target is one running container to probe.
type Target struct {
	// ID is the runtime's container ID.
	ID string
	// Pod and Container name it, for events and logs.
	Pod, Container string
	// StartedAt is when the container's current run started; a new
	// StartedAt is a new run, probed afresh. Initial delays count from
	// it.
	StartedAt time.Time
	// Spec holds the probes and the ports named ports resolve against.
	Spec schema.Container
}

// HasProbes reports whether c has a probe the Manager runs.
func HasProbes(c schema.Container) bool {
	return c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil
}

// Result is what the probes of one run of a container say.
type Result struct {
	// StartedAt is the run the result is about (Target.StartedAt).
	StartedAt time.Time
	// Started: the startup probe has succeeded (at once without one).
	Started bool
	// Ready: the readiness probe passes (without one: Started).
	Ready bool
	// Failed is set once the liveness or startup probe has failed
	// failureThreshold times in a row: why, such as "liveness probe
	// failed: exec [cat /tmp/healthy]: exit code 1". The container must
	// be restarted; its probes stop.
	Failed string
	// NotReady says why a container that failed its readiness probe is
	// not ready ("readiness probe failed: ..."); empty when ready or not
	// probed yet.
	NotReady string
}

// Results map container IDs to results.
type Results map[string]Result

// Current returns the result for the run of container id that started at
// startedAt; ok is false when the probes have said nothing about that
// run yet.
func (r Results) Current(id string, startedAt time.Time) (Result, bool) {
	res, ok := r[id]
	if !ok || !res.StartedAt.Equal(startedAt) {
		return Result{}, false
	}
	return res, true
}

// Options configure a Manager. Every zero value works.
type Options struct {
	// Exec runs exec probes (runtime.Runtime); nil fails them.
	Exec Execer
	// Clock times the probes (default the real clock).
	Clock clock.Clock
	// Logger receives the probes' logs.
	Logger *slog.Logger
	// Events receives Unhealthy and Ready events.
	Events Recorder
}

// Manager runs the probes of the containers Sync names.
type Manager struct {
	o       Options
	log     *slog.Logger
	check   *checker
	changed chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	runs map[string]*run // by container ID
}

// run is the probing of one run of one container.
type run struct {
	target  Target
	cancel  context.CancelFunc
	started chan struct{} // closed once the startup probe succeeded

	// Under Manager.mu:
	result    Result
	wasFailed bool // readiness has failed at least once (for Ready events)
}

// New returns a Manager with no targets. Close stops its probes.
func New(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		o: o, log: o.Logger, check: newChecker(o.Exec), changed: wake.New(),
		ctx: ctx, cancel: cancel, runs: map[string]*run{},
	}
}

// Changed is signalled whenever a result changes (see package wake).
func (m *Manager) Changed() <-chan struct{} { return m.changed }

// Results returns a copy of the current results.
func (m *Manager) Results() Results {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(Results, len(m.runs))
	for id, r := range m.runs {
		out[id] = r.result
	}
	return out
}

// Sync makes targets the containers probed: it starts the probes of a
// target not probed yet (or probed for an earlier run), and stops those
// of every container not among targets. Targets without probes are
// ignored.
func (m *Manager) Sync(targets []Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		if !HasProbes(t.Spec) {
			continue
		}
		keep[t.ID] = true
		if r, ok := m.runs[t.ID]; ok {
			if r.target.StartedAt.Equal(t.StartedAt) {
				continue
			}
			r.cancel()
		}
		m.startLocked(t)
	}
	for id, r := range m.runs {
		if !keep[id] {
			r.cancel()
			delete(m.runs, id)
		}
	}
}

// startLocked starts the probes of one run.
func (m *Manager) startLocked(t Target) {
	ctx, cancel := context.WithCancel(m.ctx)
	r := &run{target: t, cancel: cancel, started: make(chan struct{})}
	r.result = Result{StartedAt: t.StartedAt}
	if t.Spec.StartupProbe == nil {
		r.result.Started = true
		close(r.started)
	}
	if t.Spec.ReadinessProbe == nil {
		r.result.Ready = r.result.Started
	}
	m.runs[t.ID] = r
	m.log.Debug("probing container", "pod", t.Pod, "container", t.Container, "id", t.ID)
	for _, p := range []struct {
		kind  Kind
		probe *schema.Probe
	}{{Startup, t.Spec.StartupProbe}, {Liveness, t.Spec.LivenessProbe}, {Readiness, t.Spec.ReadinessProbe}} {
		if p.probe == nil {
			continue
		}
		w := &worker{m: m, r: r, kind: p.kind, probe: p.probe}
		m.wg.Go(func() { w.run(ctx) })
	}
}

// Close stops every probe and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	m.cancel()
	m.runs = map[string]*run{}
	m.mu.Unlock()
	m.wg.Wait()
}

// update applies f to the result of r, if r is still current, and
// signals Changed when the result changed.
func (m *Manager) update(r *run, f func(res *Result)) {
	m.mu.Lock()
	if m.runs[r.target.ID] != r {
		m.mu.Unlock()
		return
	}
	before := r.result
	f(&r.result)
	changed := r.result != before
	m.mu.Unlock()
	if changed {
		wake.Signal(m.changed)
	}
}

func (m *Manager) record(typ, reason string, t Target, msg string) {
	if m.o.Events != nil {
		m.o.Events.Record(typ, reason, t.Pod, t.Container, msg)
	}
}

// worker runs one probe of one run.
type worker struct {
	m     *Manager
	r     *run
	kind  Kind
	probe *schema.Probe

	successes, failures int32
}

func (w *worker) run(ctx context.Context) {
	initialDelay, timeout, period, successThreshold, failureThreshold := w.probe.ProbeDefaults()
	if w.kind != Readiness {
		successThreshold = 1 // validation insists; be safe with persisted specs
	}
	clk := w.m.o.Clock
	if w.kind != Startup {
		select {
		case <-w.r.started:
		case <-ctx.Done():
			return
		}
	}
	due := w.r.target.StartedAt.Add(time.Duration(initialDelay) * time.Second)
	if d := due.Sub(clk.Now()); d > 0 && !w.r.target.StartedAt.IsZero() {
		if !sleep(ctx, clk, d) {
			return
		}
	}
	for {
		ok, msg := w.m.check.check(ctx, w.r.target.ID, w.probe, w.r.target.Spec.Ports, time.Duration(timeout)*time.Second)
		if ctx.Err() != nil {
			return
		}
		if ok {
			w.successes, w.failures = w.successes+1, 0
		} else {
			w.successes, w.failures = 0, w.failures+1
			w.m.log.Debug("probe failed", "kind", w.kind, "pod", w.r.target.Pod, "container", w.r.target.Container, "failures", w.failures, "msg", msg)
		}
		if done := w.judge(ok, msg, successThreshold, failureThreshold); done {
			return
		}
		if !sleep(ctx, clk, time.Duration(period)*time.Second) {
			return
		}
	}
}

// judge turns the counts into the result; done ends the worker.
func (w *worker) judge(ok bool, msg string, successThreshold, failureThreshold int32) (done bool) {
	m, r, t := w.m, w.r, w.r.target
	log := m.log.With("pod", t.Pod, "container", t.Container, "id", t.ID)
	switch w.kind {
	case Startup:
		switch {
		case ok:
			m.update(r, func(res *Result) {
				res.Started = true
				if t.Spec.ReadinessProbe == nil {
					res.Ready = true
				}
			})
			close(r.started)
			log.Info("startup probe succeeded")
			return true
		case w.failures >= failureThreshold:
			why := "startup probe failed: " + msg
			log.Warn("startup probe failed; the container will be restarted", "detail", msg, "failures", w.failures)
			m.record(schema.EventWarning, ReasonUnhealthy, t, why)
			m.update(r, func(res *Result) { res.Failed, res.Ready = why, false })
			return true
		}
	case Liveness:
		if !ok && w.failures >= failureThreshold {
			why := "liveness probe failed: " + msg
			log.Warn("liveness probe failed; the container will be restarted", "detail", msg, "failures", w.failures)
			m.record(schema.EventWarning, ReasonUnhealthy, t, why)
			m.update(r, func(res *Result) { res.Failed, res.Ready = why, false })
			return true
		}
	case Readiness:
		switch {
		case ok && w.successes >= successThreshold:
			var became bool
			m.mu.Lock()
			wasFailed := r.wasFailed
			m.mu.Unlock()
			m.update(r, func(res *Result) {
				became = !res.Ready && res.Failed == ""
				if res.Failed == "" {
					res.Ready, res.NotReady = true, ""
				}
			})
			if became {
				log.Info("readiness probe succeeded; container ready")
				if wasFailed {
					m.record(schema.EventNormal, ReasonReady, t, "readiness probe succeeded: "+msg)
				}
			}
		case !ok && w.failures >= failureThreshold:
			why := "readiness probe failed: " + msg
			var became bool
			m.update(r, func(res *Result) {
				became = res.Ready || res.NotReady == ""
				if became {
					res.Ready, res.NotReady = false, why
				}
			})
			if became {
				m.mu.Lock()
				r.wasFailed = true
				m.mu.Unlock()
				log.Warn("readiness probe failed; container not ready", "detail", msg, "failures", w.failures)
				m.record(schema.EventWarning, ReasonUnhealthy, t, why)
			}
		}
	}
	return false
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
