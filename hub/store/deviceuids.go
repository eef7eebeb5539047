package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fleetmq/fleet/schema"
)

// deviceUIDs mirrors the uid of every stored Device so that a write
// transaction can check a device without reading and decoding its object
// (the status ingest does this for every report it stores). It is loaded
// on Open and updated after each commit while writeMu is still held; it is
// only read by write transactions, which hold writeMu and see the latest
// commit, so it always matches their snapshot. writeMu guards it.
type deviceUIDs struct {
	uids map[string]string
	// bad: a commit that wrote devices failed in a way that leaves it
	// unknown whether it applied; the index is no longer trusted and
	// DeviceUID reads the object.
	bad bool
}

func uidOf(raw []byte) (string, error) {
	var m struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	return m.Metadata.UID, nil
}

func (s *Store) loadDeviceUIDs() error {
	uids := map[string]string{}
	err := engineView(context.Background(), s.eng, func(b engineTxn) error { return scanDeviceUIDs(b, uids) })
	if err != nil {
		return fmt.Errorf("load device uids: %w", err)
	}
	s.devUIDs.uids = uids
	return nil
}

// scanDeviceUIDs reads the uid of every Device into uids.
func scanDeviceUIDs(b engineTxn, uids map[string]string) error {
	res, _ := ResourceForKind(schema.KindDevice)
	prefix := objectPrefix(res)
	return b.scan(prefix, false, func(key string, val []byte) error {
		// A device that does not decode is left out: DeviceUID says
		// it does not exist, as reading it would.
		if uid, err := uidOf(val); err == nil {
			uids[key[len(prefix):]] = uid
		}
		return nil
	})
}

// applyDeviceEvents updates the index from a committed transaction's
// events. Called with writeMu held.
func (s *Store) applyDeviceEvents(events []Event) { applyDeviceUIDs(s.devUIDs.uids, events) }

// applyDeviceUIDs updates an index from the events of a commit.
func applyDeviceUIDs(uids map[string]string, events []Event) {
	for _, ev := range events {
		if ev.Kind != schema.KindDevice {
			continue
		}
		switch ev.Type {
		case EventDeleted:
			delete(uids, ev.Name)
		case EventAdded, EventModified:
			uid, err := uidOf(ev.Object)
			if err != nil {
				delete(uids, ev.Name)
				continue
			}
			uids[ev.Name] = uid
		}
	}
}

// touchesDevices reports whether the transaction wrote a Device.
func (t *Txn) touchesDevices() bool {
	for _, ev := range t.events {
		if ev.Kind == schema.KindDevice {
			return true
		}
	}
	return false
}

// DeviceUID returns the uid of the stored Device name, as this
// transaction sees it ("" and false when there is none). In a write
// transaction (Store.Write) that has not itself written a Device it
// answers from memory; otherwise it reads the object.
func (t *Txn) DeviceUID(name string) (string, bool) {
	if t.serial && !t.s.devUIDs.bad && !t.touchesDevices() {
		uid, ok := t.s.devUIDs.uids[name]
		return uid, ok
	}
	if t.followed && !t.touchesDevices() {
		if uid, ok, known := t.followedUID(name); known {
			return uid, ok
		}
	}
	raw, err := t.Get(ObjectKey(schema.KindDevice, name))
	if err != nil {
		return "", false
	}
	uid, err := uidOf(raw)
	if err != nil {
		return "", false
	}
	return uid, true
}

// followedUID answers from the follower's index (on etcd) when it has
// applied the snapshot's last commit; known is false otherwise.
func (t *Txn) followedUID(name string) (uid string, ok, known bool) {
	if t.lastCommit == 0 {
		lc, isEtcd := t.b.(interface{ lastCommitRev() (uint64, error) })
		if !isEtcd {
			return "", false, false
		}
		rev, err := lc.lastCommitRev()
		if err != nil || rev == 0 {
			return "", false, false
		}
		t.lastCommit = rev
	}
	return t.s.follow.deviceUID(name, t.lastCommit)
}
