package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Device keys bound at enrollment (issue 39). The hub seals a device's
// Secrets to the public key its report carries (hub/controller, seal.go),
// so the ingest lets into a report only the device's bound key
// (store.BindDeviceKey): the one it sent when it enrolled, else the first
// one it reported, or after `fleet device rekey` the next one it reports.
// A status carrying another key (a thief with the device's token, or an
// agent whose state directory was wiped) is taken without it: the rest of
// the report is accepted as usual (its pods, its node facts: a token
// holder may publish the device's status anyway), but its publicKey is
// replaced by the bound key before the report reaches the model or the
// store, so nothing is ever sealed to it. The refusal is counted
// (fleet_hub_device_key_refused_total), logged and raised as a Warning
// DeviceKeyRefused event on the device. A report's publicKey, in the model
// and in the store, is therefore always the device's bound key or empty.
//
// The check on the hot path is a map lookup and a string compare: the
// store is read only when a device reports a key other than the one the
// ingest last saw bound for it.

// ReasonDeviceKeyRefused is the reason of the Warning event raised on a
// device whose status carried a key that is not its bound key.
const ReasonDeviceKeyRefused = "DeviceKeyRefused"

// ReasonDeviceKeyRebound is the reason of the Normal event raised when a
// rekeyed device's new key is bound.
const ReasonDeviceKeyRebound = "DeviceKeyRebound"

// refusalEventEvery limits DeviceKeyRefused events to one per device per
// interval for the same refused key (every refusal is counted).
const refusalEventEvery = time.Minute

// storeTimeout bounds the store reads and writes of a key check.
const storeTimeout = 5 * time.Second

// keyBook is the bound key of each device as the ingest last saw it, and
// when it last raised a refusal event for it.
type keyBook struct {
	mu    sync.Mutex
	bound map[string]boundKey
}

type boundKey struct {
	uid, key string
	// refusedID is schema.DeviceKeyID of the key last refused (never the
	// key itself), refusedAt when its event was raised.
	refusedID string
	refusedAt time.Time
}

// known reports whether key is the bound key of the device uid, as last
// seen.
func (b *keyBook) known(device, uid, key string) bool {
	b.mu.Lock()
	e, ok := b.bound[device]
	b.mu.Unlock()
	return ok && e.uid == uid && e.key == key
}

// set notes the device's bound key.
func (b *keyBook) set(device, uid, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bound == nil {
		b.bound = map[string]boundKey{}
	}
	e := b.bound[device]
	if e.uid != uid {
		e = boundKey{uid: uid}
	}
	e.key = key
	b.bound[device] = e
}

// shouldRaise reports whether a refusal of the key with this ID deserves
// an event now (a new key, or refusalEventEvery since the last event).
func (b *keyBook) shouldRaise(device, uid, keyID string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bound == nil {
		b.bound = map[string]boundKey{}
	}
	e := b.bound[device]
	if e.uid != uid {
		e = boundKey{uid: uid}
	}
	if e.refusedID == keyID && now.Sub(e.refusedAt) < refusalEventEvery {
		return false
	}
	e.refusedID, e.refusedAt = keyID, now
	b.bound[device] = e
	return true
}

// checkKey lets into st only the device's bound key. It returns the
// status and payload to keep: st and payload themselves when the key is
// absent or bound (now or before), else a copy carrying the bound key
// ("" if none) that shares no memory with the refused payload. ok is
// false if no such copy could be made (the status is then dropped).
func (in *Ingest) checkKey(device, uid string, st *schema.DeviceStatus, payload []byte) (*schema.DeviceStatus, []byte, bool) {
	if st.PublicKey == "" || in.keys.known(device, uid, st.PublicKey) {
		return st, payload, true
	}
	bound, ok := in.decideKey(device, uid, st.PublicKey)
	if ok {
		return st, payload, true
	}
	return in.withKey(device, st, bound)
}

