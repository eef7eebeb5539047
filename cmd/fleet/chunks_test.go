package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// newChunkEnv is newEnv on the hub's real API and a Badger store of n
// devices; it records the query of every GET /v1/devices.
func newChunkEnv(t *testing.T, n int) (*env, func() []string) {
	t.Helper()
	e := newEnv(t)
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	tok := strings.Repeat(adminToken, 4)
	if err := st.PutCredential(t.Context(), store.AdminCredential, store.RoleAdmin, tok); err != nil {
		t.Fatal(err)
	}
	var objs []schema.Object
	for i := range n {
		d := &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}}
		d.Metadata.Name = fmt.Sprintf("pi-%04d", i)
		objs = append(objs, d)
	}
	if _, err := st.ApplyAll(t.Context(), objs, false); err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var queries []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/devices" {
			mu.Lock()
			queries = append(queries, r.URL.Query().Get("limit")+"|"+map[bool]string{true: "continue", false: ""}[r.URL.Query().Has("continue")])
			mu.Unlock()
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	e.vars["FLEET_HUB"], e.vars["FLEET_TOKEN"] = ts.URL, tok
	return e, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := queries
		queries = nil
		return out
	}
}

func TestGetChunkSize(t *testing.T) {
	e, requests := newChunkEnv(t, 1200)
	want := make([]string, 1200)
	for i := range want {
		want[i] = fmt.Sprintf("device/pi-%04d", i)
	}
	wantOut := strings.Join(want, "\n") + "\n"
	for _, tc := range []struct {
		args []string
		reqs []string
	}{
		{nil, []string{"500|", "500|continue", "500|continue"}},
		{[]string{"--chunk-size", "500"}, []string{"500|", "500|continue", "500|continue"}},
		{[]string{"--chunk-size", "1000"}, []string{"1000|", "1000|continue"}},
		{[]string{"--chunk-size", "1200"}, []string{"1200|"}},
		{[]string{"--chunk-size", "0"}, []string{"|"}},
	} {
		args := append([]string{"get", "devices", "-o", "name"}, tc.args...)
		out := e.ok("", args...)
		if out != wantOut {
			t.Errorf("fleet %s: %d lines, want every device once in order", strings.Join(args, " "), strings.Count(out, "\n"))
		}
		if got := requests(); strings.Join(got, " ") != strings.Join(tc.reqs, " ") {
			t.Errorf("fleet %s: requests (limit|continue) %q, want %q", strings.Join(args, " "), got, tc.reqs)
		}
	}
	// The table and -o json of a chunked list hold every device too.
	if out := e.ok("", "get", "devices", "--chunk-size", "300", "--no-headers"); strings.Count(out, "\n") != 1200 {
		t.Errorf("table by 300: %d lines, want 1,200", strings.Count(out, "\n"))
	}
	var l schema.DeviceList
	mustJSON(t, e.ok("", "get", "devices", "--chunk-size", "700", "-o", "json"), &l)
	if len(l.Items) != 1200 || l.Items[1199].Metadata.Name != "pi-1199" {
		t.Errorf("-o json by 700: %d items", len(l.Items))
	}
	r := e.run("", "get", "devices", "--chunk-size", "-1")
	if r.code == 0 || !strings.Contains(r.stderr, "--chunk-size") {
		t.Errorf("--chunk-size -1: exit %d, stderr %q; want an error naming --chunk-size", r.code, r.stderr)
	}
}

func TestListProgress(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	fn := listProgress(&b, "devices", func() time.Time { return now })
	fn(500, true)
	now = now.Add(50 * time.Millisecond)
	fn(1000, true) // within 200 ms: not shown
	now = now.Add(time.Second)
	fn(1500, true)
	fn(1700, false)
	got := strings.ReplaceAll(b.String(), "\r\x1b[K", "|")
	if want := "|listing devices: 500 so far…|listing devices: 1500 so far…|listing devices: 1700, done\n"; got != want {
		t.Errorf("progress %q, want %q", got, want)
	}
	b.Reset()
	one := listProgress(&b, "devices", time.Now)
	one(20, false)
	if b.Len() != 0 {
		t.Errorf("a one-page listing printed %q, want nothing", b.String())
	}
}
