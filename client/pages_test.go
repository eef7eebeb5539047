package client_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// realHub serves the hub's own API on a Badger store of n devices.
func realHub(t *testing.T, n int) (*client.Client, *store.Store) {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	tok := strings.Repeat(token, 4)
	if err := st.PutCredential(t.Context(), store.AdminCredential, store.RoleAdmin, tok); err != nil {
		t.Fatal(err)
	}
	var objs []schema.Object
	for i := range n {
		d := &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}}
		d.Metadata.Name = fmt.Sprintf("pi-%04d", i)
		d.Metadata.Labels = map[string]string{"half": fmt.Sprint(i % 2)}
		objs = append(objs, d)
	}
	if _, err := st.ApplyAll(t.Context(), objs, false); err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, tok)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

func TestListFollowsPages(t *testing.T) {
	c, _ := realHub(t, 1100)
	ctx := ctxT(t)
	var calls []string
	objs, rv, err := c.ListChunked(ctx, client.Devices, "", client.ListOptions{ChunkSize: 250, OnPage: func(n int, more bool) {
		calls = append(calls, fmt.Sprintf("%d/%v", n, more))
	}})
	if err != nil || rv == "" || len(objs) != 1100 {
		t.Fatalf("ListChunked by 250: %d objects, rv %q, %v", len(objs), rv, err)
	}
	for i, o := range objs {
		if want := fmt.Sprintf("pi-%04d", i); o.GetMetadata().Name != want {
			t.Fatalf("item %d is %s, want %s", i, o.GetMetadata().Name, want)
		}
	}
	if got := strings.Join(calls, " "); got != "250/true 500/true 750/true 1000/true 1100/false" {
		t.Errorf("pages: %s", got)
	}
	calls = nil
	if objs, _, err := c.ListChunked(ctx, client.Devices, "half=1", client.ListOptions{ChunkSize: -1, OnPage: func(n int, more bool) {
		calls = append(calls, fmt.Sprintf("%d/%v", n, more))
	}}); err != nil || len(objs) != 550 || len(calls) != 1 {
		t.Errorf("everything at once, half=1: %d objects in %d pages, %v", len(objs), len(calls), err)
	}
	// The typed lists and List follow pages of DefaultChunkSize.
	l, err := c.ListDevices(ctx, "")
	if err != nil || len(l.Items) != 1100 || l.Kind != "DeviceList" || l.Metadata.ResourceVersion != rv || l.Items[1099].Metadata.Name != "pi-1099" {
		t.Errorf("ListDevices: %d items, kind %q, rv %q (want %s), %v", len(l.Items), l.Kind, l.Metadata.ResourceVersion, rv, err)
	}
	if objs, _, err := c.List(ctx, client.Devices, "half=0"); err != nil || len(objs) != 550 {
		t.Errorf("List half=0: %d, %v", len(objs), err)
	}
}
