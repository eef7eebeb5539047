package controller

import (
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
	DefaultStatusDebounce = time.Second
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
	// (status changes are coalesced); default 1 s.
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
	counts      struct{ dev, on, conv atomic.Int64 }
	passes      atomic.Uint64

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

// Counts returns, as of the last pass, how many devices there are, how
// many are online and how many have converged.
func (c *Controller) Counts() (devices, online, converged int64) {
	return c.counts.dev.Load(), c.counts.on.Load(), c.counts.conv.Load()
}

// SetStatusSource sets Options.Status; call it before Run (the status
// ingest and the controller each need the other).
func (c *Controller) SetStatusSource(s StatusSource) { c.opts.Status = s }

// Ready is closed once the first pass has published every device's
// desired state.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// StatusChanged tells the controller that some agent's report changed; a
// pass follows within StatusDebounce (reports coalesce).
func (c *Controller) StatusChanged() {
	select {
	case c.statusWake <- struct{}{}:
	default:
	}
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
		c.sortedNames = nil
		if ev.Type == store.EventDeleted {
			c.mu.Lock()
			delete(c.devices, ev.Name)
			c.mu.Unlock()
			return
		}
		var m deviceMeta
		if err := json.Unmarshal(ev.Object, &m); err != nil {
			c.log.Error("device event does not decode", "device", ev.Name, "err", err)
			return
		}
		c.mu.Lock()
		c.devices[ev.Name] = deviceEntry{UID: m.Metadata.UID, Labels: m.Metadata.Labels}
		c.mu.Unlock()
	case schema.KindDeployment:
		c.sortedDeps = nil
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

// pass recomputes every device's desired state, stores and publishes what
// changed, and aggregates deployment status. Failures are logged and
// retried by a later pass (c.retryAt).
func (c *Controller) pass(ctx context.Context) {
	start := time.Now()
	c.retryAt = time.Time{}
	if c.republish.Swap(false) {
		clear(c.published)
		clear(c.depRaw)
	}
	views := c.views()
	deps := c.deploymentsSorted()
	pods := DesiredPods(views, deps)

	var changes []desiredChange
	for i := range views {
		v := &views[i]
		want := pods[v.Name]
		prev := v.Prev
		if prev != nil && prev.Store == c.storeID && SamePods(prev.Pods, want) {
			continue
		}
		gen := int64(1)
		_, tomb := c.tombstones[v.Name]
		if prev != nil {
			gen = prev.Generation + 1
		} else if tomb {
			gen = c.tombstones[v.Name] + 1
		}
		ds := &schema.DesiredState{
			TypeMeta:   schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
			Device:     v.Name,
			Generation: gen,
			Store:      c.storeID,
			Pods:       want,
		}
		raw, err := json.Marshal(ds)
		if err != nil {
			c.log.Error("encode desired state", "device", v.Name, "err", err)
			continue
		}
		changes = append(changes, desiredChange{name: v.Name, ds: ds, raw: raw, tomb: tomb})
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
	c.aggregate(ctx, views, deps)
	if c.opts.Metrics != nil {
		c.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}
	c.passes.Add(1)
}

// Passes returns how many passes have completed.
func (c *Controller) Passes() uint64 { return c.passes.Load() }

// views builds the computation's input, in name order.
func (c *Controller) views() []DeviceView {
	if c.sortedNames == nil {
		c.sortedNames = slices.Sorted(maps.Keys(c.devices))
	}
	views := make([]DeviceView, len(c.sortedNames))
	var online, converged int64
	for i, name := range c.sortedNames {
		d := c.devices[name]
		v := DeviceView{Name: name, Labels: d.Labels, Prev: c.desired[name]}
		if c.opts.Status != nil {
			v.Status, v.Online = c.opts.Status.DeviceState(name, d.UID)
		}
		if v.Online {
			online++
		}
		if v.Prev != nil && Converged(v.Prev, v.Status) {
			converged++
		}
		views[i] = v
	}
	c.counts.dev.Store(int64(len(views)))
	c.counts.on.Store(online)
	c.counts.conv.Store(converged)
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

// commit stores the changes in as few transactions as the store's size
// limit allows, and updates the caches for what committed.
func (c *Controller) commit(ctx context.Context, changes []desiredChange) {
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
		gen := ds.Generation
		msgs = append(msgs, message{
			topic: c.opts.Topics.Device(name, schema.TopicDesired), payload: c.desiredRaw[name],
			done: func() { c.published[name] = gen },
		})
	}
	for topic := range c.clears {
		msgs = append(msgs, message{topic: topic, done: func() { delete(c.clears, topic) }})
	}
	n := c.publish(ctx, msgs)
	if c.opts.Metrics != nil {
		c.opts.Metrics.DesiredPublishes.Add(float64(n))
	}
}

// publish sends msgs with up to PublishWorkers in flight, calls done for
// each one published, and returns how many were published. What failed
// is left for a later pass.
func (c *Controller) publish(ctx context.Context, msgs []message) int {
	if len(msgs) == 0 {
		return 0
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.opts.PublishTimeout)
	defer cancel()
	ok := make([]bool, len(msgs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range min(c.opts.PublishWorkers, len(msgs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) || ctx.Err() != nil {
					return
				}
				err := c.opts.Conn.Publish(ctx, msgs[i].topic, msgs[i].payload, true)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				ok[i] = true
			}
		})
	}
	wg.Wait()
	n := 0
	for i, m := range msgs {
		if ok[i] {
			n++
			if m.done != nil {
				m.done()
			}
		}
	}
	if n < len(msgs) && parent.Err() == nil {
		var err error
		if p := firstErr.Load(); p != nil {
			err = *p
		}
		c.log.Warn("mqtt publish failed; retrying", "published", n, "failed", len(msgs)-n, "err", err)
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

// aggregate computes every deployment's status and publishes the ones that
// changed.
func (c *Controller) aggregate(ctx context.Context, views []DeviceView, deps []schema.Deployment) {
	statuses := make(map[string]schema.DeploymentStatus, len(deps))
	var msgs []message
	for i := range deps {
		d := &deps[i]
		s := AggregateDeployment(d, views)
		statuses[d.Metadata.Name] = s
		raw, err := json.Marshal(deploymentStatusMessage{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentStatus"},
			Name:     d.Metadata.Name, DeploymentStatus: s,
		})
		if err != nil {
			c.log.Error("encode deployment status", "deployment", d.Metadata.Name, "err", err)
			continue
		}
		name := d.Metadata.Name
		delete(c.depClears, name)
		if string(c.depRaw[name]) == string(raw) {
			continue
		}
		msgs = append(msgs, message{topic: c.opts.Topics.DeploymentStatus(name), payload: raw, done: func() { c.depRaw[name] = raw }})
	}
	for name := range c.depRaw {
		if _, ok := statuses[name]; !ok {
			c.depClears[name] = true
		}
	}
	for name := range c.depClears {
		msgs = append(msgs, message{topic: c.opts.Topics.DeploymentStatus(name), done: func() {
			delete(c.depRaw, name)
			delete(c.depClears, name)
		}})
	}
	c.mu.Lock()
	c.depStatus = statuses
	c.mu.Unlock()
	n := c.publish(ctx, msgs)
	if c.opts.Metrics != nil {
		c.opts.Metrics.DeploymentStatusPublishes.Add(float64(n))
	}
}
