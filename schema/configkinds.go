package schema

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
)

// DeviceKeyID names a device public key (DeviceStatus.publicKey): the
// first 8 bytes of its SHA-256, in hex.
func DeviceKeyID(publicKey string) string {
	sum := sha256.Sum256([]byte(publicKey))
	return hex.EncodeToString(sum[:8])
}

// ParseDevicePublicKey decodes a device public key: base64 (std) of 32
// bytes.
func ParseDevicePublicKey(s string) (*[32]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, errors.New("publicKey: want the base64 of a 32-byte X25519 key")
	}
	var k [32]byte
	copy(k[:], b)
	return &k, nil
}

// Kinds of configuration object, referenced by pods.
const (
	KindConfigMap = "ConfigMap"
	KindSecret    = "Secret"
)

// Secret types.
const (
	// SecretOpaque is a Secret of arbitrary keys.
	SecretOpaque = "Opaque"
	// SecretDockerConfigJSON holds registry credentials under the key
	// .dockerconfigjson, in docker's config.json format, for a pod's
	// imagePullSecrets.
	SecretDockerConfigJSON = "kubernetes.io/dockerconfigjson"
	// DockerConfigJSONKey is the key of a SecretDockerConfigJSON Secret.
	DockerConfigJSONKey = ".dockerconfigjson"
)

// MaxConfigBytes bounds the data of one ConfigMap or Secret: it travels
// to every device whose pods use it.
const MaxConfigBytes = 256 << 10

// ConfigMap holds configuration for pods: variables (env valueFrom,
// envFrom) and files (a configMap volume). A change reaches exactly the
// devices whose pods use it.
type ConfigMap struct {
	TypeMeta `json:",inline"`
	// Metadata names the ConfigMap.
	Metadata ObjectMeta `json:"metadata"`
	// Data are the keys and their text values. A key is letters, digits,
	// '-', '_' or '.', such as gateway.ini.
	Data map[string]string `json:"data,omitempty"`
	// BinaryData are keys with binary values, base64 in YAML and JSON; a
	// key is in data or binaryData, not both.
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
}

func (c *ConfigMap) GetTypeMeta() *TypeMeta   { return &c.TypeMeta }
func (c *ConfigMap) GetMetadata() *ObjectMeta { return &c.Metadata }

// Secret holds credentials for pods, as a ConfigMap does configuration.
// Its values are stored encrypted by the hub, travel encrypted to each
// device's own key, are never printed by get or describe (keys and sizes
// only), and are never shown to the monitor role.
type Secret struct {
	TypeMeta `json:",inline"`
	// Metadata names the Secret.
	Metadata ObjectMeta `json:"metadata"`
	// Type is Opaque, or kubernetes.io/dockerconfigjson for registry
	// credentials (imagePullSecrets). Defaults to Opaque.
	Type string `json:"type,omitempty"`
	// Data are the keys and their values, base64 in YAML and JSON.
	Data map[string][]byte `json:"data,omitempty"`
	// StringData are keys with text values, merged into data when the
	// Secret is written (a key in both takes this value); never read back.
	StringData map[string]string `json:"stringData,omitempty"`
	// Keys are the Secret's keys and the size of each value in bytes, set
	// by the hub in what it answers (get, list, watch, apply), which never
	// carries data or stringData. Read-only: ignored in a manifest.
	Keys map[string]int `json:"keys,omitempty"`
}

func (s *Secret) GetTypeMeta() *TypeMeta   { return &s.TypeMeta }
func (s *Secret) GetMetadata() *ObjectMeta { return &s.Metadata }

// DefaultSecret folds stringData into data and sets the type.
func DefaultSecret(s *Secret) {
	if s.Type == "" {
		s.Type = SecretOpaque
	}
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
}

// ConfigMapList is the body of GET /v1/configmaps.
type ConfigMapList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta    `json:"metadata"`
	Items    []ConfigMap `json:"items"`
}

// SecretList is the body of GET /v1/secrets: every Secret with its keys
// and their sizes, never their values.
type SecretList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta `json:"metadata"`
	Items    []Secret `json:"items"`
}
