package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Defaults of Options.
const (
	DefaultResyncInterval = 30 * time.Second
	DefaultStatusDebounce = 250 * time.Millisecond
	DefaultPublishWorkers = 16
	DefaultPublishTimeout = 30 * time.Second
	// maxChunkBytes bounds the values written in one store transaction,
	// well below what Badger commits at once with the store's options
	// (about 1.2 MB).
	maxChunkBytes = 512 << 10
)

// Publisher publishes MQTT messages (QoS 1); broker.Conn is one. Publish
// must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
}

// StatusSource tells the controller what agents report.
type StatusSource interface {
	// DeviceState returns the last report of the device whose uid is
	// given, and whether it counts as online (connected and not stale).
	DeviceState(name, uid string) (st *schema.DeviceStatus, online bool)
}

// Options configure a Controller. Store and Conn are required.
type Options struct {
	Store  *store.Store
	Conn   Publisher
	Topics schema.Topics
	Logger *slog.Logger
	// Status supplies agent reports, for rolling updates, deployment status
	// and the gauges; nil means no device has reported.
	Status StatusSource
	// Metrics, if set, receives the publish counters and pass durations.
	Metrics *metrics.Metrics
	// ResyncInterval is how often everything is re-read from the store
	// and recomputed, whatever happened; default 30 s.
	ResyncInterval time.Duration
	// StatusDebounce is how long after a status change the next pass runs
	// (status changes are coalesced); default 250 ms.
	StatusDebounce time.Duration
	// PublishWorkers publish in parallel (an external broker acknowledges
	// each QoS 1 message); default 16.
	PublishWorkers int
	// PublishTimeout bounds the publishes of one pass; what did not make
	// it is published by a later pass. Default 30 s.
	PublishTimeout time.Duration
	// OnDeviceRemoved is called (from the controller's goroutine) once a
	// deleted device's desired state has been removed.
	OnDeviceRemoved func(name string)
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.StatusDebounce <= 0 {
		o.StatusDebounce = DefaultStatusDebounce
	}
	if o.PublishWorkers <= 0 {
		o.PublishWorkers = DefaultPublishWorkers
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
}

// deviceEntry is what the controller keeps of a Device object.
type deviceEntry struct {
	UID    string
	Labels map[string]string
}

// Controller turns Deployments and Devices into one DesiredState per
// device, stores it and publishes it retained; it also aggregates
// deployment status and publishes that. It works level-triggered from an
// in-memory copy of the store's devices and deployments, kept current by a
// store watch and re-read on every resync.
//
// The fields under mu are written only by the Run goroutine (which reads
// them without the lock) and read by other goroutines under the lock.
type Controller struct {
	opts    Options
	log     *slog.Logger
	store   *store.Store
	storeID string

	mu          sync.RWMutex
	devices     map[string]deviceEntry
	deployments map[string]*schema.Deployment
	desired     map[string]*schema.DesiredState
	depStatus   map[string]schema.DeploymentStatus

	// Run goroutine only.
	loaded      bool
	listRev     uint64              // events at or below it are in the caches already
	tombstones  map[string]int64    // last generation of deleted devices
	desiredRaw  map[string][]byte   // JSON of desired, as stored and published
	published   map[string]int64    // generation last published per device
	clears      map[string]string   // topic → device: retained topics of deleted devices to clear
	depRaw      map[string][]byte   // last published deployment status JSON
	depClears   map[string]bool     // deleted deployments whose status must be cleared
	sortedNames []string            // device names, sorted; nil when the set changed
	sortedDeps  []schema.Deployment // deployments sorted by name; nil when changed
	retryAt     time.Time           // a failed write or publish: pass again then
	passes      atomic.Uint64
	fullPasses  atomic.Uint64

	// What changed since the last pass (Run goroutine only). A pass
	// recomputes only the devices and deployments these name; full makes
	// it recompute everything (the first pass, every resync, a reload, a
	// republish, after a failure).
	full      bool
	dirtyDevs map[string]bool // device events
	dirtyDeps map[string]bool // deployment events, deletions included
	rolling   map[string]bool // deployments holding devices on an older template
	// oldSel holds, for the deployments changed since the last pass, the
	// selector they had before (nil: they are new): the devices that may
	// hold their pod.
	oldSel map[string]*schema.LabelSelector
	index  labelIndex         // devices by label
	aggs   map[string]*depAgg // deployment statuses, counted device by device

	// Devices whose report changed, from the status ingest.
	statusMu    sync.Mutex
	statusDirty map[string]bool
	statusAll   bool

	wake       chan struct{}
	statusWake chan struct{}
	republish  atomic.Bool
	ready      chan struct{}
	readyOnce  sync.Once
}

// New returns a controller; call Run.
func New(opts Options) (*Controller, error) {
	opts.setDefaults()
	if opts.Store == nil || opts.Conn == nil {
		return nil, errors.New("new controller: Store and Conn are required")
	}
	return &Controller{
		opts:        opts,
		log:         opts.Logger,
		store:       opts.Store,
		storeID:     opts.Store.ID(),
		devices:     map[string]deviceEntry{},
		deployments: map[string]*schema.Deployment{},
		desired:     map[string]*schema.DesiredState{},
		depStatus:   map[string]schema.DeploymentStatus{},
		tombstones:  map[string]int64{},
		desiredRaw:  map[string][]byte{},
		published:   map[string]int64{},
		clears:      map[string]string{},
		depRaw:      map[string][]byte{},
		depClears:   map[string]bool{},
		full:        true,
		dirtyDevs:   map[string]bool{},
		dirtyDeps:   map[string]bool{},
		rolling:     map[string]bool{},
		oldSel:      map[string]*schema.LabelSelector{},
		index:       labelIndex{},
		aggs:        map[string]*depAgg{},
		statusDirty: map[string]bool{},
		wake:        make(chan struct{}, 1),
		statusWake:  make(chan struct{}, 1),
		ready:       make(chan struct{}),
	}, nil
}

// ---- what other parts read ---------------------------------------------------

// Device returns the uid and labels of a device the controller knows. The
// labels map must not be modified.
func (c *Controller) Device(name string) (uid string, labels map[string]string, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.devices[name]
	return d.UID, d.Labels, ok
}

// DeviceRef names a registered device.
type DeviceRef struct{ Name, UID string }

// Devices returns the registered devices whose labels satisfy sel (all of
// them for an empty sel), by name.
func (c *Controller) Devices(sel schema.LabelSelector) []DeviceRef {
	c.mu.RLock()
	out := make([]DeviceRef, 0, len(c.devices))
	for name, d := range c.devices {
		if sel.Matches(d.Labels) {
			out = append(out, DeviceRef{Name: name, UID: d.UID})
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b DeviceRef) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Desired returns the device's current desired state (nil if none). It
// must not be modified.
func (c *Controller) Desired(name string) *schema.DesiredState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.desired[name]
}

// DeploymentStatus returns the aggregated status of a deployment as of the
// last pass.
func (c *Controller) DeploymentStatus(name string) (schema.DeploymentStatus, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.depStatus[name]
	return s, ok
}

// DeviceCount returns how many devices are registered.
func (c *Controller) DeviceCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.devices)
}

