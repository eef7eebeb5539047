package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// AdminConfigName is the file, in the data directory, that holds the hub
// URL and the admin token for the fleet CLI. It is the only plaintext copy
// of the token.
const AdminConfigName = "admin.conf"

// AdminConfig is the content of admin.conf (YAML).
type AdminConfig struct {
	Hub   string `json:"hub"`
	Token string `json:"token"`
}

// AdminConfigPath returns where the hub keeps admin.conf.
func AdminConfigPath(dataDir string) string {
	return filepath.Join(dataDir, AdminConfigName)
}

// ReadAdminConfig reads admin.conf; the error wraps fs.ErrNotExist when
// there is none.
func ReadAdminConfig(path string) (AdminConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return AdminConfig{}, fmt.Errorf("read admin config: %w", err)
	}
	var c AdminConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return AdminConfig{}, fmt.Errorf("read admin config %s: %w", path, err)
	}
	c.Hub, c.Token = strings.TrimSpace(c.Hub), strings.TrimSpace(c.Token)
	if c.Token == "" {
		return AdminConfig{}, fmt.Errorf("read admin config %s: no token", path)
	}
	return c, nil
}

// WriteAdminConfig replaces admin.conf atomically with mode 0600: a crash
// leaves either the old file or the new one.
func WriteAdminConfig(path string, c AdminConfig) (err error) {
	body := fmt.Sprintf("# Fleet hub admin client config, written by fleet-hub. Keep it secret:\n"+
		"# the token grants full control of the fleet.\nhub: %s\ntoken: %s\n", c.Hub, c.Token)
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+AdminConfigName+".*")
	if err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write admin config: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
