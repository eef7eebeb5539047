package controller

import (
	"context"
	"strconv"
	"time"

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
// publisher.
//
// Each chunk is published as soon as it is stored, while the next one is
// written: the first devices hear of a change that touches 10,000 after
// one chunk's fsync, not after all of them.
func (c *Controller) commit(ctx context.Context, changes []desiredChange) {
	var inflight []*sending
	defer func() {
		n := 0
		for _, s := range inflight {
			n += c.pub.finish(s)
		}
		c.pub.countDesired(n)
	}()
	for len(changes) > 0 {
		var chunk []desiredChange
		chunk, changes = nextChunk(changes)
		if err := (desiredStore{c.store}).write(ctx, chunk); err != nil {
			if ctx.Err() == nil {
				c.log.Error("store desired states", "devices", len(chunk), "err", err)
				c.retryAt = time.Now().Add(time.Second)
			}
			return
		}
		c.model.SetDesired(len(chunk), func(i int) (string, *schema.DesiredState) { return chunk[i].name, chunk[i].ds })
		var msgs []message
		for _, ch := range chunk {
			if ch.ds == nil {
				c.pub.removed(ch.name)
				c.tombstones[ch.name] = ch.lastGen
				c.log.Info("device removed: desired state cleared", "device", ch.name, "last_generation", ch.lastGen)
				continue
			}
			c.pub.stored(ch.name, ch.ds.Generation, ch.raw)
			delete(c.tombstones, ch.name)
			c.log.Debug("desired state", "device", ch.name, "generation", ch.ds.Generation, "pods", len(ch.ds.Pods),
				"configmaps", len(ch.ds.ConfigMaps), "secrets", len(ch.ds.Secrets))
			msgs = append(msgs, c.pub.desiredMessage(ch.name, ch.ds.Generation))
		}
		inflight = append(inflight, c.pub.send(ctx, msgs))
	}
}
