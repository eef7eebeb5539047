package controller

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// desiredStore writes desired states and generation tombstones; it only
// writes.
type desiredStore struct{ store *store.Store }

// write stores one chunk of changes in one transaction: a new desired
// state supersedes the device's tombstone; a removal deletes the desired
// state and leaves a tombstone with its last generation, so a device
// re-created later continues above it.
func (s desiredStore) write(ctx context.Context, chunk []desiredChange) error {
	_, err := s.store.Write(ctx, func(t *store.Txn) error {
		for _, ch := range chunk {
			if ch.ds == nil {
				if err := t.Delete(store.DesiredKey(ch.name)); err != nil {
					return err
				}
				if err := t.Set(store.DesiredGenerationKey(ch.name), []byte(strconv.FormatInt(ch.lastGen, 10))); err != nil {
					return err
				}
				if err := releaseHold(t, ch.name); err != nil {
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
			if ch.release {
				if err := releaseHold(t, ch.name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return err
}

// nextChunk splits off the changes that fit in one transaction (at least
// one).
func nextChunk(changes []desiredChange) (chunk, rest []desiredChange) {
	n, size := 0, 0
	for n < len(changes) && (n == 0 || size+len(changes[n].raw) < maxChunkBytes) {
		size += len(changes[n].raw) + 64
		n++
	}
	return changes[:n], changes[n:]
}

// commit stores the changes in as few transactions as the store's size
// limit allows, and then records what committed in the model and the
// desired topics. A failed write is logged and returned (as a failure:
// the pass retries a second after it); what is left is not written.
//
// Each chunk is published as soon as it is stored, while the next one is
// written: the first devices hear of a change that touches 10,000 after
// one chunk's fsync, not after all of them.
func (w *desiredWriter) commit(ctx context.Context, changes []desiredChange) error {
	var inflight []*sending
	defer func() {
		n := 0
		for _, s := range inflight {
			n += w.topics.out.finish(s)
		}
		w.topics.countDesired(n)
	}()
	for len(changes) > 0 {
		var chunk []desiredChange
		chunk, changes = nextChunk(changes)
		if err := w.store.write(ctx, chunk); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.log.Error("store desired states", "devices", len(chunk), "err", err)
			return failedNow(fmt.Errorf("store desired states: %w", err))
		}
		w.model.SetDesired(len(chunk), func(i int) (string, *schema.DesiredState) { return chunk[i].name, chunk[i].ds })
		var msgs []message
		for _, ch := range chunk {
			delete(w.held, ch.name)
			if ch.ds == nil {
				w.topics.removed(ch.name)
				w.tombstones[ch.name] = ch.lastGen
				w.log.Info("device removed: desired state cleared", "device", ch.name, "last_generation", ch.lastGen)
				continue
			}
			if ch.release {
				w.log.Info("restored device reported: its desired state continues above the generation it runs", "device", ch.name, "generation", ch.ds.Generation)
			}
			w.topics.stored(ch.name, ch.ds.Generation, ch.raw)
			delete(w.tombstones, ch.name)
			w.log.Debug("desired state", "device", ch.name, "generation", ch.ds.Generation, "pods", len(ch.ds.Pods),
				"configmaps", len(ch.ds.ConfigMaps), "secrets", len(ch.ds.Secrets))
			msgs = append(msgs, w.topics.desiredMessage(ch.name, ch.ds.Generation))
		}
		inflight = append(inflight, w.topics.out.send(ctx, msgs))
	}
	return nil
}
