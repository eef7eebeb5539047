package client_test

import (
	"net/http"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

const configManifest = `apiVersion: fleet/v1
kind: ConfigMap
metadata: {name: gw, labels: {site: lab}}
data: {mode: fast}
---
apiVersion: fleet/v1
kind: Secret
metadata: {name: creds}
stringData: {token: s3cr3t}
`

func TestKinds(t *testing.T) {
	for _, k := range client.Kinds {
		if client.KindOf(k.Object()) != k {
			t.Errorf("KindOf(%s.Object()) = %q", k, client.KindOf(k.Object()))
		}
	}
	if client.KindOf(schema.KindSecret) != client.Secrets || client.ConfigMaps.Object() != schema.KindConfigMap {
		t.Error("config kinds")
	}
	if client.KindOf("Widget") != "" || client.Kind("widgets").Object() != "" {
		t.Error("unknown kinds")
	}
}

// TestConfigKinds: ConfigMaps and Secrets through the generic and typed
// calls; a Secret comes back with its keys and sizes only.
func TestConfigKinds(t *testing.T) {
	h, c := newHub(t)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, []byte(configManifest), false); err != nil {
		t.Fatal(err)
	}
	cm, err := c.GetConfigMap(ctx, "gw")
	if err != nil || cm.Data["mode"] != "fast" {
		t.Fatalf("GetConfigMap: %+v %v", cm, err)
	}
	s, err := c.GetSecret(ctx, "creds")
	if err != nil || s.Data != nil || s.Keys["token"] != 6 || s.Type != schema.SecretOpaque {
		t.Fatalf("GetSecret: %+v %v", s, err)
	}
	for _, k := range []client.Kind{client.ConfigMaps, client.Secrets} {
		objs, rv, err := c.List(ctx, k, "")
		if err != nil || len(objs) != 1 || rv == "" || objs[0].GetTypeMeta().Kind != k.Object() {
			t.Errorf("List(%s): %v %q %v", k, objs, rv, err)
		}
		o, err := c.Get(ctx, k, objs[0].GetMetadata().Name)
		if err != nil || o.GetTypeMeta().Kind != k.Object() {
			t.Errorf("Get(%s): %v %v", k, o, err)
		}
	}
	l, err := c.ListConfigMaps(ctx, "site=lab")
	if err != nil || len(l.Items) != 1 {
		t.Errorf("ListConfigMaps with a selector: %+v %v", l, err)
	}
	sl, err := c.ListSecrets(ctx, "")
	if err != nil || len(sl.Items) != 1 || sl.Items[0].Data != nil {
		t.Errorf("ListSecrets: %+v %v", sl, err)
	}
	if _, err := c.Delete(ctx, client.Secrets, "creds", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteConfigMap(ctx, "gw", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSecret(ctx, "creds"); !client.IsNotFound(err) {
		t.Errorf("deleted: %v", err)
	}
	h.Fail(http.MethodGet, "/v1/secrets", 1, http.StatusForbidden, "Forbidden")
	if _, err := c.ListSecrets(ctx, ""); !client.IsForbidden(err) || client.IsNotFound(err) {
		t.Errorf("403: %v", err)
	}
}
