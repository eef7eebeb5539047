package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// deviceMeta is the part of a stored Device the controller needs.
type deviceMeta struct {
	Metadata struct {
		Name   string            `json:"name"`
		UID    string            `json:"uid"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// snapshot is what the controller reads from the store at once.
type snapshot struct {
	rev         uint64
	devices     map[string]fleetmodel.Device
	deployments map[string]*schema.Deployment
	config      configSnapshot
	// With the desired states only (which only the controller writes, so
	// a resync can skip them):
	desired    map[string]*schema.DesiredState
	desiredRaw map[string][]byte
	tombstones map[string]int64
	rollouts   map[string]*rolloutRecord
	holds      map[string]bool      // restore holds (restorehold.go)
	sigs       map[string]*sigEntry // kept signatures (sigcache.go)
}

// loader reads snapshots from the store; it only reads.
type loader struct {
	store *store.Store
	log   *slog.Logger
	// sigs: read the kept signatures too (the signer reuses them).
	sigs bool
}

// load reads the devices and deployments and, withDesired, the desired
// states and generation tombstones, in one read transaction.
func (l loader) load(ctx context.Context, withDesired bool) (*snapshot, error) {
	s := &snapshot{devices: map[string]fleetmodel.Device{}, deployments: map[string]*schema.Deployment{}}
	err := l.store.View(ctx, func(t *store.Txn) error {
		s.rev = t.Revision()
		err := t.Scan(store.ObjectKey(schema.KindDevice, ""), func(key string, val []byte) error {
			var m deviceMeta
			if err := json.Unmarshal(val, &m); err != nil {
				return fmt.Errorf("decode device %s: %w", key, err)
			}
			s.devices[m.Metadata.Name] = fleetmodel.Device{UID: m.Metadata.UID, Labels: m.Metadata.Labels}
			return nil
		})
		if err != nil {
			return err
		}
		err = t.ListObjects(schema.KindDeployment, func(o schema.Object) error {
			d := o.(*schema.Deployment)
			s.deployments[d.Metadata.Name] = d
			return nil
		})
		if err != nil {
			return err
		}
		if s.config, err = loadConfig(t); err != nil || !withDesired {
			return err
		}
		return l.loadDesired(t, s)
	})
	if err != nil {
		return nil, fmt.Errorf("controller: load: %w", err)
	}
	return s, nil
}

// loadDesired reads the desired states and generation tombstones.
func (l loader) loadDesired(t *store.Txn, s *snapshot) error {
	s.desired = map[string]*schema.DesiredState{}
	s.desiredRaw = map[string][]byte{}
	s.tombstones = map[string]int64{}
	err := t.Scan(store.DesiredPrefix, func(key string, val []byte) error {
		var ds schema.DesiredState
		if err := json.Unmarshal(val, &ds); err != nil {
			// Never fatal: the device gets a fresh desired state with a
			// generation above any tombstone.
			l.log.Error("stored desired state does not decode; recomputing it", "key", key, "err", err)
			return nil
		}
		name := key[len(store.DesiredPrefix):]
		s.desired[name] = &ds
		s.desiredRaw[name] = append([]byte(nil), val...)
		return nil
	})
	if err != nil {
		return err
	}
	if s.rollouts, err = loadRollouts(t, l.log); err != nil {
		return err
	}
	if l.sigs {
		if s.sigs, err = loadSignatures(t, l.log); err != nil {
			return err
		}
	}
	s.holds = map[string]bool{}
	if err := t.Scan(store.RestoreHoldPrefix, func(key string, _ []byte) error {
		s.holds[key[len(store.RestoreHoldPrefix):]] = true
		return nil
	}); err != nil {
		return err
	}
	return t.Scan(store.DesiredGenerationPrefix, func(key string, val []byte) error {
		g, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			l.log.Error("stored generation tombstone does not parse", "key", key, "err", err)
			return nil
		}
		s.tombstones[key[len(store.DesiredGenerationPrefix):]] = g
		return nil
	})
}

// Load reads devices, deployments, desired states and generation
// tombstones from the store into the model and the controller. Run calls
// it if it has not been called; call it first when the model must know the
// devices before Run starts (the status ingest needs them).
func (c *Controller) Load(ctx context.Context) error {
	return c.load(ctx, true)
}

// load reads a snapshot and installs it in the fleet and the stages; the
// next pass is a full one.
func (c *Controller) load(ctx context.Context, withDesired bool) error {
	_, reuse := c.opts.Signer.(ReusableSigner)
	s, err := loader{store: c.store, log: c.log, sigs: reuse}.load(ctx, withDesired)
	if err != nil {
		return err
	}
	if err := c.agents.load(ctx, c.store); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	c.fleet.replace(s.devices, s.desired, s.deployments)
	c.cfg.replace(s.config)
	if withDesired {
		c.writer.replace(s.desiredRaw, s.tombstones)
		c.writer.held = s.holds
		c.writer.topics.sigs.replace(s.sigs)
		c.placer.replace(s.rollouts)
	}
	c.listRev = s.rev
	c.loaded = true
	c.changes.full = true
	return nil
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

// apply updates the fleet and the configuration with one store event and
// notes what it changed in the change set.
func (c *Controller) apply(ev store.Event) {
	if ev.Revision <= c.listRev {
		return
	}
	switch ev.Kind {
	case schema.KindDevice:
		c.cfg.applyDevice(ev)
		c.fleet.applyDevice(ev, c.changes, c.log)
		if ev.Type == store.EventDeleted {
			c.placer.deviceGone(ev.Name)
		}
	case schema.KindDeployment:
		c.fleet.applyDeployment(ev, c.changes, c.log)
		if d, ok := c.fleet.deployments[ev.Name]; ok && ev.Type != store.EventDeleted {
			c.cfg.noteUses(d)
		}
	case schema.KindConfigMap:
		c.cfg.applyConfigMap(ev, c.changes, c.log)
	case schema.KindSecret:
		c.cfg.applySecret(ev, c.changes)
	case schema.KindAgentRollout:
		c.agents.apply(ev)
		c.changes.full = true
	}
}

// replace installs what the store holds.
func (f *fleet) replace(devices map[string]fleetmodel.Device, desired map[string]*schema.DesiredState, deployments map[string]*schema.Deployment) {
	index := labelIndex{}
	for name, d := range devices {
		index.add(name, d.Labels)
	}
	f.index = index
	f.model.Replace(devices, desired)
	f.deployments = deployments
	f.sortedNames, f.sortedDeps = nil, nil
}

// applyDevice applies a device event.
func (f *fleet) applyDevice(ev store.Event, ch *changeSet, log *slog.Logger) {
	ch.deviceChanged(ev.Name)
	old, known := f.model.Device(ev.Name)
	if ev.Type == store.EventDeleted {
		f.model.DeleteDevice(ev.Name)
		if known {
			f.index.remove(ev.Name, old.Labels)
		}
		f.sortedNames = nil
		return
	}
	var m deviceMeta
	if err := json.Unmarshal(ev.Object, &m); err != nil {
		log.Error("device event does not decode", "device", ev.Name, "err", err)
		return
	}
	f.model.PutDevice(ev.Name, fleetmodel.Device{UID: m.Metadata.UID, Labels: m.Metadata.Labels})
	if known {
		f.index.remove(ev.Name, old.Labels)
	} else {
		f.sortedNames = nil
	}
	f.index.add(ev.Name, m.Metadata.Labels)
}

// applyDeployment applies a deployment event.
func (f *fleet) applyDeployment(ev store.Event, ch *changeSet, log *slog.Logger) {
	f.sortedDeps = nil
	ch.deploymentChanged(ev.Name, f.deployments[ev.Name])
	if ev.Type == store.EventDeleted {
		delete(f.deployments, ev.Name)
		return
	}
	var d schema.Deployment
	if err := json.Unmarshal(ev.Object, &d); err != nil {
		log.Error("deployment event does not decode", "deployment", ev.Name, "err", err)
		return
	}
	f.deployments[ev.Name] = &d
}
