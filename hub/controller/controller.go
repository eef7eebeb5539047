package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
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
	// minIncrementalLimit: an incremental pass declines only when more
	// devices than this (and than half the fleet) changed.
	minIncrementalLimit = 256
)

// Publisher publishes MQTT messages (QoS 1); broker.Conn is one. Publish
// must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
}

// DesiredSigner signs a desired state's canonical JSON and returns the
// payload to publish (schema.SignDesiredState); hub.Signer is one. It must
// be safe for concurrent use.
type DesiredSigner interface {
	SignDesiredState(canonical []byte) ([]byte, error)
}

// StatusSource tells the controller what agents report; the fleet model is
// one.
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
	// Model is where the controller writes the devices, their desired
	// states and the deployment statuses; default: a model of its own.
	Model *fleetmodel.Writer
	// Status supplies agent reports, for rolling updates and deployment
	// status; default: Model's.
	Status StatusSource
	// Signer, if set, signs every desired state published; the store
	// keeps the canonical (unsigned) JSON. Default: none, states are
	// published unsigned.
	Signer DesiredSigner
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
	// Now is the clock of staged rollouts (their deadlines, pauses and
	// minReadySeconds); default time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Model == nil {
		o.Model = fleetmodel.New(fleetmodel.Options{}).Writer()
	}
	if o.Status == nil {
		o.Status = o.Model.Model()
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
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Controller turns Deployments and Devices into one DesiredState per
// device, stores it and publishes it retained; it also aggregates
// deployment status and publishes that. It works level-triggered from the
// fleet model's devices (which it alone writes) and its own copy of the
// deployments, kept current by a store watch and re-read on every resync.
//
// Every field is the Run goroutine's, except the status notifications
// (under statusMu), the channels and the atomics.
type Controller struct {
	opts    Options
	log     *slog.Logger
	store   *store.Store
	storeID string
	model   *fleetmodel.Writer
	status  StatusSource
	pub     *publisher

	deployments map[string]*schema.Deployment
	loaded      bool
	listRev     uint64              // events at or below it are in the caches already
	tombstones  map[string]int64    // last generation of deleted devices
	sortedNames []string            // device names, sorted; nil when the set changed
	sortedDeps  []schema.Deployment // deployments sorted by name; nil when changed
	retryAt     time.Time           // a failed write or publish: pass again then
	passes      atomic.Uint64
	fullPasses  atomic.Uint64

	// What changed since the last pass. A pass recomputes only the
	// devices and deployments these name; full makes it recompute
	// everything (the first pass, every resync, a reload, a republish,
	// after a failure).
	full      bool
	dirtyDevs map[string]bool // device events
	dirtyDeps map[string]bool // deployment events, deletions included
	rolling   map[string]bool // deployments holding devices on an older template
	// oldSel holds, for the deployments changed since the last pass, the
	// selector they had before (nil: they are new).
	oldSel map[string]*schema.LabelSelector
	index  labelIndex         // devices by label
	aggs   map[string]*depAgg // deployment statuses, counted device by device
	// staged places Staged deployments and keeps their rollouts;
	// recheckAt is when one of their plans may change by time alone.
	staged    *stagedRollouts
	recheckAt time.Time
	// portConds holds each deployment's PortConflict condition (ports.go).
	portConds map[string]schema.DeploymentCondition
	// portClashes are the clashes of the last check, by portClash.key.
	portClashes map[string]bool
	// cfg holds the ConfigMaps and Secrets the pods use (config.go).
	cfg *configState

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
	st := opts.Store
	return &Controller{
		staged: newStagedRollouts(opts.Logger, func(dep string) ([]schema.DeploymentRevision, error) {
			return st.DeploymentRevisions(context.Background(), dep)
		}),
		opts:        opts,
		log:         opts.Logger,
		store:       opts.Store,
		storeID:     opts.Store.ID(),
		model:       opts.Model,
		status:      opts.Status,
		pub:         newPublisher(opts),
		deployments: map[string]*schema.Deployment{},
		tombstones:  map[string]int64{},
		full:        true,
		dirtyDevs:   map[string]bool{},
		dirtyDeps:   map[string]bool{},
		rolling:     map[string]bool{},
		oldSel:      map[string]*schema.LabelSelector{},
		index:       labelIndex{},
		aggs:        map[string]*depAgg{},
		cfg:         newConfigState(),
		statusDirty: map[string]bool{},
		wake:        make(chan struct{}, 1),
		statusWake:  make(chan struct{}, 1),
		ready:       make(chan struct{}),
	}, nil
}

// Ready is closed once the first pass has published every device's
// desired state.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Passes returns how many passes have completed.
func (c *Controller) Passes() uint64 { return c.passes.Load() }

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

// ---- what placement reads (fleetView) ------------------------------------------

func (c *Controller) device(name string) (fleetmodel.Device, bool) { return c.model.Device(name) }

func (c *Controller) desired(name string) *schema.DesiredState { return c.model.Desired(name) }

func (c *Controller) deviceState(name, uid string) (*schema.DeviceStatus, bool) {
	return c.status.DeviceState(name, uid)
}

func (c *Controller) size() int { return c.model.DeviceCount() }

// place is the controller's placeFunc: Staged deployments by their
// rollout's plan, the others by PlaceDeployment.
func (c *Controller) place(dep *schema.Deployment, targeted []*DeviceView) ([]schema.Pod, int) {
	if dep.Spec.Strategy.Type == schema.StrategyStaged {
		return c.staged.place(dep, targeted, c.opts.Now())
	}
	return PlaceDeployment(dep, targeted)
}
