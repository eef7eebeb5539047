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
	return modify(ctx, c, "device", name, c.GetDevice, func(ctx context.Context, d *schema.Device) (*schema.Device, error) {
		d.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}
		d.Status = nil
		return c.UpdateDevice(ctx, d)
	}, mutate)
}

// modify is the read-modify-write loop of ModifyDevice and
// ModifyDeployment: get, mutate, put with the resourceVersion read, and
// again after a Conflict, up to modifyAttempts times. The client's timeout
// bounds the whole loop.
func modify[T any](ctx context.Context, c *Client, what, name string, get func(context.Context, string) (*T, error), put func(context.Context, *T) (*T, error), mutate func(*T) (bool, error)) (*T, bool, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var lastErr error
	for attempt := range modifyAttempts {
		if attempt > 0 {
			if err := sleepCtx(ctx, retryDelay(attempt)); err != nil {
				return nil, false, fmt.Errorf("update %s %q: %w (after %v)", what, name, err, lastErr)
			}
		}
		obj, err := get(ctx, name)
		if err != nil {
			return nil, false, err
		}
		changed, err := mutate(obj)
		if err != nil {
			return nil, false, err
		}
		if !changed {
			return obj, false, nil
		}
		out, err := put(ctx, obj)
		if err == nil {
			return out, true, nil
		}
		if !IsConflict(err) {
			return nil, false, err
		}
		lastErr = err
	}
	return nil, false, fmt.Errorf("update %s %q: still conflicting with other writers after %d attempts: %w", what, name, modifyAttempts, lastErr)
}

// retryDelay is 10 ms doubled per attempt, jittered by ±50% so that
// clients retrying together spread out.
func retryDelay(attempt int) time.Duration {
	d := 10 * time.Millisecond << (attempt - 1)
	return d/2 + rand.N(d)
}
