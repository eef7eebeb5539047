package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/store"
)

// Run publishes every stored desired state, then recomputes whenever a
// device or deployment changes, a report changes (debounced), or the
// resync interval passes, until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	if !c.loaded {
		if err := c.Load(ctx); err != nil {
			return err
		}
	}
	events, err := c.watch(ctx)
	if err != nil {
		return err
	}
	// The kept signatures are written from a goroutine of their own,
	// which writes what is left once ctx ends; Run returns after it.
	var keeping sync.WaitGroup
	keeping.Go(func() { c.writer.topics.sigs.run(ctx) })
	defer keeping.Wait()
	c.pass(ctx)
	c.readyOnce.Do(func() { close(c.ready) })

	resync := time.NewTicker(c.opts.ResyncInterval)
	defer resync.Stop()
	var statusTimer, retryTimer, recheckTimer *time.Timer
	var statusC, retryC, recheckC <-chan time.Time
	var recheckFor time.Time
	defer func() {
		for _, t := range []*time.Timer{statusTimer, retryTimer, recheckTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	for {
		if !c.retryAt.IsZero() && retryC == nil {
			retryTimer = time.NewTimer(time.Until(c.retryAt))
			retryC = retryTimer.C
		}
		if !c.recheckAt.Equal(recheckFor) {
			// A staged rollout's plan changes at recheckAt by time alone.
			if recheckTimer != nil {
				recheckTimer.Stop()
			}
			recheckFor, recheckC = c.recheckAt, nil
			if !recheckFor.IsZero() {
				recheckTimer = time.NewTimer(max(c.recheckAt.Sub(c.opts.Now()), 0) + 10*time.Millisecond)
				recheckC = recheckTimer.C
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if events, err = c.event(ctx, events, ev, ok); err != nil || ctx.Err() != nil {
				return err
			}
		case <-c.wake:
		case <-c.inbox.wake:
			if statusC == nil {
				statusTimer = time.NewTimer(c.opts.StatusDebounce)
				statusC = statusTimer.C
			}
			continue
		case <-statusC:
			statusC = nil
		case <-retryC:
			retryC = nil
		case <-recheckC:
			recheckC, recheckFor = nil, time.Time{}
			c.recheckRollouts()
		case <-resync.C:
			if err := c.load(ctx, false); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				c.log.Error("controller resync failed", "err", err)
				continue
			}
		}
		c.pass(ctx)
	}
}

// event applies a store event and those waiting behind it; at the end of
// the watch it reloads and watches again.
func (c *Controller) event(ctx context.Context, events <-chan store.Event, ev store.Event, ok bool) (<-chan store.Event, error) {
	if ok && ev.Type != store.EventError {
		c.apply(ev)
		c.drain(events)
		return events, nil
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	if ok {
		c.log.Warn("controller watch ended; reloading", "err", ev.Err)
	}
	return c.rewatch(ctx)
}

// pass brings the stored and published desired states and the deployment
// statuses up to date with what changed since the last pass (or with
// everything, when the change set says full or the incremental placement
// declines). It is the one place the stages run, in order: the placer
// turns deployments and devices into pods, the desired writer turns those
// into stored and published desired states, the status aggregator counts
// and publishes the deployment statuses. Failures are logged and retried
// by a later, full pass (c.retryAt).
func (c *Controller) pass(ctx context.Context) {
	start := time.Now()
	c.retryAt = time.Time{}
	if err := c.cfg.loadPending(ctx, c.store); err != nil {
		// What the events named stays pending; a full pass follows.
		c.failed(ctx, "controller pass", err)
	}
	reported, all := c.inbox.take()
	c.changes.reported = reported
	if c.writer.anyHeld(reported) {
		// A restored device reported: place it with everything else
		// (restorehold.go), so its new desired state is complete.
		c.changes.full = true
	}
	if c.republish.Swap(false) {
		c.writer.topics.forget()
		c.statuses.topics.forget()
		c.changes.full = true
	}
	if c.agents.active() {
		// Any report can move an agent rollout (agents.go).
		c.changes.full = true
	}
	if c.changes.full || all || !c.incrementalPass(ctx) {
		c.fullPass(ctx)
		c.fullPasses.Add(1)
	}
	c.changes.clear()
	if c.sender.takeFailed() {
		c.retryAt = time.Now().Add(time.Second)
	}
	c.recheckAt = c.placer.nextRecheck()
	if r := c.agents.recheck; !r.IsZero() && (c.recheckAt.IsZero() || r.Before(c.recheckAt)) {
		c.recheckAt = r
	}
	if !c.retryAt.IsZero() {
		// What failed is found again by recomputing everything.
		c.changes.full = true
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}
	c.passes.Add(1)
}

// fullPass recomputes every device's desired state and every deployment's
// status.
func (c *Controller) fullPass(ctx context.Context) {
	views, pods := c.placer.all()
	if err := c.placer.save(ctx); err != nil {
		c.failed(ctx, "store staged rollouts", err)
		return
	}
	c.agents.plan(c.fleet, c.opts.Now())
	if err := c.agents.save(ctx, c.store); err != nil {
		c.failed(ctx, "store agent rollouts", err)
		return
	}
	c.retryAfter(ctx, c.writer.writeAll(ctx, views, pods))
	c.statuses.countAll(ctx)
}

// incrementalPass recomputes what the change set can have changed (see
// placeIncrementally), and those devices' place in deployment statuses.
// It returns false, having changed nothing, when the placer declines.
func (c *Controller) incrementalPass(ctx context.Context) bool {
	p, ok := c.placer.some(c.changes)
	if !ok {
		return false
	}
	if err := c.placer.save(ctx); err != nil {
		c.failed(ctx, "store staged rollouts", err)
		return true // a full pass follows (retryAt)
	}
	c.placer.hold(p)
	c.retryAfter(ctx, c.writer.writeSome(ctx, p, c.changes))
	c.statuses.recount(ctx, c.changes)
	return true
}

// recheckRollouts marks for placement the staged rollouts whose plans may
// have changed by time alone (a deadline, minReadySeconds, a pause).
func (c *Controller) recheckRollouts() {
	for _, name := range c.placer.due(c.opts.Now()) {
		c.changes.deployments[name] = true
	}
}

// failed logs a stage's failure, unless ctx is done, and retries a second
// from now.
func (c *Controller) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.Error(what, "err", err)
	c.retryAt = time.Now().Add(time.Second)
}

// failure is a stage's error, already logged, and when it happened.
type failure struct {
	at  time.Time
	err error
}

func failedNow(err error) error { return &failure{at: time.Now(), err: err} }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// retryAfter retries a second after a stage's failure (err != nil, logged
// by the stage), unless ctx is done.
func (c *Controller) retryAfter(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	at := time.Now()
	if f, ok := errors.AsType[*failure](err); ok {
		at = f.at
	}
	c.retryAt = at.Add(time.Second)
}
