// Package podconfig resolves what a device's pods take from the ConfigMaps
// and Secrets their DesiredState carries: environment variables
// (env[].valueFrom, envFrom), the files of configMap and secret volumes,
// and the registry credentials of imagePullSecrets.
//
// A Set is built once per accepted DesiredState: it unseals every Secret
// value with the device's own key (devicekey) and keeps the plain values
// in memory only. A Secret that cannot be unsealed (sealed to another key,
// say, because the hub has not learnt this device's key yet) is remembered
// as such, and every pod that needs it waits with an error naming the
// Secret and the key, never a value.
//
// Errors name the ConfigMap or Secret and the key; they never carry a
// value, so they can go to status, events and logs as they are.
package podconfig

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// ErrNotFound is wrapped by the errors for a ConfigMap, Secret or key a
// pod needs and the DesiredState does not carry.
var ErrNotFound = errors.New("not found")

// ErrUnsealed is wrapped by the errors for a Secret this device cannot
// unseal.
var ErrUnsealed = errors.New("cannot be unsealed on this device")

// Key unseals the values sealed to this device: *devicekey.Key.
type Key interface {
	// ID is schema.DeviceKeyID of the public key.
	ID() string
	// Open unseals one value.
	Open(sealed []byte) ([]byte, error)
}

// Set is the ConfigMaps and the unsealed Secrets of one DesiredState. It
// is immutable and safe for concurrent use.
type Set struct {
	configMaps map[string]schema.ConfigMapData
	secrets    map[string]secret
}

type secret struct {
	typ     string
	version string
	data    map[string][]byte
	err     error // why it cannot be used
}

// New builds the Set of ds, unsealing its Secrets with key (nil: the
// device has no usable key, and no Secret can be used).
func New(ds *schema.DesiredState, key Key) *Set {
	s := &Set{configMaps: map[string]schema.ConfigMapData{}, secrets: map[string]secret{}}
	if ds == nil {
		return s
	}
	for _, cm := range ds.ConfigMaps {
		s.configMaps[cm.Name] = cm
	}
	for _, ss := range ds.Secrets {
		s.secrets[ss.Name] = unseal(ss, key)
	}
	return s
}

