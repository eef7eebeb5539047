package controller

import (
	"github.com/fleetmq/fleet/hub/store"
)

// Restore holds: generations never go backwards across a restore.
//
// A hub restored from a backup (hub/backup) knows each device's desired
// state as of the backup; the device may since have applied newer
// generations, which the restored store never saw. Publishing the
// restored generation would be refused by the agent as a replay (the
// agent orders generations under one signing key), and a device that
// ran a state the hub does not know would stay on it.
//
// So restore writes a hold (store.RestoreHoldKey) for every device with a
// desired state, and the desired writer keeps to this rule:
//
//   - a held device's desired state is neither changed nor published
//     until the device has reported in this restored hub (restore leaves
//     the backup's stale statuses out, so any report is the device's own,
//     current one);
//   - then its desired state is written again, whatever its content, at
//     generation max(restored, reported observedGeneration) +
//     RestoreGenerationGap, and the hold is removed in the same
//     transaction; from then on it is an ordinary device.
//
// The gap, not +1: observedGeneration is what the device applied, and it
// may meanwhile have accepted a newer state of the old hub that it is
// still applying (an image being pulled). The agent treats a state at
// the generation it accepted as a duplicate, whatever its content, so a
// restored state at observed+1 could be dropped, and the device left on
// the old hub's. No device is issued a thousand generations while it
// applies one.
//
// A device that stays offline stays held, and so is never sent a lower
// generation when it comes back. The device keeps running its last state
// meanwhile (autonomy), and converges to what the restored hub knows as
// soon as it reports.

// RestoreGenerationGap is how far above the generation a restored
// device reported its next desired state is issued.
const RestoreGenerationGap = 1000

// restoreFloor says whether a device is held and, if it is, the
// generation its report says it runs (-1: no report yet, so nothing may
// be written or published).
func (w *desiredWriter) restoreFloor(name string) (floor int64, held bool) {
	if !w.held[name] {
		return 0, false
	}
	d, ok := w.fleet.device(name)
	if !ok {
		return -1, true
	}
	st, _ := w.fleet.deviceState(name, d.UID)
	if st == nil {
		return -1, true
	}
	return st.ObservedGeneration, true
}

// isHeld is the publishers' filter: a held device is sent nothing.
func (w *desiredWriter) isHeld(name string) bool { return w.held[name] }

// anyHeld reports whether a device that reported is held: the pass is
// then a full one, which rewrites it with everything placed on it.
func (w *desiredWriter) anyHeld(reported map[string]bool) bool {
	if len(w.held) == 0 {
		return false
	}
	for name := range reported {
		if w.held[name] {
			return true
		}
	}
	return false
}

// releaseHold deletes a device's hold in the transaction that writes its
// new desired state (or its removal).
func releaseHold(t *store.Txn, name string) error { return t.Delete(store.RestoreHoldKey(name)) }
