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
}

// loader reads snapshots from the store; it only reads.
type loader struct {
	store *store.Store
	log   *slog.Logger
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

// load reads a snapshot and installs it.
func (c *Controller) load(ctx context.Context, withDesired bool) error {
	s, err := loader{store: c.store, log: c.log}.load(ctx, withDesired)
	if err != nil {
		return err
	}
	index := labelIndex{}
	for name, d := range s.devices {
		index.add(name, d.Labels)
	}
	c.index = index
	c.model.Replace(s.devices, s.desired)
	c.deployments = s.deployments
	c.cfg.replace(s.config)
	if withDesired {
		c.pub.replaceRaw(s.desiredRaw)
		c.tombstones = s.tombstones
		c.staged.replace(s.rollouts)
	}
	c.listRev = s.rev
	c.sortedNames, c.sortedDeps = nil, nil
	c.loaded = true
	c.full = true
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

// apply updates the model and the caches with one store event.
func (c *Controller) apply(ev store.Event) {
	if ev.Revision <= c.listRev {
		return
	}
	switch ev.Kind {
	case schema.KindDevice:
		c.cfg.applyDevice(ev)
		c.applyDevice(ev)
	case schema.KindDeployment:
		c.applyDeployment(ev)
	case schema.KindConfigMap:
		c.cfg.applyConfigMap(ev, c.log)
	case schema.KindSecret:
		c.cfg.applySecret(ev)
	}
}

func (c *Controller) applyDevice(ev store.Event) {
	c.dirtyDevs[ev.Name] = true
	old, known := c.model.Device(ev.Name)
	if ev.Type == store.EventDeleted {
		c.model.DeleteDevice(ev.Name)
		delete(c.staged.online, ev.Name)
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
	c.model.PutDevice(ev.Name, fleetmodel.Device{UID: m.Metadata.UID, Labels: m.Metadata.Labels})
	if known {
		c.index.remove(ev.Name, old.Labels)
	} else {
		c.sortedNames = nil
	}
	c.index.add(ev.Name, m.Metadata.Labels)
}

func (c *Controller) applyDeployment(ev store.Event) {
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
		delete(c.deployments, ev.Name)
		return
	}
	var d schema.Deployment
	if err := json.Unmarshal(ev.Object, &d); err != nil {
		c.log.Error("deployment event does not decode", "deployment", ev.Name, "err", err)
		return
	}
	c.deployments[ev.Name] = &d
}
