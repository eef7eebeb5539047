package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetmq/fleet/hub/store"
)

// Follow keeps the fleet model's devices and deployments current with the
// store, as a standby hub needs them (on a shared broker its status ingest
// takes reports only from devices the model knows), without any pass:
// it places nothing, writes nothing and publishes nothing. The desired
// states the leader writes are re-read every ResyncInterval (the leader
// re-reads everything as often), so the standby's API shows a device's
// desiredGeneration at most that late. It returns when ctx is done; Run,
// which may follow on the same controller, loads everything again before
// its first pass.
func (c *Controller) Follow(ctx context.Context) error {
	defer func() { c.loaded, c.standby = false, false }()
	if !c.standby {
		if err := c.load(ctx, true); err != nil {
			return err
		}
	}
	resync := time.NewTicker(c.opts.ResyncInterval)
	defer resync.Stop()
	events, err := c.store.Watch(ctx, "", c.listRev)
	for {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("controller: follow: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			if lerr := c.load(ctx, true); lerr != nil && ctx.Err() == nil {
				c.log.Error("controller: the standby's resync failed", "err", lerr)
			}
		case ev, ok := <-events:
			if ok && ev.Type != store.EventError {
				c.apply(ev)
				c.drain(events)
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			if ok {
				c.log.Warn("controller: the standby's watch ended; reloading", "err", ev.Err)
			}
			if err = c.load(ctx, true); err == nil {
				events, err = c.store.Watch(ctx, "", c.listRev)
			}
		}
	}
}

// LoadStandby loads the fleet as Follow does, for a standby hub to call
// before it releases the messages that arrived meanwhile (the retained
// online flags of every device on a shared broker); Follow then starts
// from it. Run, afterwards, loads everything again.
func (c *Controller) LoadStandby(ctx context.Context) error {
	if err := c.load(ctx, true); err != nil {
		return err
	}
	c.loaded, c.standby = false, true
	return nil
}