func unseal(ss schema.SealedSecret, key Key) secret {
	out := secret{typ: ss.Type, version: ss.Version}
	if out.typ == "" {
		out.typ = schema.SecretOpaque
	}
	switch {
	case key == nil:
		out.err = fmt.Errorf("secret %q %w: the device key is unusable (see the agent's log)", ss.Name, ErrUnsealed)
		return out
	case ss.KeyID != key.ID():
		out.err = fmt.Errorf("secret %q %w: it is sealed to device key %s, not this device's key %s (the hub has not seen this key yet?)",
			ss.Name, ErrUnsealed, orNone(ss.KeyID), key.ID())
		return out
	}
	out.data = make(map[string][]byte, len(ss.Data))
	for _, k := range slices.Sorted(maps.Keys(ss.Data)) {
		v, err := key.Open(ss.Data[k])
		if err != nil {
			out.data = nil
			out.err = fmt.Errorf("secret %q key %q %w: %w", ss.Name, k, ErrUnsealed, err)
			return out
		}
		out.data[k] = v
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func isOptional(b *bool) bool { return b != nil && *b }

// configMapData returns a ConfigMap's keys, text and binary.
func (s *Set) configMapData(name string) (map[string][]byte, bool) {
	cm, ok := s.configMaps[name]
	if !ok {
		return nil, false
	}
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out, true
}

// secretData returns a Secret's unsealed keys; ok is false when the
// DesiredState does not carry it, err set when it cannot be unsealed.
func (s *Set) secretData(name string) (data map[string][]byte, ok bool, err error) {
	sec, ok := s.secrets[name]
	if !ok {
		return nil, false, nil
	}
	return sec.data, true, sec.err
}

// Env returns the container's environment, KEY=VALUE, with its envFrom
// sources first (in order; a later one wins) and its env after them (env
// wins over envFrom), each name once, in the order first seen. A missing
// ConfigMap, Secret or key that is not optional, or a Secret that cannot
// be unsealed, is an error naming them.
func (s *Set) Env(c *schema.Container) ([]string, error) {
	var order []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, seen := vals[k]; !seen {
			order = append(order, k)
		}
		vals[k] = v
	}
	for i, ef := range c.EnvFrom {
		var (
			data      map[string][]byte
			found     bool
			what      string
			optional  bool
			unsealErr error
		)
		switch {
		case ef.ConfigMapRef != nil:
			what, optional = fmt.Sprintf("configmap %q", ef.ConfigMapRef.Name), isOptional(ef.ConfigMapRef.Optional)
			data, found = s.configMapData(ef.ConfigMapRef.Name)
		case ef.SecretRef != nil:
			what, optional = fmt.Sprintf("secret %q", ef.SecretRef.Name), isOptional(ef.SecretRef.Optional)
			data, found, unsealErr = s.secretData(ef.SecretRef.Name)
		default:
			return nil, fmt.Errorf("envFrom[%d]: neither configMapRef nor secretRef", i)
		}
		switch {
		case unsealErr != nil:
			return nil, fmt.Errorf("envFrom[%d]: %w", i, unsealErr)
		case !found && optional:
			continue
		case !found:
			return nil, fmt.Errorf("envFrom[%d]: %s %w", i, what, ErrNotFound)
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			if err := envValue(data[k]); err != nil {
				return nil, fmt.Errorf("envFrom[%d]: %s key %q: %w", i, what, k, err)
			}
			set(ef.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, e.Value)
			continue
		}
		v, ok, err := s.keyRef(e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// keyRef resolves one valueFrom; ok is false for an optional reference
// that resolves to nothing.
func (s *Set) keyRef(src *schema.EnvVarSource) (string, bool, error) {
	var (
		data  map[string][]byte
		found bool
		what  string
		sel   *schema.KeySelector
	)
	switch {
	case src.ConfigMapKeyRef != nil:
		sel = src.ConfigMapKeyRef
		what = fmt.Sprintf("configmap %q", sel.Name)
		data, found = s.configMapData(sel.Name)
	case src.SecretKeyRef != nil:
		sel = src.SecretKeyRef
		what = fmt.Sprintf("secret %q", sel.Name)
		var err error
		if data, found, err = s.secretData(sel.Name); err != nil {
			return "", false, err
		}
	default:
		return "", false, errors.New("valueFrom: neither configMapKeyRef nor secretKeyRef")
	}
	if !found {
		if isOptional(sel.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%s %w", what, ErrNotFound)
	}
	v, ok := data[sel.Key]
	if !ok {
		if isOptional(sel.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%s: key %q %w", what, sel.Key, ErrNotFound)
	}
	if err := envValue(v); err != nil {
		return "", false, fmt.Errorf("%s key %q: %w", what, sel.Key, err)
	}
	return string(v), true, nil
}

// envValue refuses what a process environment cannot hold.
func envValue(v []byte) error {
	if slices.Contains(v, 0) {
		return errors.New("the value holds a NUL byte: it cannot be an environment variable")
	}
	return nil
}

// UsesConfig reports whether a container's environment comes partly from
// ConfigMaps or Secrets.
func UsesConfig(c *schema.Container) bool {
	if len(c.EnvFrom) > 0 {
		return true
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return true
		}
	}
	return false
}

// EnvDigest is a short digest of an environment: the agent labels a
// container with it and replaces the container when the environment its
// ConfigMaps and Secrets give changes. (The container's spec holds the
// values themselves, readable by root only, as with any runtime.)
func EnvDigest(env []string) string {
	h := sha256.New()
	for _, e := range env {
		h.Write([]byte(e))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// File is one file of a configMap or secret volume.
type File struct {
	// Path is relative to the volume.
	Path string
	Data []byte
	Mode fs.FileMode
}

// Default file modes of configMap and secret volumes.
const (
	DefaultConfigMapMode fs.FileMode = 0o644
	DefaultSecretMode    fs.FileMode = 0o400
)

// ConfigMapFiles returns the files of a configMap volume, sorted by path.
func (s *Set) ConfigMapFiles(v *schema.ConfigMapVolume) ([]File, error) {
	data, found := s.configMapData(v.Name)
	return project(fmt.Sprintf("configmap %q", v.Name), data, found, nil, v.Items, v.DefaultMode, DefaultConfigMapMode, isOptional(v.Optional))
}

// SecretFiles returns the files of a secret volume, sorted by path.
func (s *Set) SecretFiles(v *schema.SecretVolume) ([]File, error) {
	data, found, err := s.secretData(v.SecretName)
	return project(fmt.Sprintf("secret %q", v.SecretName), data, found, err, v.Items, v.DefaultMode, DefaultSecretMode, isOptional(v.Optional))
}

func project(what string, data map[string][]byte, found bool, unsealErr error, items []schema.KeyToPath, mode *int32, def fs.FileMode, optional bool) ([]File, error) {
	if unsealErr != nil {
		return nil, unsealErr
	}
	if !found {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("%s %w", what, ErrNotFound)
	}
	m := def
	if mode != nil {
		m = fs.FileMode(*mode) & fs.ModePerm
	}
	var out []File
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(data)) {
			out = append(out, File{Path: k, Data: data[k], Mode: m})
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s: key %q %w", what, it.Key, ErrNotFound)
		}
		out = append(out, File{Path: it.Path, Data: v, Mode: m})
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Version returns a digest of the versions of the ConfigMap or Secret a
// volume projects ("" when absent): it changes when its data does.
func (s *Set) Version(v *schema.Volume) string {
	switch {
	case v.ConfigMap != nil:
		if cm, ok := s.configMaps[v.ConfigMap.Name]; ok {
			return "cm:" + cm.Version
		}
	case v.Secret != nil:
		if sec, ok := s.secrets[v.Secret.SecretName]; ok {
			return "s:" + sec.version
		}
	}
	return ""
}

// PullCredentials returns the registry credentials of a pod's
// imagePullSecrets, by registry host as image references write it, and
// a problem for each Secret that is missing, cannot be unsealed, or is
// not a readable kubernetes.io/dockerconfigjson Secret: as Kubernetes
// does, the pull goes ahead without it (the image may be public).
func (s *Set) PullCredentials(refs []schema.LocalObjectReference) (map[string]runtime.Credential, []string) {
	var problems []string
	creds := map[string]runtime.Credential{}
	for _, ref := range refs {
		data, found, err := s.secretData(ref.Name)
		switch {
		case err != nil:
			problems = append(problems, "imagePullSecrets: "+err.Error())
			continue
		case !found:
			problems = append(problems, fmt.Sprintf("imagePullSecrets: secret %q %v", ref.Name, ErrNotFound))
			continue
		}
		if t := s.secrets[ref.Name].typ; t != schema.SecretDockerConfigJSON {
			problems = append(problems, fmt.Sprintf("imagePullSecrets: secret %q is of type %s, not %s", ref.Name, t, schema.SecretDockerConfigJSON))
			continue
		}
		got, err := ParseDockerConfig(data[schema.DockerConfigJSONKey])
		if err != nil {
			problems = append(problems, fmt.Sprintf("imagePullSecrets: secret %q: %v", ref.Name, err))
			continue
		}
		for h, c := range got {
			if _, seen := creds[h]; !seen { // the first Secret naming a host wins
				creds[h] = c
			}
		}
	}
	return creds, problems
}

// ParseDockerConfig reads docker's config.json ({"auths": {HOST: {"auth":
// base64(user:password)} or {"username", "password"}}}) into credentials
// by registry host. Docker Hub's keys (https://index.docker.io/v1/, …)
// become docker.io. Errors never quote the content.
func ParseDockerConfig(b []byte) (map[string]runtime.Credential, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("key %s is empty", schema.DockerConfigJSONKey)
	}
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("key %s is not docker's config.json", schema.DockerConfigJSONKey)
	}
	out := map[string]runtime.Credential{}
	for key, a := range cfg.Auths {
		host := registryHost(key)
		if host == "" {
			continue
		}
		c := runtime.Credential{Username: a.Username, Password: a.Password}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("the auth of %s is not base64", host)
			}
			u, p, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("the auth of %s is not user:password", host)
			}
			c = runtime.Credential{Username: u, Password: p}
		}
		out[host] = c
	}
	return out, nil
}

// registryHost turns a config.json key (a host, or a URL) into a host as
// image references write it.
func registryHost(key string) string {
	h := key
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	h, _, _ = strings.Cut(h, "/")
	switch h {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return h
}
