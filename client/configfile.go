package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"sigs.k8s.io/yaml"
)

// ConfigFile is a fleet CLI config file: ~/.config/fleet/config (under
// $XDG_CONFIG_HOME when set), or the file --config or FLEET_CONFIG names.
// It holds kubeconfig-style contexts, one per hub, and the name of the
// current one:
//
//	current-context: site-a
//	contexts:
//	- name: site-a
//	  hub: https://hub.site-a.example:8080
//	  token: ...
//	- name: lab
//	  hub: http://10.0.0.5:8080
//	  token: ...
//
// The flat form fleet-hub writes to <data-dir>/admin.conf (top-level hub and
// token) is a config file too; a file may hold both, and then the flat pair
// is used when no context is selected.
//
// Keys this version does not know, at the top level or in a context (a CA
// certificate, say), are kept when the file is rewritten, so an older fleet
// never drops what a newer one wrote.
type ConfigFile struct {
	// Path is where the file was read from and is written to.
	Path string

	CurrentContext string
	Contexts       []Context
	// Hub and Token are the flat form.
	Hub, Token string
	// CA is the flat form's certificate-authority-data (PEM).
	CA []byte

	extra map[string]json.RawMessage
}

// Context names one hub and the token to use with it.
type Context struct {
	Name  string
	Hub   string
	Token string
	// CA is the PEM of the CA the hub's certificate must chain to
	// (certificate-authority-data); nil: the system's roots.
	CA []byte

	extra map[string]json.RawMessage
}

// RedactedText is what "fleet config view" shows instead of a token.
const RedactedText = "REDACTED"

// configFileHeader starts every config file fleet writes.
const configFileHeader = "# fleet CLI config: hubs and their tokens (see \"fleet config --help\").\n" +
	"# Keep it private: the tokens grant control of the fleets.\n"

// ContextNotFoundError says that a context is not in a config file.
type ContextNotFoundError struct {
	Name string
	// Source says who asked for it: "--context", "FLEET_CONTEXT",
	// "current-context", or "" for a command's argument.
	Source string
	Path   string
	// Contexts are the names the file has; Missing says the file does
	// not exist.
	Contexts []string
	Missing  bool
}

func (e *ContextNotFoundError) Error() string {
	what := fmt.Sprintf("context %q", e.Name)
	if e.Source != "" {
		what += " (from " + e.Source + ")"
	}
	switch {
	case e.Missing:
		return fmt.Sprintf("%s not found: %s does not exist; add the context with \"fleet config set-context\"", what, e.Path)
	case len(e.Contexts) == 0:
		return fmt.Sprintf("%s not found in %s; it has no contexts: add one with \"fleet config set-context\"", what, e.Path)
	}
	return fmt.Sprintf("%s not found in %s; contexts: %s", what, e.Path, strings.Join(e.Contexts, ", "))
}