// Counts returns how many devices there are, how many are online and how
// many have converged. It looks at every device: call it for a metrics
// scrape, not in a loop.
func (c *Controller) Counts() (devices, online, converged int64) {
	type item struct {
		name, uid string
		desired   *schema.DesiredState
	}
	c.mu.RLock()
	items := make([]item, 0, len(c.devices))
	for name, d := range c.devices {
		items = append(items, item{name, d.UID, c.desired[name]})
	}
	c.mu.RUnlock()
	for _, it := range items {
		var st *schema.DeviceStatus
		var on bool
		if c.opts.Status != nil {
			st, on = c.opts.Status.DeviceState(it.name, it.uid)
		}
		if on {
			online++
		}
		if it.desired != nil && Converged(it.desired, st) {
			converged++
		}
	}
	return int64(len(items)), online, converged
}

// SetStatusSource sets Options.Status; call it before Run (the status
// ingest and the controller each need the other).
func (c *Controller) SetStatusSource(s StatusSource) { c.opts.Status = s }

// Ready is closed once the first pass has published every device's
// desired state.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// StatusChanged tells the controller that reports changed without saying
// whose: the next pass, within StatusDebounce, looks at every device.
func (c *Controller) StatusChanged() {
	c.statusMu.Lock()
	c.statusAll = true
	c.statusMu.Unlock()
	c.statusWoke()
}

