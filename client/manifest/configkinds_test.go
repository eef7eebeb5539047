package manifest

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestComparableConfigKinds(t *testing.T) {
	sec := &schema.Secret{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: "creds"}, Type: schema.SecretOpaque,
		Data: map[string][]byte{"token": []byte("s3cr3t-value")}}
	got, err := Comparable(sec)
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: fleet/v1\ndata:\n  token: <12 bytes>\nkind: Secret\nmetadata:\n  name: creds\ntype: Opaque\n"
	if got != want {
		t.Errorf("secret:\n%s\nwant\n%s", got, want)
	}
	// As the hub answers it: the same rendering.
	live := &schema.Secret{TypeMeta: sec.TypeMeta, Metadata: sec.Metadata, Type: sec.Type, Keys: map[string]int{"token": 12}}
	if l, _ := Comparable(live); l != want {
		t.Errorf("live secret:\n%s", l)
	}
	d, err := DiffWith(live, Object{Object: sec, Source: "f.yaml"}, DiffOptions{SecretValuesChanged: true})
	if err != nil || !strings.Contains(d, "+values: changed (not shown)\n") || strings.Contains(d, "s3cr3t") {
		t.Errorf("diff: %v\n%s", err, d)
	}
	if d, _ := Diff(live, Object{Object: sec, Source: "f.yaml"}); d != "" {
		t.Errorf("no change:\n%s", d)
	}

	cm := &schema.ConfigMap{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindConfigMap},
		Metadata: schema.ObjectMeta{Name: "gw"}, Data: map[string]string{"mode": "fast"}}
	if got, _ := Comparable(cm); got != "apiVersion: fleet/v1\ndata:\n  mode: fast\nkind: ConfigMap\nmetadata:\n  name: gw\n" {
		t.Errorf("configmap:\n%s", got)
	}
}
