package hub

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
)

// FleetCAKey records, in a store that several hubs share (etcd), the hash
// of the CA the first hub made: devices trust that CA only, so every hub
// must present certificates it signs.
const FleetCAKey = "v1/fleet-ca"

// checkFleetCA records the hub's own CA in a shared store, or refuses a
// hub whose CA is not the one recorded (its ca.crt and ca.key were not
// copied from the first hub).
func checkFleetCA(ctx context.Context, st *store.Store, caHash string) error {
	_, err := st.Write(ctx, func(t *store.Txn) error {
		v, err := t.Get(FleetCAKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return t.Set(FleetCAKey, []byte(caHash))
		case err != nil:
			return err
		case string(v) != caHash:
			return fmt.Errorf("this hub's CA (%s) is %s, but the fleet's hubs present certificates of CA %s: copy %s and %s from the fleet's first hub into this hub's data dir",
				pki.CACertName, caHash, v, pki.CACertName, pki.CAKeyName)
		}
		return nil
	})
	return err
}
