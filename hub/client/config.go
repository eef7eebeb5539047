package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Environment variables the fleet CLI reads; each matches a flag (--hub,
// --token, --config).
const (
	EnvHub    = "FLEET_HUB"
	EnvToken  = "FLEET_TOKEN"
	EnvConfig = "FLEET_CONFIG"
)

// DataDirConfig is where fleet-hub, started with its default data
// directory, writes the admin client config, relative to its working
// directory.
var DataDirConfig = filepath.Join("fleet-data", "admin.conf")

// ErrNoHub says that no source named a hub.
var ErrNoHub = errors.New("no hub configured: pass --hub and --token, set FLEET_HUB/FLEET_TOKEN, or run fleet-hub here so ./fleet-data/admin.conf exists")

// Config says which hub to talk to and with which token. Its file form is
// what fleet-hub writes to <data-dir>/admin.conf: YAML (or JSON) with the
// keys hub and token.
type Config struct {
	Hub   string `json:"hub"`
	Token string `json:"token"`

	// HubSource and TokenSource say where each value came from ("--hub",
	// "FLEET_TOKEN", a file name), for messages.
	HubSource   string `json:"-"`
	TokenSource string `json:"-"`
}

// String describes the config without its token.
func (c Config) String() string {
	tok := "<none>"
	if c.Token != "" {
		tok = "<redacted> (from " + c.TokenSource + ")"
	}
	return fmt.Sprintf("hub %s (from %s), token %s", c.Hub, c.HubSource, tok)
}

// GoString keeps the token out of %#v.
func (c Config) GoString() string { return c.String() }

// Client returns a client of the configured hub.
func (c Config) Client(opts ...Option) (*Client, error) {
	return New(c.Hub, c.Token, opts...)
}

// ConfigSources are the places ResolveConfig looks, highest precedence
// first. The zero value reads the process environment, working directory
// and home directory.
type ConfigSources struct {
	// Flags: --hub, --token, --config.
	Hub, Token, ConfigFile string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// WorkDir holds ./fleet-data/admin.conf; "" means the working directory.
	WorkDir string
	// HomeDir holds .config/fleet/config; "" means the user's home.
	HomeDir string
}

// ResolveConfig finds the hub and token. Each value is taken from the first
// source that sets it: flags, then FLEET_HUB / FLEET_TOKEN, then one config
// file — --config, else FLEET_CONFIG, else ./fleet-data/admin.conf, else
// $XDG_CONFIG_HOME/fleet/config (~/.config/fleet/config). A file named by
// --config or FLEET_CONFIG must exist; the default ones are skipped when
// absent.
//
// A token is never sent to a hub it was not configured for: when the hub
// comes from a flag or the environment and the token would come from a file
// written for another hub, ResolveConfig fails.
func ResolveConfig(s ConfigSources) (Config, error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var c Config
	pick := func(dst, src *string, val, name string) {
		if *dst == "" && strings.TrimSpace(val) != "" {
			*dst, *src = strings.TrimSpace(val), name
		}
	}
	pick(&c.Hub, &c.HubSource, s.Hub, "--hub")
	pick(&c.Token, &c.TokenSource, s.Token, "--token")
	pick(&c.Hub, &c.HubSource, getenv(EnvHub), EnvHub)
	pick(&c.Token, &c.TokenSource, getenv(EnvToken), EnvToken)

	path, explicit, err := configFile(s, getenv)
	if err != nil {
		return Config{}, err
	}
	// Read an explicit file even when flags override it, so a typo in
	// its name does not go unnoticed.
	if path != "" && (explicit || c.Hub == "" || c.Token == "") {
		f, err := LoadConfigFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !explicit:
			// A default file that is not there.
		case err != nil:
			return Config{}, err
		default:
			if c.Hub != "" && c.Token == "" && f.Token != "" && !sameHub(c.Hub, f.Hub) {
				return Config{}, fmt.Errorf("no token for hub %s (from %s): pass --token or set %s; the token in %s is for hub %q", c.Hub, c.HubSource, EnvToken, path, f.Hub)
			}
			pick(&c.Hub, &c.HubSource, f.Hub, path)
			pick(&c.Token, &c.TokenSource, f.Token, path)
		}
	}
	if c.Hub == "" {
		return Config{}, ErrNoHub
	}
	if _, err := ParseHubURL(c.Hub); err != nil {
		return Config{}, fmt.Errorf("%w (from %s)", err, c.HubSource)
	}
	if c.Token == "" {
		return Config{}, fmt.Errorf("no token for hub %s (from %s): pass --token, set %s, or use the admin.conf fleet-hub wrote in its data directory (--config)", c.Hub, c.HubSource, EnvToken)
	}
	return c, nil
}

// configFile picks the one config file to read and says whether the user
// named it.
func configFile(s ConfigSources, getenv func(string) string) (path string, explicit bool, err error) {
	if s.ConfigFile != "" {
		return s.ConfigFile, true, nil
	}
	if p := getenv(EnvConfig); p != "" {
		return p, true, nil
	}
	wd := s.WorkDir
	if wd == "" {
		if wd, err = os.Getwd(); err != nil {
			return "", false, fmt.Errorf("find config: %w", err)
		}
	}
	local := filepath.Join(wd, DataDirConfig)
	if _, err := os.Stat(local); err == nil {
		return local, false, nil
	}
	if xdg := getenv("XDG_CONFIG_HOME"); xdg != "" && filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "fleet", "config"), false, nil
	}
	home := s.HomeDir
	if home == "" {
		if home, err = os.UserHomeDir(); err != nil {
			return "", false, nil // no home: no user config
		}
	}
	return filepath.Join(home, ".config", "fleet", "config"), false, nil
}

// LoadConfigFile reads a config file (YAML or JSON with keys hub and
// token). Keys it does not know are ignored, so a newer fleet-hub may add
// some.
func LoadConfigFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	c.Hub, c.Token = strings.TrimSpace(c.Hub), strings.TrimSpace(c.Token)
	if c.Hub == "" && c.Token == "" {
		return Config{}, fmt.Errorf("config %s: has neither hub nor token", path)
	}
	return c, nil
}

// sameHub compares two hub addresses after normalising them.
func sameHub(a, b string) bool {
	ua, err1 := ParseHubURL(a)
	ub, err2 := ParseHubURL(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return ua.String() == ub.String()
}
