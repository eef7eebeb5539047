package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/fleetmq/fleet/schema"
)

// registerChunk is how many devices one transaction of RegisterDevices
// stores: one fsync (or one etcd commit) for that many, well inside
// Badger's batch size and etcd's --max-txn-ops.
const registerChunk = 500

// RegisteredDevice is what RegisterDevices did with one device.
type RegisteredDevice struct {
	Name string
	// Action is schema.ActionCreated or, for a device that existed and
	// was kept as it was, schema.ActionUnchanged.
	Action string
	// Token is the device's new token (the store keeps its hash).
	Token string
}

// RegisterDevices creates each device that does not exist (an existing
// one is kept as it is) and issues every one a new token, in
// transactions of registerChunk devices. Every device is validated
// before any is stored. If a transaction fails, the ones before it stay
// stored: the error says how many, and running the same call again is
// safe (what exists is kept, every token is issued anew).
func (s *Store) RegisterDevices(ctx context.Context, devs []*schema.Device) ([]RegisteredDevice, error) {
	for _, d := range devs {
		schema.Default(d)
		if err := schema.Validate(d); err != nil {
			return nil, err
		}
	}
	out, recs, err := s.newTokens(ctx, devs)
	if err != nil {
		return nil, fmt.Errorf("register devices: %w", err)
	}
	for start := 0; start < len(devs); start += registerChunk {
		end := min(start+registerChunk, len(devs))
		_, err := s.Write(ctx, func(t *Txn) error {
			return t.registerDevices(devs[start:end], recs[start:end], out[start:end])
		})
		if err != nil {
			if start == 0 {
				return nil, fmt.Errorf("register devices: %w", err)
			}
			return nil, fmt.Errorf("register devices: the first %d of %d are stored, with their new tokens lost; send them all again: %w", start, len(devs), err)
		}
	}
	return out, nil
}

// newTokens draws a token for each device and computes its record (the
// hashes: PBKDF2 for Mosquitto, most of the CPU of a registration) on
// every core.
func (s *Store) newTokens(ctx context.Context, devs []*schema.Device) ([]RegisteredDevice, [][]byte, error) {
	out := make([]RegisteredDevice, len(devs))
	recs := make([][]byte, len(devs))
	workers := min(runtime.GOMAXPROCS(0), len(devs))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(devs); i += workers {
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				tok, err := NewToken()
				if err == nil {
					recs[i], err = s.tokenRecord(tok, "")
				}
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = RegisteredDevice{Name: devs[i].Metadata.Name, Token: tok}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return out, recs, nil
}

// registerDevices stores one chunk of RegisterDevices.
func (t *Txn) registerDevices(devs []*schema.Device, recs [][]byte, out []RegisteredDevice) error {
	for i, d := range devs {
		out[i].Action = schema.ActionUnchanged
		_, err := t.GetObject(schema.KindDevice, d.Metadata.Name)
		if errors.Is(err, ErrNotFound) {
			if _, _, err = t.putObject(d, modeCreate); err != nil {
				return err
			}
			out[i].Action = schema.ActionCreated
		} else if err != nil {
			return err
		}
		if err := t.Set(TokenKey(d.Metadata.Name), recs[i]); err != nil {
			return err
		}
	}
	return nil
}
