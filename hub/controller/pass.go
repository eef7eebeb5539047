package controller

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
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
		case <-c.statusWake:
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

// desiredChange is a device's new desired state, or its removal.
type desiredChange struct {
	name    string
	ds      *schema.DesiredState // nil: the device is gone
	raw     []byte
	lastGen int64 // for a removal: the tombstone
	tomb    bool  // a tombstone existed and is now superseded
}

// pass brings the stored and published desired states and the deployment
// statuses up to date with what changed since the last pass (or with
// everything, when c.full or the incremental placement declines).
// Failures are logged and retried by a later, full pass (c.retryAt).
func (c *Controller) pass(ctx context.Context) {
	start := time.Now()
	c.retryAt = time.Time{}
	if err := c.cfg.loadPending(ctx, c.store); err != nil && ctx.Err() == nil {
		// What the events named stays pending; a full pass follows.
		c.log.Error("controller pass", "err", err)
		c.retryAt = time.Now().Add(time.Second)
	}
	statusDevs, statusAll := c.takeStatus()
	if c.republish.Swap(false) {
		c.pub.forget()
		c.full = true
	}
	if c.full || statusAll || !c.incrementalPass(ctx, statusDevs) {
		c.full = false
		clear(c.dirtyDevs)
		clear(c.dirtyDeps)
		clear(c.oldSel)
		c.fullPass(ctx)
		c.fullPasses.Add(1)
	}
	clear(c.cfg.changed)
	if c.pub.takeFailed() {
		c.retryAt = time.Now().Add(time.Second)
	}
	c.recheckAt = c.staged.nextRecheck()
	if !c.retryAt.IsZero() {
		// What failed is found again by recomputing everything.
		c.full = true
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}
	c.passes.Add(1)
}

// fullPass recomputes every device's desired state and every deployment's
// status.
func (c *Controller) fullPass(ctx context.Context) {
	views := c.views()
	deps := c.deploymentsSorted()
	clear(c.rolling)
	pods := placeAll(views, deps, c.place, func(dep string) { c.rolling[dep] = true })
	if !c.saveRollouts(ctx) {
		return
	}
	var changes []desiredChange
	for i := range views {
		want := pods[views[i].Name]
		sortPods(want)
		if ch, ok := c.change(views[i].Name, want); ok {
			changes = append(changes, ch)
		}
	}
	for name, prev := range c.model.DesiredStates() {
		if _, ok := c.model.Device(name); !ok {
			changes = append(changes, desiredChange{name: name, lastGen: prev.Generation})
		}
	}
	if len(changes) > 0 {
		c.commit(ctx, changes)
	}
	c.pub.publishDesired(ctx, c.model.DesiredStates())
	c.updatePortConflicts(deps)
	clear(c.aggs)
	names := make([]string, len(deps))
	for i := range deps {
		c.rebuildAgg(&deps[i])
		names[i] = deps[i].Metadata.Name
	}
	c.publishAggs(ctx, append(names, c.pub.deletedDeployments(c.deployments)...))
}

// incrementalPass recomputes what the events and reports since the last
// pass can have changed (see placeIncrementally), and those devices'
// place in deployment statuses. It returns false, having changed nothing,
// when placeIncrementally declines.
func (c *Controller) incrementalPass(ctx context.Context, statusDevs map[string]bool) bool {
	deps := c.deploymentsSorted()
	p, ok := placeIncrementally(c, increment{
		deps: deps, byName: c.deployments,
		devices: c.dirtyDevs, changedDeps: c.dirtyDeps, reported: statusDevs,
		oldSel: c.oldSel, rolling: c.rolling,
		limit: max(minIncrementalLimit, c.size()/2),
	})
	if !ok {
		return false
	}
	if !c.saveRollouts(ctx) {
		return true // a full pass follows (retryAt)
	}
	for dep, holding := range p.holding {
		if holding {
			c.rolling[dep] = true
		} else {
			delete(c.rolling, dep)
		}
	}
	passDevs := maps.Clone(c.dirtyDevs)
	touched := maps.Clone(c.dirtyDeps) // deployments whose status may have changed
	if touched == nil {
		touched = map[string]bool{}
	}
	clear(c.dirtyDevs)
	clear(c.dirtyDeps)
	clear(c.oldSel)

	changes := make([]desiredChange, 0, len(p.removed)+len(p.work))
	for _, name := range p.removed {
		changes = append(changes, desiredChange{name: name, lastGen: c.model.Desired(name).Generation})
	}
	for _, name := range slices.Sorted(maps.Keys(p.work)) {
		if ch, ok := c.change(name, p.work[name]); ok {
			changes = append(changes, ch)
		}
	}
	// Devices whose pods stay but whose ConfigMaps or Secrets may not.
	for _, name := range c.configRecheck(p.work, statusDevs) {
		if ch, ok := c.change(name, slices.Clone(c.model.Desired(name).Pods)); ok {
			changes = append(changes, ch)
		}
	}
	if len(changes) > 0 {
		c.commit(ctx, changes)
	}
	c.pub.publishUnpublished(ctx, c.model.Desired)
	if len(passDevs) > 0 || len(touched) > 0 {
		// Devices or deployments changed: host port claims may too.
		for _, name := range c.updatePortConflicts(deps) {
			touched[name] = true
		}
	}
	c.recount(ctx, deps, touched, passDevs, statusDevs)
	return true
}

