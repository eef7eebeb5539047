package hub

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
)

// FleetSigningKeyKey records, in a store that several hubs share (etcd),
// the ID of the key the fleet's hubs sign desired states with: every
// device pins that key, so a hub that signed with another would have
// every desired state it publishes refused.
const FleetSigningKeyKey = "v1/fleet-signing-key"

// checkFleetSigningKey records the hub's signing key in a shared store,
// or refuses a hub whose key is not the one recorded (its signing.key was
// not copied from the fleet's first hub, or another hub rotated the key
// since): the error names the files to copy.
func checkFleetSigningKey(ctx context.Context, st *store.Store, signer *pki.Signer, dataDir string) error {
	id := signer.KeyID()
	_, err := st.Write(ctx, func(t *store.Txn) error {
		v, err := t.Get(FleetSigningKeyKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return t.Set(FleetSigningKeyKey, []byte(id))
		case err != nil:
			return err
		case string(v) != id:
			return signingKeyMismatch(dataDir, id, string(v))
		}
		return nil
	})
	return err
}

// signingKeyMismatch is the error of a hub whose signing key is not the
// fleet's.
func signingKeyMismatch(dataDir, have, fleet string) error {
	return fmt.Errorf("this hub's signing key (%s) is %s, but the fleet's hubs sign desired states with key %s: copy %s (and %s, if there is one) from a hub of the fleet into %s (every hub of a fleet signs with the same key; devices pin it)",
		filepath.Join(dataDir, pki.SigningKeyName), have, fleet, pki.SigningKeyName, pki.PreviousSigningKeyName, dataDir)
}

// recordFleetSigningKey records the key a rotation made (POST
// /v1/signing-key/rotate) as the fleet's, in a shared store: the other
// hubs need the new key files before they start or lead again.
func recordFleetSigningKey(ctx context.Context, st *store.Store, id string) error {
	_, err := st.Write(ctx, func(t *store.Txn) error {
		return t.Set(FleetSigningKeyKey, []byte(id))
	})
	if err != nil {
		return fmt.Errorf("record the fleet's signing key: %w", err)
	}
	return nil
}

// checkTermSigningKey is a new leader's check, before it publishes
// anything, that it signs with the fleet's key: another hub may have
// rotated it while this one stood by.
func (h *Hub) checkTermSigningKey(ctx context.Context) error {
	if _, _, ok := h.store.EtcdClient(); !ok {
		return nil
	}
	var recorded []byte
	err := h.store.View(ctx, func(t *store.Txn) error {
		v, err := t.Get(FleetSigningKeyKey)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		recorded = v
		return err
	})
	if err != nil {
		return fmt.Errorf("read the fleet's signing key: %w", err)
	}
	if recorded != nil && string(recorded) != h.signer.KeyID() {
		return fmt.Errorf("leader: %w", signingKeyMismatch(h.opts.DataDir, h.signer.KeyID(), string(recorded)))
	}
	return nil
}