// ReadConfigFile reads a config file, YAML or JSON. The error wraps
// fs.ErrNotExist when there is none.
func ReadConfigFile(path string) (*ConfigFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	f, err := parseConfigFile(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	f.Path = path
	seen := map[string]bool{}
	for i, c := range f.Contexts {
		if err := ValidateContextName(c.Name); err != nil {
			return nil, fmt.Errorf("config %s: contexts[%d]: %w", path, i, err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("config %s: context %q appears twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return f, nil
}

// parseConfigFile decodes the YAML (or JSON) of a config file; empty data
// is an empty file.
func parseConfigFile(data []byte) (*ConfigFile, error) {
	f := &ConfigFile{}
	if len(bytes.TrimSpace(data)) == 0 {
		return f, nil
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	if string(j) != "null" {
		if err := f.UnmarshalJSON(j); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// ReadOrNewConfigFile reads a config file, or returns an empty one to be
// written at path when there is none.
func ReadOrNewConfigFile(path string) (*ConfigFile, error) {
	f, err := ReadConfigFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &ConfigFile{Path: path}, nil
	}
	return f, err
}

// ValidateContextName checks a context name: 1 to 253 characters, none of
// them a space, a control character or a comma (contexts are listed with
// commas in messages).
func ValidateContextName(name string) error {
	if name == "" {
		return errors.New("context name is empty")
	}
	if len(name) > 253 {
		return fmt.Errorf("context name %.20q…: longer than 253 characters", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == ',' {
			return fmt.Errorf("context name %q: must not contain spaces, control characters or commas", name)
		}
	}
	return nil
}

// Context returns the named context.
func (f *ConfigFile) Context(name string) (Context, bool) {
	for _, c := range f.Contexts {
		if c.Name == name {
			return c, true
		}
	}
	return Context{}, false
}

// ContextNames returns the names of the contexts, in the file's order.
func (f *ConfigFile) ContextNames() []string {
	names := make([]string, len(f.Contexts))
	for i, c := range f.Contexts {
		names[i] = c.Name
	}
	return names
}

// NotFound returns the error for a context the file does not have.
func (f *ConfigFile) NotFound(name, source string) *ContextNotFoundError {
	return &ContextNotFoundError{Name: name, Source: source, Path: f.Path, Contexts: f.ContextNames()}
}

// SetContext adds c, or replaces the context of the same name in place
// (keeping the keys of the old one that this version does not know, and
// its CA when c has none). It
// reports whether c was added.
func (f *ConfigFile) SetContext(c Context) (created bool) {
	for i, old := range f.Contexts {
		if old.Name == c.Name {
			if c.extra == nil {
				c.extra = old.extra
			}
			if c.CA == nil {
				c.CA = old.CA
			}
			f.Contexts[i] = c
			return false
		}
	}
	f.Contexts = append(f.Contexts, c)
	return true
}

// DeleteContext removes a context; when it was the current one, the file
// is left without a current context and wasCurrent is true.
func (f *ConfigFile) DeleteContext(name string) (wasCurrent bool, err error) {
	i := slices.IndexFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if i < 0 {
		return false, f.NotFound(name, "")
	}
	f.Contexts = slices.Delete(f.Contexts, i, i+1)
	if f.CurrentContext == name {
		f.CurrentContext = ""
		return true, nil
	}
	return false, nil
}

// UseContext makes a context the current one.
func (f *ConfigFile) UseContext(name string) error {
	if _, ok := f.Context(name); !ok {
		return f.NotFound(name, "")
	}
	f.CurrentContext = name
	return nil
}

// Redacted returns a copy with every token, and every unknown key whose name
// says it is a secret, replaced by RedactedText.
func (f *ConfigFile) Redacted() *ConfigFile {
	out := *f
	out.Token = redact(f.Token)
	out.extra = redactExtra(f.extra)
	out.Contexts = make([]Context, len(f.Contexts))
	for i, c := range f.Contexts {
		c.Token = redact(c.Token)
		c.extra = redactExtra(c.extra)
		out.Contexts[i] = c
	}
	return &out
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return RedactedText
}

func redactExtra(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k := range out {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "token") || strings.Contains(lk, "secret") || strings.Contains(lk, "password") || strings.HasSuffix(lk, "key") || strings.HasSuffix(lk, "key-data") {
			out[k] = json.RawMessage(`"` + RedactedText + `"`)
		}
	}
	return out
}

// Marshal returns the file's YAML, without the header comment.
func (f *ConfigFile) Marshal() ([]byte, error) {
	b, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return b, nil
}

// Write replaces the file at f.Path atomically (a temporary file in the
// same directory, synced, then renamed over it) with mode 0600, creating
// its directory (mode 0700) when needed. When f.Path is a symbolic link,
// the file it points to is replaced.
func (f *ConfigFile) Write() error {
	if f.Path == "" {
		return errors.New("write config: no path")
	}
	body, err := f.Marshal()
	if err != nil {
		return err
	}
	path := f.Path
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write config %s: %w", f.Path, err)
	}
	if err := replaceFile(path, append([]byte(configFileHeader), body...)); err != nil {
		return fmt.Errorf("write config %s: %w", f.Path, err)
	}
	return nil
}

// replaceFile replaces path with data: a temporary file in the same
// directory, mode 0600, written and synced, then renamed over path.
func replaceFile(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	fail := func(err error) error {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// The keys of the file form.
const (
	keyCurrentContext = "current-context"
	keyContexts       = "contexts"
	keyHub            = "hub"
	keyToken          = "token"
	keyName           = "name"
	// KeyCertificateAuthorityData holds a hub's CA, PEM in base64, as in
	// a kubeconfig.
	KeyCertificateAuthorityData = "certificate-authority-data"
)

// MarshalJSON writes the known keys and the kept unknown ones.
func (f *ConfigFile) MarshalJSON() ([]byte, error) {
	m := maps.Clone(f.extra)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	if err := setString(m, keyCurrentContext, f.CurrentContext); err != nil {
		return nil, err
	}
	if err := setString(m, keyHub, f.Hub); err != nil {
		return nil, err
	}
	if err := setString(m, keyToken, f.Token); err != nil {
		return nil, err
	}
	if err := setString(m, KeyCertificateAuthorityData, encodeCA(f.CA)); err != nil {
		return nil, err
	}
	contexts := f.Contexts
	if contexts == nil {
		contexts = []Context{}
	}
	b, err := json.Marshal(contexts)
	if err != nil {
		return nil, err
	}
	m[keyContexts] = b
	return json.Marshal(m)
}

// UnmarshalJSON reads the known keys and keeps the others.
func (f *ConfigFile) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return errors.New("want a mapping with the keys current-context and contexts, or hub and token")
	}
	var out ConfigFile
	for k, v := range m {
		var err error
		switch k {
		case keyCurrentContext:
			err = getString(v, &out.CurrentContext)
		case keyHub:
			err = getString(v, &out.Hub)
		case keyToken:
			err = getString(v, &out.Token)
		case KeyCertificateAuthorityData:
			out.CA, err = decodeCA(v)
		case keyContexts:
			out.Contexts, err = unmarshalContexts(v)
		default:
			if out.extra == nil {
				out.extra = map[string]json.RawMessage{}
			}
			out.extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	*f = out
	return nil
}

func unmarshalContexts(raw json.RawMessage) ([]Context, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, errors.New("want a list of contexts, each with name, hub and token")
	}
	out := make([]Context, len(items))
	for i, item := range items {
		if err := out[i].UnmarshalJSON(item); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return out, nil
}

// MarshalJSON writes the known keys and the kept unknown ones.
func (c Context) MarshalJSON() ([]byte, error) {
	m := maps.Clone(c.extra)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range map[string]string{keyName: c.Name, keyHub: c.Hub, keyToken: c.Token, KeyCertificateAuthorityData: encodeCA(c.CA)} {
		if err := setString(m, k, v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the known keys and keeps the others.
func (c *Context) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return errors.New("want a context with name, hub and token")
	}
	var out Context
	for k, v := range m {
		var err error
		switch k {
		case keyName:
			err = getString(v, &out.Name)
		case keyHub:
			err = getString(v, &out.Hub)
		case keyToken:
			err = getString(v, &out.Token)
		case KeyCertificateAuthorityData:
			out.CA, err = decodeCA(v)
		default:
			if out.extra == nil {
				out.extra = map[string]json.RawMessage{}
			}
			out.extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	*c = out
	return nil
}

// setString sets m[k] to the JSON string v, or deletes it when v is "".
func setString(m map[string]json.RawMessage, k, v string) error {
	if v == "" {
		delete(m, k)
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m[k] = b
	return nil
}

func getString(raw json.RawMessage, dst *string) error {
	if string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("want a string, got %s", raw)
	}
	*dst = strings.TrimSpace(*dst)
	return nil
}

// encodeCA is the file form of a CA: its PEM in base64.
func encodeCA(pem []byte) string {
	if len(pem) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(pem)
}

// decodeCA reads certificate-authority-data: base64 of PEM certificates
// (checked when a client is made with them).
func decodeCA(raw json.RawMessage) ([]byte, error) {
	var s string
	if err := getString(raw, &s); err != nil || s == "" {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("want the base64 of PEM certificates: %w", err)
	}
	return b, nil
}