// recount brings the deployment statuses up to date after an incremental
// pass: it recounts the changed deployments, and the devices that changed
// or reported in the others, and publishes what changed.
func (c *Controller) recount(ctx context.Context, deps []schema.Deployment, touched, passDevs, statusDevs map[string]bool) {
	rebuilt := maps.Clone(touched)
	for depName := range rebuilt {
		if dep, ok := c.deployments[depName]; ok {
			c.rebuildAgg(dep)
		} else {
			delete(c.aggs, depName)
		}
	}
	for _, devs := range []map[string]bool{passDevs, statusDevs} {
		for name := range devs {
			d, _ := c.model.Device(name)
			for i := range deps {
				depName := deps[i].Metadata.Name
				if rebuilt[depName] {
					continue
				}
				if _, counted := c.aggs[depName].cat[name]; counted || d.Labels != nil && deps[i].Spec.Selector.Matches(d.Labels) {
					c.updateAgg(&deps[i], name)
					touched[depName] = true
				}
			}
		}
	}
	if len(touched) > 0 || c.pub.clearing() {
		c.publishAggs(ctx, slices.Sorted(maps.Keys(touched)))
	}
}

// saveRollouts stores the staged rollouts' records that the placement
// changed, before the desired states that follow from them: a hub killed
// in between resumes from the records. On failure it schedules a retry and
// returns false: the pass writes nothing else.
func (c *Controller) saveRollouts(ctx context.Context) bool {
	c.staged.forget(c.deployments)
	if err := c.staged.flush(ctx, c.store); err != nil {
		if ctx.Err() == nil {
			c.log.Error("store staged rollouts", "err", err)
			c.retryAt = time.Now().Add(time.Second)
		}
		return false
	}
	return true
}

// recheckRollouts marks for placement the staged rollouts whose plans may
// have changed by time alone (a deadline, minReadySeconds, a pause).
func (c *Controller) recheckRollouts() {
	for _, name := range c.staged.due(c.opts.Now()) {
		if _, ok := c.deployments[name]; ok {
			c.dirtyDeps[name] = true
		}
	}
}

// change returns the desired state a device gets if want, or the
// ConfigMaps and Secrets want uses, differ from what it has (or it has
// none, or one from another store).
func (c *Controller) change(name string, want []schema.Pod) (desiredChange, bool) {
	prev := c.model.Desired(name)
	cfg := c.resolve(name, want)
	current := prev != nil && prev.Store == c.storeID && SamePods(prev.Pods, want)
	if current && cfg.same(prev) {
		return desiredChange{}, false
	}
	gen := int64(1)
	_, tomb := c.tombstones[name]
	if prev != nil {
		gen = prev.Generation + 1
	} else if tomb {
		gen = c.tombstones[name] + 1
	}
	ds := &schema.DesiredState{
		TypeMeta:   schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:     name,
		Generation: gen,
		Store:      c.storeID,
		Pods:       want,
	}
	reuse := prev
	if prev != nil && prev.Store != c.storeID {
		reuse = nil // versions of another store mean nothing here
	}
	c.build(ds, cfg, reuse)
	if current && sameConfig(ds, prev) {
		return desiredChange{}, false // a Secret could not be sealed, again
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		c.log.Error("encode desired state", "device", name, "err", err)
		return desiredChange{}, false
	}
	return desiredChange{name: name, ds: ds, raw: raw, tomb: tomb}, true
}

// names returns the device names, sorted.
func (c *Controller) names() []string {
	if c.sortedNames == nil {
		c.sortedNames = slices.Sorted(c.model.DeviceNames())
	}
	return c.sortedNames
}

// views builds the computation's input for every device, in name order.
func (c *Controller) views() []DeviceView {
	names := c.names()
	views := make([]DeviceView, len(names))
	for i, name := range names {
		d, _ := c.model.Device(name)
		v := DeviceView{Name: name, Labels: d.Labels, Prev: c.model.Desired(name)}
		v.Status, v.Online = c.status.DeviceState(name, d.UID)
		views[i] = v
	}
	return views
}

func (c *Controller) deploymentsSorted() []schema.Deployment {
	if c.sortedDeps == nil {
		names := slices.Sorted(maps.Keys(c.deployments))
		c.sortedDeps = make([]schema.Deployment, len(names))
		for i, n := range names {
			c.sortedDeps[i] = *c.deployments[n]
		}
	}
	return c.sortedDeps
}
