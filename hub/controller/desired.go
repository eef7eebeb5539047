package controller

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// desiredModel is where the desired writer records what it committed;
// fleetmodel.Writer is one.
type desiredModel interface {
	SetDesired(n int, at func(i int) (string, *schema.DesiredState))
}

// desiredWriter is the second stage of a pass: it turns each device's pods
// into the device's DesiredState (with the ConfigMaps and Secrets they
// use), decides which changed, commits those to the store in chunks (new
// generations; tombstones for removed devices), records them in the model
// and publishes them retained. It keeps the tombstones and the desired
// topics; it reads the fleet and the configuration.
type desiredWriter struct {
	log        *slog.Logger
	store      desiredStore
	storeID    string
	fleet      fleetView
	cfg        *configState // read (its cache of pod references aside)
	model      desiredModel
	topics     *desiredTopics
	tombstones map[string]int64 // last generation of deleted devices
	// held are the devices under a restore hold (restorehold.go).
	held     map[string]bool
	caBundle func() string // Options.CABundle; nil: none
	// agent is the agent a device's desired state names (agents.go);
	// nil names none.
	agent func(device string) *schema.DesiredAgent
}

// desiredChange is a device's new desired state, or its removal.
type desiredChange struct {
	name    string
	ds      *schema.DesiredState // nil: the device is gone
	raw     []byte
	lastGen int64 // for a removal: the tombstone
	tomb    bool  // a tombstone existed and is now superseded
	release bool  // the device's restore hold ends with this write
}

// replace installs the desired states' JSON and the tombstones, as loaded.
func (w *desiredWriter) replace(raw map[string][]byte, tombstones map[string]int64) {
	w.topics.replaceRaw(raw)
	w.tombstones = tombstones
}

// writeAll brings every device's desired state to pods (views are every
// device, pods what placeAll gave them), clears those of deleted devices,
// and publishes every state not published at its generation. A failed
// commit is returned after the publishes.
func (w *desiredWriter) writeAll(ctx context.Context, views []DeviceView, pods map[string][]schema.Pod) error {
	var changes []desiredChange
	for i := range views {
		want := pods[views[i].Name]
		sortPods(want)
		if ch, ok := w.change(views[i].Name, want); ok {
			changes = append(changes, ch)
		}
	}
	for name, prev := range w.fleet.desiredStates() {
		if _, ok := w.fleet.device(name); !ok {
			changes = append(changes, desiredChange{name: name, lastGen: prev.Generation})
		}
	}
	var err error
	if len(changes) > 0 {
		err = w.commit(ctx, changes)
	}
	w.topics.publishDesired(ctx, w.fleet.desiredStates())
	return err
}

// writeSome is writeAll for what an incremental placement recomputed (p),
// and for the devices whose ConfigMaps or Secrets ch may have changed; it
// publishes only what was stored and not published since.
func (w *desiredWriter) writeSome(ctx context.Context, p placement, ch *changeSet) error {
	changes := make([]desiredChange, 0, len(p.removed)+len(p.work))
	for _, name := range p.removed {
		changes = append(changes, desiredChange{name: name, lastGen: w.fleet.desired(name).Generation})
	}
	for _, name := range slices.Sorted(maps.Keys(p.work)) {
		if ch, ok := w.change(name, p.work[name]); ok {
			changes = append(changes, ch)
		}
	}
	// Devices whose pods stay but whose ConfigMaps or Secrets may not.
	for _, name := range w.configRecheck(p.work, ch.config, ch.reported) {
		if ch, ok := w.change(name, slices.Clone(w.fleet.desired(name).Pods)); ok {
			changes = append(changes, ch)
		}
	}
	var err error
	if len(changes) > 0 {
		err = w.commit(ctx, changes)
	}
	w.topics.publishUnpublished(ctx, w.fleet.desired)
	return err
}

// change returns the desired state a device gets if want, or the
// ConfigMaps and Secrets want uses, differ from what it has (or it has
// none, or one from another store).
func (w *desiredWriter) change(name string, want []schema.Pod) (desiredChange, bool) {
	prev := w.fleet.desired(name)
	floor, held := w.restoreFloor(name)
	if held && floor < 0 {
		return desiredChange{}, false // restored: wait for the device's report
	}
	cfg := w.resolve(name, want)
	bundle := ""
	if w.caBundle != nil {
		bundle = w.caBundle()
	}
	var agent *schema.DesiredAgent
	if w.agent != nil {
		agent = w.agent(name)
	}
	current := !held && prev != nil && prev.Store == w.storeID && SamePods(prev.Pods, want) && prev.CABundle == bundle && sameAgent(prev.Agent, agent)
	if current && cfg.same(prev) {
		return desiredChange{}, false
	}
	gen := int64(1)
	_, tomb := w.tombstones[name]
	if prev != nil {
		gen = prev.Generation + 1
	} else if tomb {
		gen = w.tombstones[name] + 1
	}
	if held {
		gen = max(gen, floor+RestoreGenerationGap) // above what the device runs or applies (restorehold.go)
	}
	ds := &schema.DesiredState{
		TypeMeta:   schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:     name,
		Generation: gen,
		Store:      w.storeID,
		Pods:       want,
		CABundle:   bundle,
		Agent:      agent,
	}
	reuse := prev
	if prev != nil && prev.Store != w.storeID {
		reuse = nil // versions of another store mean nothing here
	}
	w.build(ds, cfg, reuse)
	if current && sameConfig(ds, prev) {
		return desiredChange{}, false // a Secret could not be sealed, again
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		w.log.Error("encode desired state", "device", name, "err", err)
		return desiredChange{}, false
	}
	return desiredChange{name: name, ds: ds, raw: raw, tomb: tomb, release: held}, true
}

// newDesiredWriter returns the stage that writes desired states to st.
func newDesiredWriter(opts Options, f fleetView, cfg *configState, topics *desiredTopics) *desiredWriter {
	w := &desiredWriter{
		log: opts.Logger, store: desiredStore{opts.Store}, storeID: opts.Store.ID(),
		fleet: f, cfg: cfg, model: opts.Model, topics: topics,
		tombstones: map[string]int64{},
		held:       map[string]bool{},
		caBundle:   opts.CABundle,
	}
	topics.held = w.isHeld
	return w
}

var _ desiredModel = (*fleetmodel.Writer)(nil)
