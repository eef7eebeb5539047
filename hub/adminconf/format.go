package adminconf

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// The keys of admin.conf, those of the fleet CLI's config file in its flat
// form.
const (
	keyHub   = "hub"
	keyToken = "token"
	keyCA    = "certificate-authority-data"
)

// Marshal returns the text of admin.conf: a comment that says what the
// file is, then the keys hub and token, and the CA (its PEM in base64)
// when there is one. It is byte for byte what client.AdminConfig.Marshal
// writes (cmd/fleet-hub's adminconf_test.go checks).
func Marshal(c Config) []byte {
	b := fmt.Appendf(nil, "# Fleet hub admin client config, written by fleet-hub. Keep it secret:\n"+
		"# the token grants full control of the fleet.\n%s: %s\n%s: %s\n", keyHub, c.Hub, keyToken, c.Token)
	if c.CA != "" {
		b = fmt.Appendf(b, "# The hub's CA (PEM, base64), which fleet verifies an https:// hub against.\n%s: %s\n",
			keyCA, base64.StdEncoding.EncodeToString([]byte(c.CA)))
	}
	return b
}

// Read reads the hub, token and CA of admin.conf as the fleet CLI reads a
// config file of the flat form (client.ReadAdminConfig); other keys, such
// as contexts, are not looked at. The error wraps fs.ErrNotExist when
// there is no file, and it is an error for the file to hold no token.
func Read(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read admin config: %w", err)
	}
	c, err := parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("read admin config %s: %w", path, err)
	}
	if c.Token == "" {
		return Config{}, fmt.Errorf("read admin config %s: no token", path)
	}
	return c, nil
}

// parse reads the flat form's keys. It matches keys exactly, as the CLI
// does (a struct's json tags would also take "Hub").
func parse(data []byte) (Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Config{}, nil
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Config{}, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(j, &m) != nil {
		return Config{}, errors.New("want a mapping with the keys current-context and contexts, or hub and token")
	}
	var c Config
	var ca string
	for k, dst := range map[string]*string{keyHub: &c.Hub, keyToken: &c.Token, keyCA: &ca} {
		if err := getString(m[k], dst); err != nil {
			return Config{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	if ca != "" {
		pem, err := base64.StdEncoding.DecodeString(ca)
		if err != nil {
			return Config{}, fmt.Errorf("%s: want the base64 of PEM certificates: %w", keyCA, err)
		}
		c.CA = string(pem)
	}
	return c, nil
}

// getString reads a string value, trimmed; a missing or null one is "".
func getString(raw json.RawMessage, dst *string) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("want a string, got %s", raw)
	}
	*dst = strings.TrimSpace(*dst)
	return nil
}
