package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables the fleet CLI reads; each matches a flag (--hub,
// --token, --config, --context).
const (
	EnvHub     = "FLEET_HUB"
	EnvToken   = "FLEET_TOKEN"
	EnvConfig  = "FLEET_CONFIG"
	EnvContext = "FLEET_CONTEXT"
)

// DataDirConfig is where fleet-hub, started with its default data
// directory, writes the admin client config, relative to its working
// directory.
var DataDirConfig = filepath.Join("fleet-data", AdminConfigName)

// ErrNoHub says that no source named a hub.
var ErrNoHub = errors.New("no hub configured: pass --hub and --token, set FLEET_HUB/FLEET_TOKEN, add a context with \"fleet config set-context\", or run fleet-hub here so ./fleet-data/admin.conf exists")

// Config says which hub to talk to and with which token. Its file form is
// what fleet-hub writes to <data-dir>/admin.conf: YAML (or JSON) with the
// keys hub and token.
type Config struct {
	Hub   string `json:"hub"`
	Token string `json:"token"`
	// CA is the PEM of the CA an https:// hub's certificate must chain
	// to (certificate-authority-data of the file or context the hub came
	// from); nil: the system's roots.
	CA []byte `json:"-"`

	// Context is the name of the context the values came from, if any.
	Context string `json:"-"`
	// HubSource and TokenSource say where each value came from ("--hub",
	// "FLEET_TOKEN", a file name, a context), for messages.
	HubSource   string `json:"-"`
	TokenSource string `json:"-"`
	CASource    string `json:"-"`
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

// Client returns a client of the configured hub. With a CA and an
// https:// hub, the hub's certificate must chain to that CA (never to
// another root); a plain http:// hub (on loopback) has no certificate.
func (c Config) Client(opts ...Option) (*Client, error) {
	if u, err := ParseHubURL(c.Hub); err == nil && u.Scheme == "https" && len(c.CA) > 0 {
		hc, err := PinnedHTTPClient(c.CA, c.CASource)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithHTTPClient(hc))
	}
	return New(c.Hub, c.Token, opts...)
}

// ConfigSources are the places ResolveConfig looks, highest precedence
// first. The zero value reads the process environment, working directory
// and home directory.
type ConfigSources struct {
	// Flags: --hub, --token, --config, --context.
	Hub, Token, ConfigFile, Context string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// WorkDir holds ./fleet-data/admin.conf; "" means the working directory.
	WorkDir string
	// HomeDir holds .config/fleet/config; "" means the user's home.
	HomeDir string
}

// ResolveConfig finds the hub and token, the way kubectl finds its cluster.
// Each value is taken from the first source that sets it:
//
//  1. the flags --hub and --token;
//  2. the environment: FLEET_HUB and FLEET_TOKEN;
//  3. the context named by --context, else FLEET_CONTEXT, in the user's
//     config file (UserConfigPath: --config, else FLEET_CONFIG, else
//     ~/.config/fleet/config);
//  4. that file's current-context;
//  5. when no context is selected: the flat hub and token of a file named
//     by --config or FLEET_CONFIG; else ./fleet-data/admin.conf (written by
//     a fleet-hub started in the working directory), else the flat hub and
//     token of ~/.config/fleet/config.
//
// A file named by --config or FLEET_CONFIG must exist, and a context named
// by --context or FLEET_CONTEXT must be in it, even when flags override
// what they hold, so that a typo does not go unnoticed.
//
// A token is never sent to a hub it was not configured for: when the hub
// comes from a flag or the environment and the token would come from a
// file or context written for another hub, ResolveConfig fails.
func ResolveConfig(s ConfigSources) (Config, error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var c Config
	pick(&c.Hub, &c.HubSource, s.Hub, "--hub")
	pick(&c.Token, &c.TokenSource, s.Token, "--token")
	pick(&c.Hub, &c.HubSource, getenv(EnvHub), EnvHub)
	pick(&c.Token, &c.TokenSource, getenv(EnvToken), EnvToken)

	ctxName, ctxSource := strings.TrimSpace(s.Context), "--context"
	if ctxName == "" {
		ctxName, ctxSource = strings.TrimSpace(getenv(EnvContext)), EnvContext
	}
	path, explicit, err := userConfigPath(s, getenv)
	if err != nil {
		if ctxName != "" {
			return Config{}, err
		}
		path = "" // no home: no user config
	}
	need := c.Hub == "" || c.Token == ""
	var f *ConfigFile
	if path != "" && (explicit || ctxName != "" || need) {
		f, err = ReadConfigFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !explicit:
			f = nil // a default file that is not there
		case err != nil:
			return Config{}, err
		}
	}
	if ctxName == "" && need && f != nil && f.CurrentContext != "" {
		ctxName, ctxSource = f.CurrentContext, "current-context"
	}
	switch {
	case ctxName != "":
		if f == nil {
			return Config{}, &ContextNotFoundError{Name: ctxName, Source: ctxSource, Path: path, Missing: true}
		}
		cx, ok := f.Context(ctxName)
		if !ok {
			return Config{}, f.NotFound(ctxName, ctxSource)
		}
		if need {
			c.Context = ctxName
			if err := c.fill(cx.Hub, cx.Token, cx.CA, fmt.Sprintf("context %q in %s", ctxName, path)); err != nil {
				return Config{}, err
			}
		}
	case !need:
	case explicit:
		if err := c.fill(f.Hub, f.Token, f.CA, path); err != nil {
			return Config{}, err
		}
	default:
		if err := c.fillLocal(s.WorkDir, f, path); err != nil {
			return Config{}, err
		}
	}
	if err := c.complete(f, path, ctxName); err != nil {
		return Config{}, err
	}
	return c, nil
}

