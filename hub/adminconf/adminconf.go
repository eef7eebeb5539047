package adminconf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/fleetmq/fleet/hub/store"
)

// Name is the file, in the data directory, that holds the hub URL and the
// admin token for the fleet CLI. It is the only plaintext copy of the
// token.
const Name = "admin.conf"

// Path returns where the hub keeps admin.conf.
func Path(dataDir string) string {
	return filepath.Join(dataDir, Name)
}

// Config is what the hub reads and writes of admin.conf. Its fields are
// those of client.AdminConfig, in the same order, so that one converts
// into the other.
type Config struct {
	Hub   string
	Token string
	// CA is the PEM of the hub's CA, "" when the hub presents a
	// certificate it was given.
	CA string
}

// Write replaces admin.conf atomically with mode 0600: a crash leaves
// either the old file or the new one.
func Write(path string, c Config) error {
	if err := store.WriteFileAtomic(path, Marshal(c), 0o600); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	return nil
}

// Ensure creates the admin credential and admin.conf (at path) on first
// start, and on every later start rewrites admin.conf's hub URL and CA,
// keeping its token. A missing or foreign admin.conf is only warned of:
// `fleet-hub admin-token --rotate` issues a new one.
func Ensure(ctx context.Context, st *store.Store, path, url string, ca []byte, log *slog.Logger) error {
	conf, err := Read(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("admin config unreadable; leaving it alone", "path", path, "err", err)
	}
	if !st.HasCredential(store.AdminCredential) {
		token, err := store.NewToken()
		if err != nil {
			return err
		}
		// The file first: a crash before the hash is stored only means a
		// new token next start.
		if err := Write(path, Config{Hub: url, Token: token, CA: string(ca)}); err != nil {
			return err
		}
		if err := st.PutCredential(ctx, store.AdminCredential, store.RoleAdmin, token); err != nil {
			return fmt.Errorf("store admin credential: %w", err)
		}
		log.Info("created admin token", "admin_config", path)
		return nil
	}
	if !exists {
		if errors.Is(err, fs.ErrNotExist) {
			log.Warn("admin config is missing; issue a new admin token with `fleet-hub admin-token --rotate` while the hub is stopped", "path", path)
		}
		return nil
	}
	if c, ok := st.Authenticate(conf.Token); !ok || c.Role != store.RoleAdmin {
		log.Warn("the token in the admin config is not the hub's admin token; issue a new one with `fleet-hub admin-token --rotate` while the hub is stopped", "path", path)
	}
	conf.Hub, conf.CA = url, string(ca)
	return Write(path, conf)
}

// Rotate issues a new admin token into st and writes it to admin.conf
// (at path), keeping the file's hub URL, else using url. The old token
// stops working. The store must be a stopped hub's.
func Rotate(ctx context.Context, st *store.Store, path, url string) error {
	if old, err := Read(path); err == nil && old.Hub != "" {
		url = old.Hub
	}
	token, err := store.NewToken()
	if err == nil {
		err = Write(path, Config{Hub: url, Token: token})
	}
	if err == nil {
		err = st.PutCredential(ctx, store.AdminCredential, store.RoleAdmin, token)
	}
	return err
}