// DeviceStatusChanged tells the controller that the report or online
// state of one device changed; a pass follows within StatusDebounce
// (reports coalesce) and looks at the deployments that device is part of.
// It never blocks.
func (c *Controller) DeviceStatusChanged(name string) {
	c.statusMu.Lock()
	c.statusDirty[name] = true
	c.statusMu.Unlock()
	c.statusWoke()
}

func (c *Controller) statusWoke() {
	select {
	case c.statusWake <- struct{}{}:
	default:
	}
}

// takeStatus returns and clears the devices whose reports changed.
func (c *Controller) takeStatus() (map[string]bool, bool) {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	devs, all := c.statusDirty, c.statusAll
	if len(devs) == 0 {
		// Not the map itself: reports keep arriving while the pass runs.
		devs = nil
	} else {
		c.statusDirty = map[string]bool{}
	}
	c.statusAll = false
	return devs, all
}

// RepublishAll makes the next pass publish every desired state and
// deployment status again, as after a reconnect to an external broker
// that may have lost its retained messages.
func (c *Controller) RepublishAll() {
	c.republish.Store(true)
	c.trigger()
}

func (c *Controller) trigger() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// ---- loading -------------------------------------------------------------------

// deviceMeta is the part of a stored Device the controller needs.
type deviceMeta struct {
	Metadata struct {
		Name   string            `json:"name"`
		UID    string            `json:"uid"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// Load reads devices, deployments, desired states and generation
// tombstones from the store. Run calls it if it has not been called;
// call it first when the caches must be filled before Run starts (the
// status ingest needs to know the devices).
func (c *Controller) Load(ctx context.Context) error {
	return c.load(ctx, true)
}

// load reads the objects and, withDesired, the desired states and
// tombstones (which only the controller writes, so a resync can skip
// them).
func (c *Controller) load(ctx context.Context, withDesired bool) error {
	devices := map[string]deviceEntry{}
	deployments := map[string]*schema.Deployment{}
	desired := map[string]*schema.DesiredState{}
	desiredRaw := map[string][]byte{}
	tombstones := map[string]int64{}
	var rev uint64
	err := c.store.View(ctx, func(t *store.Txn) error {
		rev = t.Revision()
		err := t.Scan(store.ObjectKey(schema.KindDevice, ""), func(key string, val []byte) error {
			var m deviceMeta
			if err := json.Unmarshal(val, &m); err != nil {
				return fmt.Errorf("decode device %s: %w", key, err)
			}
			devices[m.Metadata.Name] = deviceEntry{UID: m.Metadata.UID, Labels: m.Metadata.Labels}
			return nil
		})
		if err != nil {
			return err
		}
		err = t.ListObjects(schema.KindDeployment, func(o schema.Object) error {
			d := o.(*schema.Deployment)
			deployments[d.Metadata.Name] = d
			return nil
		})
		if err != nil || !withDesired {
			return err
		}
		err = t.Scan(store.DesiredPrefix, func(key string, val []byte) error {
			var ds schema.DesiredState
			if err := json.Unmarshal(val, &ds); err != nil {
				// Never fatal: the device gets a fresh desired state with
				// a generation above any tombstone.
				c.log.Error("stored desired state does not decode; recomputing it", "key", key, "err", err)
				return nil
			}
			name := key[len(store.DesiredPrefix):]
			desired[name] = &ds
			desiredRaw[name] = append([]byte(nil), val...)
			return nil
		})
		if err != nil {
			return err
		}
		return t.Scan(store.DesiredGenerationPrefix, func(key string, val []byte) error {
			g, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				c.log.Error("stored generation tombstone does not parse", "key", key, "err", err)
				return nil
			}
			tombstones[key[len(store.DesiredGenerationPrefix):]] = g
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("controller: load: %w", err)
	}
	index := labelIndex{}
	for name, d := range devices {
		index.add(name, d.Labels)
	}
	c.index = index
	c.mu.Lock()
	c.devices, c.deployments = devices, deployments
	if withDesired {
		c.desired = desired
	}
	c.mu.Unlock()
	if withDesired {
		c.desiredRaw, c.tombstones = desiredRaw, tombstones
	}
	c.listRev = rev
	c.sortedNames, c.sortedDeps = nil, nil
	c.loaded = true
	c.full = true
	return nil
}

// ---- the loop ------------------------------------------------------------------

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
	var statusTimer, retryTimer *time.Timer
	var statusC, retryC <-chan time.Time
	defer func() {
		for _, t := range []*time.Timer{statusTimer, retryTimer} {
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
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok || ev.Type == store.EventError {
				if ctx.Err() != nil {
					return nil
				}
				if ok {
					c.log.Warn("controller watch ended; reloading", "err", ev.Err)
				}
				if events, err = c.rewatch(ctx); err != nil {
					return err
				}
			} else {
				c.apply(ev)
				c.drain(events)
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

// watch watches every kind from the caches' revision; when the store no
// longer holds it, it reloads first.
func (c *Controller) watch(ctx context.Context) (<-chan store.Event, error) {
	ch, err := c.store.Watch(ctx, "", c.listRev)
	if errors.Is(err, store.ErrExpired) {
		return c.rewatch(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("controller: watch: %w", err)
	}
	return ch, nil
}

// rewatch reloads the caches and watches from their revision.
func (c *Controller) rewatch(ctx context.Context) (<-chan store.Event, error) {
	for attempt := 0; ; attempt++ {
		if err := c.Load(ctx); err != nil {
			return nil, err
		}
		ch, err := c.store.Watch(ctx, "", c.listRev)
		if err == nil {
			return ch, nil
		}
		if !errors.Is(err, store.ErrExpired) || attempt > 10 {
			return nil, fmt.Errorf("controller: watch: %w", err)
		}
	}
}

// drain applies the events already waiting, so a burst is one pass.
func (c *Controller) drain(events <-chan store.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok || ev.Type == store.EventError {
				// The loop sees the end on its next receive.
				return
			}
			c.apply(ev)
		default:
			return
		}
	}
}

// apply updates the caches with one store event.
func (c *Controller) apply(ev store.Event) {
	if ev.Revision <= c.listRev {
		return
	}
	switch ev.Kind {
	case schema.KindDevice:
		c.dirtyDevs[ev.Name] = true
		if ev.Type == store.EventDeleted {
			c.mu.Lock()
			old, known := c.devices[ev.Name]
			delete(c.devices, ev.Name)
			c.mu.Unlock()
			if known {
				c.index.remove(ev.Name, old.Labels)
			}
			c.sortedNames = nil
			return
		}
		var m deviceMeta
		if err := json.Unmarshal(ev.Object, &m); err != nil {
			c.log.Error("device event does not decode", "device", ev.Name, "err", err)
			return
		}
		c.mu.Lock()
		old, known := c.devices[ev.Name]
		c.devices[ev.Name] = deviceEntry{UID: m.Metadata.UID, Labels: m.Metadata.Labels}
		c.mu.Unlock()
		if known {
			c.index.remove(ev.Name, old.Labels)
		} else {
			c.sortedNames = nil
		}
		c.index.add(ev.Name, m.Metadata.Labels)
	case schema.KindDeployment:
		c.sortedDeps = nil
		c.dirtyDeps[ev.Name] = true
		if _, ok := c.oldSel[ev.Name]; !ok {
			var sel *schema.LabelSelector
			if old, ok := c.deployments[ev.Name]; ok {
				sel = &old.Spec.Selector
			}
			c.oldSel[ev.Name] = sel
		}
		if ev.Type == store.EventDeleted {
			c.mu.Lock()
			delete(c.deployments, ev.Name)
			c.mu.Unlock()
			return
		}
		var d schema.Deployment
		if err := json.Unmarshal(ev.Object, &d); err != nil {
			c.log.Error("deployment event does not decode", "deployment", ev.Name, "err", err)
			return
		}
		c.mu.Lock()
		c.deployments[ev.Name] = &d
		c.mu.Unlock()
	}
}

// ---- one pass ------------------------------------------------------------------

type desiredChange struct {
	name    string
	ds      *schema.DesiredState // nil: the device is gone
	raw     []byte
	lastGen int64 // for a removal: the tombstone
	tomb    bool  // a tombstone existed and is now superseded
}

// pass brings the stored and published desired states and the deployment
// statuses up to date with what changed since the last pass (or with
// everything, when c.full). Failures are logged and retried by a later,
// full pass (c.retryAt).
func (c *Controller) pass(ctx context.Context) {
	start := time.Now()
	c.retryAt = time.Time{}
	statusDevs, statusAll := c.takeStatus()
	if c.republish.Swap(false) {
		clear(c.published)
		clear(c.depRaw)
		c.full = true
	}
	if c.full || statusAll {
		c.full = false
		clear(c.dirtyDevs)
		clear(c.dirtyDeps)
		clear(c.oldSel)
		c.fullPass(ctx)
		c.fullPasses.Add(1)
	} else {
		c.incrementalPass(ctx, statusDevs)
	}
	if !c.retryAt.IsZero() {
		// What failed is found again by recomputing everything.
		c.full = true
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}
	c.passes.Add(1)
}

// Passes returns how many passes have completed.
func (c *Controller) Passes() uint64 { return c.passes.Load() }

// fullPass recomputes every device's desired state and every deployment's
// status.
func (c *Controller) fullPass(ctx context.Context) {
	views := c.views()
	deps := c.deploymentsSorted()
	clear(c.rolling)
	pods := placeAll(views, deps, func(dep string) { c.rolling[dep] = true })
	var changes []desiredChange
	for i := range views {
		want := pods[views[i].Name]
		sortPods(want)
		if ch, ok := c.change(views[i].Name, want); ok {
			changes = append(changes, ch)
		}
	}
	for name, prev := range c.desired {
		if _, ok := c.devices[name]; !ok {
			changes = append(changes, desiredChange{name: name, lastGen: prev.Generation})
		}
	}
	if len(changes) > 0 {
		c.commit(ctx, changes)
	}
	c.publishDesired(ctx)
	clear(c.aggs)
	names := make([]string, len(deps))
	for i := range deps {
		c.rebuildAgg(&deps[i])
		names[i] = deps[i].Metadata.Name
	}
	for name := range c.depRaw {
		if _, ok := c.deployments[name]; !ok {
			names = append(names, name)
		}
	}
	c.publishAggs(ctx, names)
}

// incrementalPass recomputes what the events and reports since the last
// pass can have changed: the devices whose object changed, the
// deployments that changed (on the devices their selectors name), the
// placement of rollouts in progress that the reporting devices are part
// of, and those devices' place in deployment statuses. Its cost follows
// the size of the change, not of the fleet.
func (c *Controller) incrementalPass(ctx context.Context, statusDevs map[string]bool) {
	deps := c.deploymentsSorted()
	hashes := make(map[string]string, len(deps))
	for i := range deps {
		hashes[deps[i].Metadata.Name] = schema.PodSpecHash(deps[i].Spec.Template.Spec)
	}
	place := map[string]bool{}   // deployments placed on every device they may concern
	touched := map[string]bool{} // deployments whose status may have changed
	for name := range c.dirtyDeps {
		place[name] = true
		touched[name] = true
	}
	passDevs := maps.Clone(c.dirtyDevs)
	work := map[string][]schema.Pod{} // devices whose pods are recomputed
	var removed []desiredChange
	for name := range passDevs {
		d, ok := c.devices[name]
		prev := c.desired[name]
		for i := range deps {
			// A device joining or leaving a rollout in progress changes
			// its budget.
			depName := deps[i].Metadata.Name
			if c.rolling[depName] && (findPod(prev, depName) != nil || ok && deps[i].Spec.Selector.Matches(d.Labels)) {
				place[depName] = true
			}
		}
		if !ok {
			if prev != nil {
				removed = append(removed, desiredChange{name: name, lastGen: prev.Generation})
			}
			continue
		}
		pods := []schema.Pod{}
		for i := range deps {
			dep := &deps[i]
			depName := dep.Metadata.Name
			p := findPod(prev, depName)
			switch {
			case place[depName]:
				// Placed below; keep the slot meanwhile.
				if p != nil {
					pods = append(pods, *p)
				}
			case !dep.Spec.Selector.Matches(d.Labels):
			case p != nil && p.Hash != hashes[depName] && dep.Spec.Strategy.Type == schema.StrategyRollingUpdate:
				// Part of a rollout: its budget decides.
				place[depName] = true
				pods = append(pods, *p)
			default:
				pods = append(pods, schema.Pod{Name: depName, Spec: dep.Spec.Template.Spec, Hash: hashes[depName]})
			}
		}
		work[name] = pods
	}
	for name := range statusDevs {
		d, ok := c.devices[name]
		if !ok {
			continue
		}
		prev := c.desired[name]
		for i := range deps {
			depName := deps[i].Metadata.Name
			if c.rolling[depName] && (deps[i].Spec.Selector.Matches(d.Labels) || findPod(prev, depName) != nil) {
				place[depName] = true
			}
		}
	}
	for _, depName := range slices.Sorted(maps.Keys(place)) {
		c.placeEverywhere(depName, passDevs, work)
	}
	clear(c.dirtyDevs)
	clear(c.dirtyDeps)
	clear(c.oldSel)

	changes := removed
	for _, name := range slices.Sorted(maps.Keys(work)) {
		if ch, ok := c.change(name, work[name]); ok {
			changes = append(changes, ch)
		}
	}
	if len(changes) > 0 {
		c.commit(ctx, changes)
	}
	c.publishDesired(ctx)

	// Deployment statuses: recount the changed deployments, and the
	// devices that changed or reported in the others.
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
			for i := range deps {
				depName := deps[i].Metadata.Name
				if rebuilt[depName] {
					continue
				}
				if _, counted := c.aggs[depName].cat[name]; counted || c.devices[name].Labels != nil && deps[i].Spec.Selector.Matches(c.devices[name].Labels) {
					c.updateAgg(&deps[i], name)
					touched[depName] = true
				}
			}
		}
	}
	if len(touched) > 0 || len(c.depClears) > 0 {
		c.publishAggs(ctx, slices.Sorted(maps.Keys(touched)))
	}
}

// placeEverywhere recomputes the pod of one deployment (or, deleted, its
// absence) on every device it may concern: those its selector matches,
// those its previous selector matched (they hold its pod) and those that
// changed in this pass (passDevs). Results go into work: the pods of the
// devices it touches.
func (c *Controller) placeEverywhere(depName string, passDevs map[string]bool, work map[string][]schema.Pod) {
	pods := func(name string) []schema.Pod {
		if p, ok := work[name]; ok {
			return p
		}
		if ds := c.desired[name]; ds != nil {
			return slices.Clone(ds.Pods)
		}
		return []schema.Pod{}
	}
	hasPod := func(name string) bool {
		var p []schema.Pod
		if w, ok := work[name]; ok {
			p = w
		} else if ds := c.desired[name]; ds != nil {
			p = ds.Pods
		}
		return slices.ContainsFunc(p, func(p schema.Pod) bool { return p.Name == depName })
	}
	// Devices that may hold the pod without being targeted now.
	maybe := maps.Clone(passDevs)
	if maybe == nil {
		maybe = map[string]bool{}
	}
	if sel := c.oldSel[depName]; sel != nil {
		for _, name := range c.selectNames(*sel) {
			maybe[name] = true
		}
	}
	dep, ok := c.deployments[depName]
	var targeted []*DeviceView
	if ok {
		rolling := dep.Spec.Strategy.Type == schema.StrategyRollingUpdate
		for _, name := range c.selectNames(dep.Spec.Selector) {
			delete(maybe, name)
			d := c.devices[name]
			v := &DeviceView{Name: name, Labels: d.Labels, Prev: c.desired[name]}
			if rolling && c.opts.Status != nil {
				v.Status, v.Online = c.opts.Status.DeviceState(name, d.UID)
			}
			targeted = append(targeted, v)
		}
	}
	for name := range maybe {
		if _, exists := c.devices[name]; exists && hasPod(name) {
			work[name] = slices.DeleteFunc(pods(name), func(p schema.Pod) bool { return p.Name == depName })
		}
	}
	if !ok {
		delete(c.rolling, depName)
		return
	}
	placed, held := PlaceDeployment(dep, targeted)
	if held > 0 {
		c.rolling[depName] = true
	} else {
		delete(c.rolling, depName)
	}
	for i, v := range targeted {
		if p := findPod(v.Prev, depName); p != nil && p.Hash == placed[i].Hash {
			if _, ok := work[v.Name]; !ok {
				continue // unchanged, and nothing else changed it
			}
		}
		p := pods(v.Name)
		if j := slices.IndexFunc(p, func(p schema.Pod) bool { return p.Name == depName }); j >= 0 {
			p[j] = placed[i]
		} else {
			p = append(p, placed[i])
			sortPods(p)
		}
		work[v.Name] = p
	}
}

// change returns the desired state a device gets if want differs from
// what it has (or it has none, or one from another store).
func (c *Controller) change(name string, want []schema.Pod) (desiredChange, bool) {
	prev := c.desired[name]
	if prev != nil && prev.Store == c.storeID && SamePods(prev.Pods, want) {
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
		c.sortedNames = slices.Sorted(maps.Keys(c.devices))
	}
	return c.sortedNames
}

// views builds the computation's input for every device, in name order.
func (c *Controller) views() []DeviceView {
	names := c.names()
	views := make([]DeviceView, len(names))
	for i, name := range names {
		views[i] = c.view(name)
	}
	return views
}

func (c *Controller) view(name string) DeviceView {
	d := c.devices[name]
	v := DeviceView{Name: name, Labels: d.Labels, Prev: c.desired[name]}
	if c.opts.Status != nil {
		v.Status, v.Online = c.opts.Status.DeviceState(name, d.UID)
	}
	return v
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

// commit stores the changes in as few transactions as the store's size
// limit allows, and updates the caches for what committed.
//
// Each chunk is published as soon as it is stored, while the next one is
// written: the first devices hear of a change that touches 10,000 after
// one chunk's fsync, not after all of them.
func (c *Controller) commit(ctx context.Context, changes []desiredChange) {
	var inflight []*sending
	defer func() {
		n := 0
		for _, s := range inflight {
			n += c.finish(s)
		}
		if c.opts.Metrics != nil {
			c.opts.Metrics.DesiredPublishes.Add(float64(n))
		}
	}()
	for len(changes) > 0 {
		n, size := 0, 0
		for n < len(changes) && (n == 0 || size+len(changes[n].raw) < maxChunkBytes) {
			size += len(changes[n].raw) + 64
			n++
		}
		chunk := changes[:n]
		changes = changes[n:]
		_, err := c.store.Write(ctx, func(t *store.Txn) error {
			for _, ch := range chunk {
				if ch.ds == nil {
					if err := t.Delete(store.DesiredKey(ch.name)); err != nil {
						return err
					}
					if err := t.Set(store.DesiredGenerationKey(ch.name), []byte(strconv.FormatInt(ch.lastGen, 10))); err != nil {
						return err
					}
					continue
				}
				if err := t.Set(store.DesiredKey(ch.name), ch.raw); err != nil {
					return err
				}
				if ch.tomb {
					if err := t.Delete(store.DesiredGenerationKey(ch.name)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("store desired states", "devices", len(chunk), "err", err)
				c.retryAt = time.Now().Add(time.Second)
			}
			return
		}
		c.mu.Lock()
		for _, ch := range chunk {
			if ch.ds == nil {
				delete(c.desired, ch.name)
			} else {
				c.desired[ch.name] = ch.ds
			}
		}
		c.mu.Unlock()
		for _, ch := range chunk {
			if ch.ds == nil {
				delete(c.desiredRaw, ch.name)
				delete(c.published, ch.name)
				c.tombstones[ch.name] = ch.lastGen
				for _, topic := range c.deviceTopics(ch.name) {
					c.clears[topic] = ch.name
				}
				c.log.Info("device removed: desired state cleared", "device", ch.name, "last_generation", ch.lastGen)
				if c.opts.OnDeviceRemoved != nil {
					c.opts.OnDeviceRemoved(ch.name)
				}
				continue
			}
			c.desiredRaw[ch.name] = ch.raw
			delete(c.tombstones, ch.name)
			for _, topic := range c.deviceTopics(ch.name) {
				delete(c.clears, topic)
			}
			c.log.Debug("desired state", "device", ch.name, "generation", ch.ds.Generation, "pods", len(ch.ds.Pods))
		}
		var msgs []message
		for _, ch := range chunk {
			if ch.ds != nil {
				msgs = append(msgs, c.desiredMessage(ch.name, ch.ds.Generation))
			}
		}
		inflight = append(inflight, c.send(ctx, msgs))
	}
}

// deviceTopics are the retained topics cleared when a device is removed:
// its desired topic, and its own status and online topics, so monitors do
// not keep seeing a device that no longer exists.
func (c *Controller) deviceTopics(name string) []string {
	return []string{
		c.opts.Topics.Device(name, schema.TopicDesired),
		c.opts.Topics.Device(name, schema.TopicStatus),
		c.opts.Topics.Device(name, schema.TopicOnline),
	}
}

// message is one MQTT publish of a pass.
type message struct {
	topic   string
	payload []byte
	done    func() // called, on the loop goroutine, once published
}

// publishDesired publishes every desired state not yet published at its
// generation, and clears the topics of removed devices.
func (c *Controller) publishDesired(ctx context.Context) {
	var msgs []message
	for name, ds := range c.desired {
		if c.published[name] == ds.Generation {
			continue
		}
		msgs = append(msgs, c.desiredMessage(name, ds.Generation))
	}
	for topic := range c.clears {
		msgs = append(msgs, message{topic: topic, done: func() { delete(c.clears, topic) }})
	}
	n := c.publish(ctx, msgs)
	if c.opts.Metrics != nil {
		c.opts.Metrics.DesiredPublishes.Add(float64(n))
	}
}

// desiredMessage is the retained publish of a device's desired state.
func (c *Controller) desiredMessage(name string, gen int64) message {
	return message{
		topic: c.opts.Topics.Device(name, schema.TopicDesired), payload: c.desiredRaw[name],
		done: func() { c.published[name] = gen },
	}
}

// publish sends msgs with up to PublishWorkers in flight, calls done for
// each one published, and returns how many were published. What failed
// is left for a later pass.
func (c *Controller) publish(ctx context.Context, msgs []message) int {
	return c.finish(c.send(ctx, msgs))
}

// sending is a batch of publishes under way (see send).
type sending struct {
	msgs     []message
	ok       []bool
	firstErr atomic.Pointer[error]
	wg       sync.WaitGroup
	parent   context.Context
	cancel   context.CancelFunc
}

// send starts publishing msgs with up to PublishWorkers in flight and
// returns at once; finish waits and records the outcome. It touches no
// controller state, so several batches may be under way.
func (c *Controller) send(ctx context.Context, msgs []message) *sending {
	s := &sending{msgs: msgs, ok: make([]bool, len(msgs)), parent: ctx}
	if len(msgs) == 0 {
		return s
	}
	ctx, s.cancel = context.WithTimeout(ctx, c.opts.PublishTimeout)
	var next atomic.Int64
	for range min(c.opts.PublishWorkers, len(msgs)) {
		s.wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) || ctx.Err() != nil {
					return
				}
				if err := c.opts.Conn.Publish(ctx, msgs[i].topic, msgs[i].payload, true); err != nil {
					s.firstErr.CompareAndSwap(nil, &err)
					continue
				}
				s.ok[i] = true
			}
		})
	}
	return s
}

// finish waits for a batch, calls done for each message published (on the
// loop goroutine) and returns how many were. A failure schedules a retry.
func (c *Controller) finish(s *sending) int {
	s.wg.Wait()
	if s.cancel != nil {
		s.cancel()
	}
	n := 0
	for i, m := range s.msgs {
		if s.ok[i] {
			n++
			if m.done != nil {
				m.done()
			}
		}
	}
	if n < len(s.msgs) && s.parent.Err() == nil {
		var err error
		if p := s.firstErr.Load(); p != nil {
			err = *p
		}
		c.log.Warn("mqtt publish failed; retrying", "published", n, "failed", len(s.msgs)-n, "err", err)
		c.retryAt = time.Now().Add(time.Second)
	}
	return n
}

// deploymentStatusMessage is the payload of
// {prefix}/deployments/{name}/status.
type deploymentStatusMessage struct {
	schema.TypeMeta
	Name string `json:"name"`
	schema.DeploymentStatus
}

// publishAggs publishes the status of the named deployments that changed
// since it was last published, and clears the status of the deleted ones.
func (c *Controller) publishAggs(ctx context.Context, names []string) {
	var msgs []message
	c.mu.Lock()
	for _, name := range names {
		a := c.aggs[name]
		if _, ok := c.deployments[name]; !ok || a == nil {
			delete(c.depStatus, name)
			if c.depRaw[name] != nil {
				c.depClears[name] = true
			}
			continue
		}
		c.depStatus[name] = a.status
		raw, err := json.Marshal(deploymentStatusMessage{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentStatus"},
			Name:     name, DeploymentStatus: a.status,
		})
		if err != nil {
			c.log.Error("encode deployment status", "deployment", name, "err", err)
			continue
		}
		delete(c.depClears, name)
		if string(c.depRaw[name]) == string(raw) {
			continue
		}
		msgs = append(msgs, message{topic: c.opts.Topics.DeploymentStatus(name), payload: raw, done: func() { c.depRaw[name] = raw }})
	}
	c.mu.Unlock()
	for name := range c.depClears {
		msgs = append(msgs, message{topic: c.opts.Topics.DeploymentStatus(name), done: func() {
			delete(c.depRaw, name)
			delete(c.depClears, name)
		}})
	}
	n := c.publish(ctx, msgs)
	if c.opts.Metrics != nil {
		c.opts.Metrics.DeploymentStatusPublishes.Add(float64(n))
	}
}
