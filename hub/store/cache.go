package store

import (
	"context"
	"fmt"
	"strings"
)

// DesiredSignaturePrefix is the prefix of every DesiredSignatureKey.
const DesiredSignaturePrefix = "v1/desired-signature/"

// DesiredSignatureKey holds the controller's cache of the signature last
// published with a device's desired state, so that a restarted hub
// republishes every desired state without signing each again. It is
// written by WriteCache only: losing it costs a signature, never a state.
func DesiredSignatureKey(device string) string { return DesiredSignaturePrefix + device }

// WriteCache writes (and, for a nil value, deletes) keys under
// DesiredSignaturePrefix outside the revision history: no revision is
// bumped and no watcher hears of them, since nothing but their writer
// reads them and they can be rebuilt. The batch is committed whole or not
// at all, like any transaction, and may run beside Write. Keep batches
// small: etcd refuses a transaction of more than --max-txn-ops
// operations (128 by default).
func (s *Store) WriteCache(ctx context.Context, kvs map[string][]byte) error {
	for key := range kvs {
		if !strings.HasPrefix(key, DesiredSignaturePrefix) || len(key) == len(DesiredSignaturePrefix) {
			return fmt.Errorf("write cache: key %q is not a cache key (%s…)", key, DesiredSignaturePrefix)
		}
	}
	if len(kvs) == 0 {
		return nil
	}
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	err := engineUpdate(ctx, s.eng, func(txn engineTxn) error {
		for key, val := range kvs {
			var err error
			if val == nil {
				err = txn.del(key)
			} else {
				err = txn.set(key, val)
			}
			if err != nil {
				return fmt.Errorf("write cache %s: %w", key, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write cache: %w", err)
	}
	return nil
}
