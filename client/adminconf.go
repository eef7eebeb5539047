package client

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
)

// AdminConfigName is the file, in fleet-hub's data directory, that holds
// the hub's URL and the admin token for the fleet CLI. It is the only
// plaintext copy of the token.
const AdminConfigName = "admin.conf"

// AdminConfig is what admin.conf holds: the flat form of a config file
// (ConfigFile), the keys hub and token. The hub writes and reads the file
// with hub/adminconf (it must not import this package); the CLI reads it
// as it reads any config file, with the parser ReadAdminConfig uses.
// cmd/fleet-hub's tests check that the two agree byte for byte.
type AdminConfig struct {
	Hub   string `json:"hub"`
	Token string `json:"token"`
	// CA is the PEM of the hub's CA (certificate-authority-data), which
	// the CLI pins for an https:// hub; nil when the hub presents a
	// certificate it was given.
	// (A string, so that AdminConfig stays comparable.)
	CA string `json:"-"`
}

// AdminConfigPath returns where a hub with data directory dataDir keeps
// admin.conf.
func AdminConfigPath(dataDir string) string {
	return filepath.Join(dataDir, AdminConfigName)
}

// ReadAdminConfig reads the hub and token of admin.conf, a config file of
// the flat form; contexts, if the file has any, are not looked at. The
// error wraps fs.ErrNotExist when there is no file, and it is an error for
// the file to hold no token.
func ReadAdminConfig(path string) (AdminConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return AdminConfig{}, fmt.Errorf("read admin config: %w", err)
	}
	f, err := parseConfigFile(data)
	if err != nil {
		return AdminConfig{}, fmt.Errorf("read admin config %s: %w", path, err)
	}
	if f.Token == "" {
		return AdminConfig{}, fmt.Errorf("read admin config %s: no token", path)
	}
	return AdminConfig{Hub: f.Hub, Token: f.Token, CA: string(f.CA)}, nil
}

// Marshal returns the text of admin.conf: a comment that says what the
// file is, then the keys hub and token. The writer (fleet-hub) replaces
// the file atomically with mode 0600.
func (c AdminConfig) Marshal() []byte {
	b := fmt.Appendf(nil, "# Fleet hub admin client config, written by fleet-hub. Keep it secret:\n"+
		"# the token grants full control of the fleet.\nhub: %s\ntoken: %s\n", c.Hub, c.Token)
	if len(c.CA) > 0 {
		b = fmt.Appendf(b, "# The hub's CA (PEM, base64), which fleet verifies an https:// hub against.\n%s: %s\n",
			KeyCertificateAuthorityData, base64.StdEncoding.EncodeToString([]byte(c.CA)))
	}
	return b
}