// pick sets *dst to val, and *src to where it came from, unless *dst is
// set already or val is blank.
func pick(dst, src *string, val, name string) {
	if *dst == "" && strings.TrimSpace(val) != "" {
		*dst, *src = strings.TrimSpace(val), name
	}
}

// fill takes what a file or context holds for the values still unset. The
// CA goes with the hub it was written for.
func (c *Config) fill(hub, token string, ca []byte, src string) error {
	if c.Hub != "" && c.Token == "" && token != "" && !sameHub(c.Hub, hub) {
		return fmt.Errorf("no token for hub %s (from %s): pass --token or set %s; the token in %s is for hub %q", c.Hub, c.HubSource, EnvToken, src, hub)
	}
	if c.CA == nil && len(ca) > 0 && (c.Hub == "" || sameHub(c.Hub, hub)) {
		c.CA, c.CASource = ca, src
	}
	pick(&c.Hub, &c.HubSource, hub, src)
	pick(&c.Token, &c.TokenSource, token, src)
	return nil
}

// fillLocal fills from ./fleet-data/admin.conf in wd ("" for the working
// directory) when it exists, else from the user's file f (at path; nil
// when there is none).
func (c *Config) fillLocal(wd string, f *ConfigFile, path string) error {
	if wd == "" {
		var err error
		if wd, err = os.Getwd(); err != nil {
			return fmt.Errorf("find config: %w", err)
		}
	}
	local := filepath.Join(wd, DataDirConfig)
	lc, err := LoadConfigFile(local)
	switch {
	case err == nil:
		return c.fill(lc.Hub, lc.Token, lc.CA, local)
	case errors.Is(err, fs.ErrNotExist):
		if f != nil {
			return c.fill(f.Hub, f.Token, f.CA, path)
		}
		return nil
	}
	return err
}

// complete checks that the sources gave a hub, a valid one, and a token;
// f is the user's file (at path) and ctxName the context asked for.
func (c *Config) complete(f *ConfigFile, path, ctxName string) error {
	if c.Hub == "" {
		if f != nil && len(f.Contexts) > 0 && ctxName == "" {
			return fmt.Errorf("%w\n%s has the contexts %s but no current-context: pass --context NAME, set %s, or run \"fleet config use-context NAME\"", ErrNoHub, path, strings.Join(f.ContextNames(), ", "), EnvContext)
		}
		return ErrNoHub
	}
	if _, err := ParseHubURL(c.Hub); err != nil {
		return fmt.Errorf("%w (from %s)", err, c.HubSource)
	}
	if c.Token == "" {
		return fmt.Errorf("no token for hub %s (from %s): pass --token, set %s, or use the admin.conf fleet-hub wrote in its data directory (--config, or \"fleet config import\")", c.Hub, c.HubSource, EnvToken)
	}
	return nil
}

// UserConfigPath returns the user's config file, the one the "fleet config"
// commands edit: --config, else FLEET_CONFIG, else
// $XDG_CONFIG_HOME/fleet/config, else ~/.config/fleet/config. explicit says
// that the user named it (--config or FLEET_CONFIG).
func UserConfigPath(s ConfigSources) (path string, explicit bool, err error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	return userConfigPath(s, getenv)
}

func userConfigPath(s ConfigSources, getenv func(string) string) (path string, explicit bool, err error) {
	if p := strings.TrimSpace(s.ConfigFile); p != "" {
		return p, true, nil
	}
	if p := strings.TrimSpace(getenv(EnvConfig)); p != "" {
		return p, true, nil
	}
	if xdg := getenv("XDG_CONFIG_HOME"); xdg != "" && filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "fleet", "config"), false, nil
	}
	home := s.HomeDir
	if home == "" {
		if home, err = os.UserHomeDir(); err != nil {
			return "", false, fmt.Errorf("find the user config file: %w; name one with --config or %s", err, EnvConfig)
		}
	}
	return filepath.Join(home, ".config", "fleet", "config"), false, nil
}

// LoadConfigFile reads the hub and token a config file selects: its flat
// hub and token (the form of admin.conf), else those of its current
// context. Keys it does not know are ignored, so a newer fleet-hub may add
// some.
func LoadConfigFile(path string) (Config, error) {
	f, err := ReadConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	c := Config{Hub: f.Hub, Token: f.Token, CA: f.CA, HubSource: path, TokenSource: path, CASource: path}
	if c.Hub == "" && c.Token == "" && f.CurrentContext != "" {
		cx, ok := f.Context(f.CurrentContext)
		if !ok {
			return Config{}, f.NotFound(f.CurrentContext, "current-context")
		}
		src := fmt.Sprintf("context %q in %s", cx.Name, path)
		c = Config{Hub: cx.Hub, Token: cx.Token, CA: cx.CA, Context: cx.Name, HubSource: src, TokenSource: src, CASource: src}
	}
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
