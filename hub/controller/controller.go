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
	// CABundle, if set, gives the PEM every desired state carries as
	// caBundle (the hub's CAs, two during a CA rotation); a change is
	// picked up by the next full pass (RepublishAll). Default none.
	CABundle func() string
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
// It wires the parts: the fleet and the configuration, which the watch
// keeps current (load.go), the change set between passes (changes.go),
// and the stages of a pass, each with its own state (pass.go). Every field
// is the Run goroutine's, except the status inbox, the channels and the
// atomics.
type Controller struct {
	opts    Options
	log     *slog.Logger
	store   *store.Store
	model   *fleetmodel.Writer
	loaded  bool
	listRev uint64 // events at or below it are in the fleet already
	// standby: LoadStandby loaded the fleet for Follow (follow.go).
	standby bool

	fleet   *fleet
	cfg     *configState // the ConfigMaps and Secrets the pods use (config.go)
	changes *changeSet   // since the last pass

	// The stages.
	placer   *placer
	writer   *desiredWriter
	statuses *statusAggregator
	sender   *sender     // the stages' publishes
	agents   *agentStage // the AgentRollouts (agents.go)

	retryAt    time.Time // a stage failed: pass again then
	recheckAt  time.Time // a staged rollout's plan may change by time alone
	passes     atomic.Uint64
	fullPasses atomic.Uint64

	inbox     statusInbox // devices whose report changed
	wake      chan struct{}
	republish atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
}

// New returns a controller; call Run.
func New(opts Options) (*Controller, error) {
	opts.setDefaults()
	if opts.Store == nil || opts.Conn == nil {
		return nil, errors.New("new controller: Store and Conn are required")
	}
	f := newFleet(opts.Model, opts.Status)
	cfg := newConfigState()
	out := newSender(opts)
	placer := newPlacer(opts, f)
	agents := newAgentStage(opts.Logger)
	writer := newDesiredWriter(opts, f, cfg, newDesiredTopics(out, opts))
	writer.agent = agents.agent
	return &Controller{
		opts:     opts,
		log:      opts.Logger,
		store:    opts.Store,
		model:    opts.Model,
		fleet:    f,
		cfg:      cfg,
		changes:  newChangeSet(),
		placer:   placer,
		writer:   writer,
		statuses: newStatusAggregator(opts, f, placer, newStatusTopics(out, opts)),
		sender:   out,
		agents:   agents,
		inbox:    statusInbox{devs: map[string]bool{}, wake: make(chan struct{}, 1)},
		wake:     make(chan struct{}, 1),
		ready:    make(chan struct{}),
	}, nil
}

func newStatusAggregator(opts Options, f fleetView, rollouts rolloutStatus, topics *statusTopics) *statusAggregator {
	return &statusAggregator{
		fleet: f, model: opts.Model, rollouts: rollouts, topics: topics,
		ports: &portWatch{fleet: f, events: opts.Model.Model(), log: opts.Logger, now: opts.Now},
		aggs:  map[string]*depAgg{},
	}
}

// Ready is closed once the first pass has published every device's
// desired state.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Passes returns how many passes have completed.
func (c *Controller) Passes() uint64 { return c.passes.Load() }

// StatusChanged tells the controller that reports changed without saying
// whose: the next pass, within StatusDebounce, looks at every device.
func (c *Controller) StatusChanged() { c.inbox.changedAll() }

// DeviceStatusChanged tells the controller that the report or online
// state of one device changed; a pass follows within StatusDebounce
// (reports coalesce) and looks at the deployments that device is part of.
// It never blocks.
func (c *Controller) DeviceStatusChanged(name string) { c.inbox.changed(name) }

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

// statusInbox collects, from the status ingest's goroutines, the devices
// whose reports changed, until the next pass takes them.
type statusInbox struct {
	mu   sync.Mutex
	devs map[string]bool
	all  bool
	wake chan struct{} // a report changed: debounce, then pass
}

func (b *statusInbox) changed(name string) {
	b.mu.Lock()
	b.devs[name] = true
	b.mu.Unlock()
	b.woke()
}

func (b *statusInbox) changedAll() {
	b.mu.Lock()
	b.all = true
	b.mu.Unlock()
	b.woke()
}

func (b *statusInbox) woke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take returns and clears the devices whose reports changed, and whether
// every device's may have.
func (b *statusInbox) take() (map[string]bool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	devs, all := b.devs, b.all
	if len(devs) == 0 {
		// Not the map itself: reports keep arriving while the pass runs.
		devs = nil
	} else {
		b.devs = map[string]bool{}
	}
	b.all = false
	return devs, all
}