// decideKey reads (and, for a device with no key or a rekeyed one,
// writes) the store's record of the device's key. It returns the bound
// key and whether it is key. A store error refuses the key.
func (in *Ingest) decideKey(device, uid, key string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rec, err := in.opts.Store.DeviceKey(ctx, device)
	if err != nil {
		in.log.Error("device key check failed; the reported key is not used", "device", device, "err", err)
		return "", false
	}
	verdict, bound := store.KeyRefused, rec.PublicKey
	if rec.PublicKey == key {
		verdict = store.KeyKept
	} else if rec.PublicKey == "" || rec.Rekey {
		// Bind, in a transaction that checks again.
		verdict, bound, err = in.opts.Store.BindDeviceKey(ctx, device, uid, key)
		if err != nil {
			in.log.Error("device key could not be bound; the reported key is not used", "device", device, "err", err)
			return rec.PublicKey, false
		}
	}
	if verdict != store.KeyRefused {
		in.keys.set(device, uid, bound)
	}
	switch verdict {
	case store.KeyKept:
		return bound, true
	case store.KeyBoundFirst:
		in.log.Info("device key bound: the first key the device reported", "device", device, "key_id", schema.DeviceKeyID(bound))
		return bound, true
	case store.KeyRebound:
		in.log.Info("device key rebound after fleet device rekey", "device", device, "key_id", schema.DeviceKeyID(bound), "previous_key_id", schema.DeviceKeyID(rec.PublicKey))
		in.hubEvent(device, uid, schema.EventNormal, ReasonDeviceKeyRebound, fmt.Sprintf(
			"the device's new public key %s replaces %s (fleet device rekey); Secrets are sealed to it from now on",
			schema.DeviceKeyID(bound), schema.DeviceKeyID(rec.PublicKey)))
		return bound, true
	}
	in.refused(device, uid, key, bound)
	return bound, false
}

// refused counts, logs and raises the refusal of key.
func (in *Ingest) refused(device, uid, key, bound string) {
	if in.m != nil {
		in.m.DeviceKeyRefused.Inc()
	}
	id := schema.DeviceKeyID(key)
	if !in.keys.shouldRaise(device, uid, id, time.Now()) {
		return
	}
	msg := fmt.Sprintf("refused public key %s from a status: the device's key is %s (bound at enrollment or first report) and nothing is sealed to another. "+
		"A new key on the device (state directory replaced)? Run: fleet device rekey %s. If not, its token may be stolen: fleet device rotate-token %s",
		id, schema.DeviceKeyID(bound), device, device)
	in.log.Warn("device key refused", "device", device, "key_id", id, "bound_key_id", schema.DeviceKeyID(bound))
	in.hubEvent(device, uid, schema.EventWarning, ReasonDeviceKeyRefused, msg)
}

// hubEvent raises an event of the hub's own on the device.
func (in *Ingest) hubEvent(device, uid, typ, reason, msg string) {
	in.model.AddHubEvent(device, uid, schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		Device:   device, Time: in.model.Now().UTC(), Type: typ, Reason: reason, Message: msg,
	})
}

// withKey returns a copy of st carrying key instead of its own, and its
// payload, decoded afresh so that nothing kept points into the refused
// payload.
func (in *Ingest) withKey(device string, st *schema.DeviceStatus, key string) (*schema.DeviceStatus, []byte, bool) {
	c := *st
	c.PublicKey = key
	raw, err := json.Marshal(&c)
	if err != nil {
		in.log.Error("status without its refused key does not encode; status dropped", "device", device, "err", err)
		return nil, nil, false
	}
	var fresh schema.DeviceStatus
	if err := decode(raw, &fresh); err != nil {
		in.log.Error("status without its refused key does not decode; status dropped", "device", device, "err", err)
		return nil, nil, false
	}
	return &fresh, raw, true
}

// loadBoundKeys makes the loaded reports carry their devices' bound keys
// (a status stored before keys were bound may carry another). A report
// whose device has no bound key yet keeps its key: the device's next
// status binds it.
func (in *Ingest) loadBoundKeys(t *store.Txn, loaded map[string]fleetmodel.Report) error {
	bound := map[string]string{}
	err := t.Scan(store.DeviceKeyPrefix, func(key string, val []byte) error {
		bound[key[len(store.DeviceKeyPrefix):]] = string(val)
		return nil
	})
	if err != nil {
		return err
	}
	for name, r := range loaded {
		k, ok := bound[name]
		if !ok || r.Status.PublicKey == "" || r.Status.PublicKey == k {
			continue
		}
		in.log.Warn("stored status carries another key than the device's bound key; the bound key is kept", "device", name,
			"key_id", schema.DeviceKeyID(r.Status.PublicKey), "bound_key_id", schema.DeviceKeyID(k))
		st, raw, ok := in.withKey(name, r.Status, k)
		if !ok {
			delete(loaded, name)
			continue
		}
		r.Status, r.Raw = st, raw
		loaded[name] = r
	}
	return nil
}
