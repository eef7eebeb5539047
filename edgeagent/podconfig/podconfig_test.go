package podconfig

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

func ptr[T any](v T) *T { return &v }

// sealed returns a SealedSecret of data sealed to key.
func sealed(t *testing.T, key *devicekey.Key, name, typ string, data map[string]string) schema.SealedSecret {
	t.Helper()
	s := schema.SealedSecret{Name: name, Type: typ, Version: "7", KeyID: key.ID(), Data: map[string][]byte{}}
	for k, v := range data {
		b, err := devicekey.Seal(key.PublicKey(), []byte(v), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s.Data[k] = b
	}
	return s
}

func newKey(t *testing.T) *devicekey.Key {
	t.Helper()
	k, err := devicekey.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestEnv(t *testing.T) {
	key := newKey(t)
	ds := &schema.DesiredState{
		ConfigMaps: []schema.ConfigMapData{{Name: "cfg", Version: "1", Data: map[string]string{"LEVEL": "debug", "URL": "http://x"}}},
		Secrets:    []schema.SealedSecret{sealed(t, key, "db", "", map[string]string{"password": "hunter2", "user": "app"})},
	}
	set := New(ds, key)
	c := &schema.Container{
		EnvFrom: []schema.EnvFromSource{
			{ConfigMapRef: &schema.ObjectRef{Name: "cfg"}},
			{Prefix: "DB_", SecretRef: &schema.ObjectRef{Name: "db"}},
			{ConfigMapRef: &schema.ObjectRef{Name: "absent", Optional: ptr(true)}},
		},
		Env: []schema.EnvVar{
			{Name: "LEVEL", Value: "info"}, // env wins over envFrom
			{Name: "PASS", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "db", Key: "password"}}},
			{Name: "MODE", ValueFrom: &schema.EnvVarSource{ConfigMapKeyRef: &schema.KeySelector{Name: "cfg", Key: "nope", Optional: ptr(true)}}},
		},
	}
	got, err := set.Env(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"LEVEL=info", "URL=http://x", "DB_password=hunter2", "DB_user=app", "PASS=hunter2"}
	if !slices.Equal(got, want) {
		t.Fatalf("Env = %q, want %q", got, want)
	}
	if !UsesConfig(c) || UsesConfig(&schema.Container{Env: []schema.EnvVar{{Name: "A", Value: "b"}}}) {
		t.Error("UsesConfig")
	}
	d1 := EnvDigest(got)
	got[4] = "PASS=other"
	if EnvDigest(got) == d1 {
		t.Error("EnvDigest did not change with a value")
	}
}

func TestEnvErrorsNameWhatIsMissingNeverValues(t *testing.T) {
	key := newKey(t)
	other := newKey(t)
	ds := &schema.DesiredState{
		ConfigMaps: []schema.ConfigMapData{{Name: "cfg", Data: map[string]string{"a": "1"}}},
		Secrets: []schema.SealedSecret{
			sealed(t, key, "db", "", map[string]string{"password": "hunter2"}),
			sealed(t, other, "elsewhere", "", map[string]string{"password": "hunter2"}),
		},
	}
	set := New(ds, key)
	ref := func(src schema.EnvVarSource) *schema.Container {
		return &schema.Container{Env: []schema.EnvVar{{Name: "X", ValueFrom: &src}}}
	}
	for _, tc := range []struct {
		name string
		c    *schema.Container
		want []string
		is   error
	}{
		{"missing configmap", ref(schema.EnvVarSource{ConfigMapKeyRef: &schema.KeySelector{Name: "gone", Key: "a"}}), []string{`configmap "gone"`, "not found"}, ErrNotFound},
		{"missing key", ref(schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "db", Key: "token"}}), []string{`secret "db"`, `key "token"`}, ErrNotFound},
		{"other device's key", ref(schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "elsewhere", Key: "password"}}), []string{`secret "elsewhere"`, other.ID(), key.ID()}, ErrUnsealed},
		{"missing envFrom", &schema.Container{EnvFrom: []schema.EnvFromSource{{SecretRef: &schema.ObjectRef{Name: "gone"}}}}, []string{`secret "gone"`}, ErrNotFound},
		{"unsealable envFrom, even optional", &schema.Container{EnvFrom: []schema.EnvFromSource{{SecretRef: &schema.ObjectRef{Name: "elsewhere", Optional: ptr(true)}}}}, []string{`secret "elsewhere"`}, ErrUnsealed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := set.Env(tc.c)
			if err == nil || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%v carries a secret value", err)
			}
		})
	}
	// No key at all: every Secret is unusable, and says so.
	if _, err := New(ds, nil).Env(ref(schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "db", Key: "password"}})); !errors.Is(err, ErrUnsealed) {
		t.Errorf("without a key: %v", err)
	}
}

