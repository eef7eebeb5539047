package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// modifyAttempts bounds how often ModifyDevice reads and writes again after
// a Conflict.
const modifyAttempts = 5

// ModifyDevice reads device name, lets mutate change it and writes it back
// with the resourceVersion it was read at, so a write by someone else in
// between is never overwritten: the hub answers Conflict, and ModifyDevice
// reads the device again and calls mutate again on the fresh copy (a few
// times, after a short jittered pause). mutate reports whether it changed
// anything; when it did not, nothing is written and written is false.
//
// The device's status is read-only and is not sent back. The client's
// timeout (WithTimeout) bounds the whole call, retries included.
func (c *Client) ModifyDevice(ctx context.Context, name string, mutate func(*schema.Device) (bool, error)) (dev *schema.Device, written bool, err error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var lastErr error
	for attempt := range modifyAttempts {
		if attempt > 0 {
			if err := sleepCtx(ctx, retryDelay(attempt)); err != nil {
				return nil, false, fmt.Errorf("update device %q: %w (after %v)", name, err, lastErr)
			}
		}
		d, err := c.GetDevice(ctx, name)
		if err != nil {
			return nil, false, err
		}
		changed, err := mutate(d)
		if err != nil {
			return nil, false, err
		}
		if !changed {
			return d, false, nil
		}
		d.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}
		d.Status = nil
		out, err := c.UpdateDevice(ctx, d)
		if err == nil {
			return out, true, nil
		}
		if !IsConflict(err) {
			return nil, false, err
		}
		lastErr = err
	}
	return nil, false, fmt.Errorf("update device %q: still conflicting with other writers after %d attempts: %w", name, modifyAttempts, lastErr)
}

// retryDelay is 10 ms doubled per attempt, jittered by ±50% so that
// clients retrying together spread out.
func retryDelay(attempt int) time.Duration {
	d := 10 * time.Millisecond << (attempt - 1)
	return d/2 + rand.N(d)
}
