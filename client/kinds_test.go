package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// kindServer answers GET and DELETE of any collection and object with
// an object of the collection's kind, as the hub does.
func kindServer(t *testing.T) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, name, one := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
		k, ok := schema.KindOfResource(res)
		if !ok {
			http.NotFound(w, r)
			return
		}
		obj := fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":%q,"metadata":{"name":%q}}`, k.Kind, name)
		if !one {
			obj = fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":%q,"metadata":{"resourceVersion":"7"},"items":[%s,%s]}`,
				k.ListKind, strings.Replace(obj, `""`, `"a"`, 1), strings.Replace(obj, `""`, `"b"`, 1))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, obj)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEveryKindIsACollection: every stored kind of schema's table is a
// collection of the client, listed, read and deleted as its own Go type.
func TestEveryKindIsACollection(t *testing.T) {
	c := kindServer(t)
	ctx := ctxT(t)
	for _, info := range schema.StoredKinds() {
		k := client.KindOf(info.Kind)
		if k == "" || k.Object() != info.Kind || !slices.Contains(client.Kinds, k) {
			t.Errorf("kind %s: collection %q is not in client.Kinds %q", info.Kind, k, client.Kinds)
			continue
		}
		want := reflect.PointerTo(info.Type)
		objs, rv, err := c.List(ctx, k, "")
		if err != nil || rv != "7" || len(objs) != 2 || reflect.TypeOf(objs[0]) != want || objs[1].GetMetadata().Name != "b" {
			t.Errorf("List(%s) = %v, %q, %v", k, objs, rv, err)
		}
		for _, call := range []func() (schema.Object, error){
			func() (schema.Object, error) { return c.Get(ctx, k, "x") },
			func() (schema.Object, error) { return c.Delete(ctx, k, "x", client.DeleteOptions{}) },
		} {
			obj, err := call()
			if err != nil || reflect.TypeOf(obj) != want || obj.GetMetadata().Name != "x" {
				t.Errorf("%s: got %v, %v", k, obj, err)
			}
		}
	}
	if got := len(client.Kinds); got != len(schema.StoredKinds()) {
		t.Errorf("client.Kinds has %d collections, the table %d stored kinds", got, len(schema.StoredKinds()))
	}
}

func TestUnknownCollection(t *testing.T) {
	c := kindServer(t)
	// Today's collections, in their order; a new one comes after them.
	want := `unknown resource kind "widgets": want "deployments", "devices", "configmaps", "secrets"`
	lastOr := func(err error) string { return strings.Replace(err.Error(), " or ", ", ", 1) }
	if _, _, err := c.List(ctxT(t), "widgets", ""); err == nil || !strings.HasPrefix(lastOr(err), want) {
		t.Errorf("List(widgets): %v, want %s", err, want)
	}
	if _, err := c.Get(ctxT(t), "widgets", "x"); err == nil || !strings.HasPrefix(lastOr(err), want) {
		t.Errorf("Get(widgets): %v", err)
	}
	if _, err := c.Delete(ctxT(t), "widgets", "x", client.DeleteOptions{}); err == nil || !strings.HasPrefix(lastOr(err), want) {
		t.Errorf("Delete(widgets): %v", err)
	}
	if _, err := c.Get(ctxT(t), client.Devices, ""); err == nil || !strings.Contains(err.Error(), "resource name is empty") {
		t.Errorf("Get with no name: %v", err)
	}
}