func TestFiles(t *testing.T) {
	key := newKey(t)
	ds := &schema.DesiredState{
		ConfigMaps: []schema.ConfigMapData{{Name: "cfg", Data: map[string]string{"a.ini": "x=1", "b": "2"}, BinaryData: map[string][]byte{"bin": {0, 1}}}},
		Secrets:    []schema.SealedSecret{sealed(t, key, "tls", "", map[string]string{"key.pem": "PRIVATE"})},
	}
	set := New(ds, key)
	files, err := set.ConfigMapFiles(&schema.ConfigMapVolume{Name: "cfg"})
	if err != nil || len(files) != 3 || files[0].Path != "a.ini" || files[2].Path != "bin" || files[0].Mode != 0o644 {
		t.Fatalf("all keys: %+v %v", files, err)
	}
	files, err = set.ConfigMapFiles(&schema.ConfigMapVolume{Name: "cfg", Items: []schema.KeyToPath{{Key: "b", Path: "conf/b.txt"}}, DefaultMode: ptr(int32(0o600))})
	if err != nil || len(files) != 1 || files[0].Path != "conf/b.txt" || string(files[0].Data) != "2" || files[0].Mode != 0o600 {
		t.Fatalf("items: %+v %v", files, err)
	}
	if _, err := set.ConfigMapFiles(&schema.ConfigMapVolume{Name: "cfg", Items: []schema.KeyToPath{{Key: "zz", Path: "z"}}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing item: %v", err)
	}
	if files, err := set.ConfigMapFiles(&schema.ConfigMapVolume{Name: "cfg", Optional: ptr(true), Items: []schema.KeyToPath{{Key: "zz", Path: "z"}}}); err != nil || len(files) != 0 {
		t.Errorf("optional missing item: %v %v", files, err)
	}
	if files, err := set.ConfigMapFiles(&schema.ConfigMapVolume{Name: "gone", Optional: ptr(true)}); err != nil || files != nil {
		t.Errorf("optional missing configmap: %v %v", files, err)
	}
	files, err = set.SecretFiles(&schema.SecretVolume{SecretName: "tls"})
	if err != nil || len(files) != 1 || string(files[0].Data) != "PRIVATE" || files[0].Mode != fs.FileMode(0o400) {
		t.Fatalf("secret: %+v %v", files, err)
	}
	if _, err := set.SecretFiles(&schema.SecretVolume{SecretName: "gone"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing secret: %v", err)
	}
}

func TestPullCredentials(t *testing.T) {
	key := newKey(t)
	auth := base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))
	cfgJSON := `{"auths":{"registry.local:5000":{"auth":"` + auth + `"},"https://index.docker.io/v1/":{"username":"hub","password":"pw"}}}`
	ds := &schema.DesiredState{Secrets: []schema.SealedSecret{
		sealed(t, key, "regcred", schema.SecretDockerConfigJSON, map[string]string{schema.DockerConfigJSONKey: cfgJSON}),
		sealed(t, key, "opaque", "", map[string]string{"x": "y"}),
		sealed(t, key, "broken", schema.SecretDockerConfigJSON, map[string]string{schema.DockerConfigJSONKey: "{not json s3cret"}),
	}}
	creds, problems := New(ds, key).PullCredentials([]schema.LocalObjectReference{{Name: "regcred"}, {Name: "opaque"}, {Name: "gone"}, {Name: "broken"}})
	want := map[string]runtime.Credential{"registry.local:5000": {Username: "robot", Password: "s3cret"}, "docker.io": {Username: "hub", Password: "pw"}}
	if len(creds) != len(want) || creds["registry.local:5000"] != want["registry.local:5000"] || creds["docker.io"] != want["docker.io"] {
		t.Errorf("creds = %v, want %v", creds, want)
	}
	if len(problems) != 3 {
		t.Fatalf("problems = %q, want opaque, gone, broken", problems)
	}
	for _, p := range problems {
		if strings.Contains(p, "s3cret") {
			t.Errorf("problem %q carries a secret", p)
		}
	}
}
