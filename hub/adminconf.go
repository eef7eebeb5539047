package hub

import (
	"fmt"

	"github.com/fleetmq/fleet/client"
)

// admin.conf is the fleet CLI's config file in its flat form (hub URL and
// admin token), so its format belongs to the client package; the hub only
// decides where the file lives and writes it durably.

// AdminConfigName is the file, in the data directory, that holds the hub
// URL and the admin token for the fleet CLI. It is the only plaintext copy
// of the token.
const AdminConfigName = client.AdminConfigName

// AdminConfig is the content of admin.conf (see client.AdminConfig).
type AdminConfig = client.AdminConfig

// AdminConfigPath returns where the hub keeps admin.conf.
func AdminConfigPath(dataDir string) string {
	return client.AdminConfigPath(dataDir)
}

// ReadAdminConfig reads admin.conf with the client's parser; the error
// wraps fs.ErrNotExist when there is none.
func ReadAdminConfig(path string) (AdminConfig, error) {
	return client.ReadAdminConfig(path)
}

// WriteAdminConfig replaces admin.conf atomically with mode 0600: a crash
// leaves either the old file or the new one.
func WriteAdminConfig(path string, c AdminConfig) error {
	if err := WriteFileAtomic(path, c.Marshal(), 0o600); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	return nil
}
