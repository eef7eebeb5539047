package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fleetmq/fleet/hub/adminconf"
	"github.com/fleetmq/fleet/hub/pki"
	"github.com/fleetmq/fleet/hub/store"
)

// The operations on the data directory of a stopped hub. Each opens the
// store first: it admits one process, so that proves no hub runs there.

// RotateAdminToken issues a new admin token into the store of a stopped
// hub and writes it to admin.conf (keeping its hub URL, else using
// opts.HTTPAddr). The old token stops working. It returns the path of
// admin.conf.
func RotateAdminToken(ctx context.Context, opts Options) (string, error) {
	opts.setDefaults()
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(opts.DataDir, "store"), Logger: opts.Logger, GCInterval: -1})
	if err != nil {
		return "", fmt.Errorf("rotate admin token (stop the hub first): %w", err)
	}
	path := adminconf.Path(opts.DataDir)
	err = adminconf.Rotate(ctx, st, path, URLFor(opts.HTTPAddr))
	if cerr := st.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return "", fmt.Errorf("rotate admin token: %w", err)
	}
	return path, nil
}

// RotateSigningKey rotates the signing key in the data directory of a
// stopped hub (`fleet-hub rotate-signing-key`); the hub signs with the
// new key, endorsed by the old one, and republishes every desired state
// when it starts. With no key yet it creates one. It returns the old and
// the new key IDs.
func RotateSigningKey(dataDir string) (oldID, newID string, err error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", "", fmt.Errorf("rotate signing key: %w", err)
	}
	// The store admits one process: opening it proves the hub is
	// stopped, so that it does not go on signing with the old key.
	st, err := store.Open(store.Options{Dir: filepath.Join(dataDir, "store"), GCInterval: -1})
	if err != nil {
		return "", "", fmt.Errorf("rotate signing key (stop the hub first, or POST /v1/signing-key/rotate): %w", err)
	}
	if err := st.Close(); err != nil {
		return "", "", fmt.Errorf("rotate signing key: %w", err)
	}
	return pki.RotateSigningKey(dataDir)
}
