package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

func configObjects() (*schema.ConfigMap, *schema.Secret, *schema.Secret) {
	created := now.Add(-5 * time.Hour)
	cm := &schema.ConfigMap{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindConfigMap},
		Metadata: schema.ObjectMeta{Name: "gw", Labels: map[string]string{"site": "lab"}, CreationTimestamp: &created},
		Data:     map[string]string{"mode": "fast", "gateway.ini": "a=1\nb=2\n"}, BinaryData: map[string][]byte{"logo": {1, 2}}}
	// As the hub answers: keys and sizes.
	creds := &schema.Secret{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: "creds", CreationTimestamp: &created},
		Type:     schema.SecretOpaque, Keys: map[string]int{"token": 12, "user": 5}}
	// As a manifest holds it: sizes from the values, never the values.
	local := &schema.Secret{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: "registry", CreationTimestamp: &created},
		Type:     schema.SecretDockerConfigJSON, Data: map[string][]byte{".dockerconfigjson": []byte("hidden-value")}}
	return cm, creds, local
}

func TestConfigTables(t *testing.T) {
	cm, creds, local := configObjects()
	for _, tt := range []struct {
		name   string
		format Format
		kind   client.Kind
		objs   []schema.Object
		want   string
	}{
		{"configmaps", Table, client.ConfigMaps, []schema.Object{cm}, `
NAME   DATA   AGE
gw     3      5h
`},
		{"configmaps wide", Wide, client.ConfigMaps, []schema.Object{cm}, `
NAME   DATA   AGE   KEYS                    LABELS
gw     3      5h    gateway.ini,logo,mode   site=lab
`},
		{"secrets", Table, client.Secrets, []schema.Object{creds, local}, `
NAME       TYPE                             DATA   AGE
creds      Opaque                           2      5h
registry   kubernetes.io/dockerconfigjson   1      5h
`},
		{"secrets wide", Wide, client.Secrets, []schema.Object{creds}, `
NAME    TYPE     DATA   AGE   KEYS         LABELS
creds   Opaque   2      5h    token,user   <none>
`},
		{"names", Name, client.Secrets, []schema.Object{creds}, "\nsecret/creds\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Now: func() time.Time { return now }}
			if err := p.PrintList(tt.kind, tt.objs, "17"); err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tt.want, "\n"); b.String() != want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: JSON}
	if err := p.PrintList(client.Secrets, []schema.Object{creds}, "17"); err != nil || !strings.Contains(b.String(), `"kind": "SecretList"`) {
		t.Errorf("json list: %v\n%s", err, b.String())
	}
}

func TestDescribeConfigKinds(t *testing.T) {
	cm, creds, local := configObjects()
	var b bytes.Buffer
	if err := DescribeSecret(&b, creds, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Type:              Opaque\nData:\n  token:  12 bytes\n  user:   5 bytes\n") {
		t.Errorf("secret:\n%s", b.String())
	}
	b.Reset()
	if err := DescribeSecret(&b, local, now); err != nil || strings.Contains(b.String(), "hidden-value") || !strings.Contains(b.String(), ".dockerconfigjson:  12 bytes") {
		t.Errorf("secret from a manifest: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := DescribeConfigMap(&b, cm, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Data:\n  gateway.ini:\n    a=1\n    b=2\n  mode:  fast\nBinary Data:\n  logo:  2 bytes\n") {
		t.Errorf("configmap:\n%s", b.String())
	}
}
