package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func batchBody(t testing.TB, items []schema.DeviceBatchItem) string {
	t.Helper()
	b, err := json.Marshal(schema.DeviceBatch{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func batchItems(from, n int, labels map[string]string) []schema.DeviceBatchItem {
	items := make([]schema.DeviceBatchItem, n)
	for i := range items {
		items[i] = schema.DeviceBatchItem{Name: fmt.Sprintf("dev-%05d", from+i), Labels: labels}
	}
	return items
}

func TestDevicesBatchRegistersAndIssuesTokens(t *testing.T) {
	h := newTestHub(t, Options{})
	// dev-00000 exists with its own label and token: it is kept, with a
	// new token.
	if resp := h.admin(t, http.MethodPost, "/v1/apply", deviceYAML("dev-00000", "site", "old")); resp.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", resp.Code, resp.Body)
	}
	oldTok, err := h.Store.IssueToken(t.Context(), "dev-00000")
	if err != nil {
		t.Fatal(err)
	}
	items := batchItems(0, 1200, map[string]string{"site": "new"})
	items[7].Description = "Pi in the hall"
	resp := h.admin(t, http.MethodPost, "/v1/devices:batch", batchBody(t, items))
	if resp.Code != http.StatusOK {
		t.Fatalf("batch: %d %s", resp.Code, resp.Body)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q: tokens must not be cached", cc)
	}
	var res schema.DeviceBatchResult
	if err := json.Unmarshal(resp.Body, &res); err != nil || len(res.Items) != 1200 {
		t.Fatalf("answer: %v, %d items", err, len(res.Items))
	}
	tokens := map[string]bool{}
	for i, it := range res.Items {
		want := schema.ActionCreated
		if i == 0 {
			want = schema.ActionUnchanged
		}
		if it.Name != items[i].Name || it.Action != want || it.Token == "" || tokens[it.Token] {
			t.Fatalf("item %d: %+v, want %s %s with a token of its own", i, it, items[i].Name, want)
		}
		tokens[it.Token] = true
		if !h.Store.VerifyToken(it.Name, it.Token) {
			t.Fatalf("%s: its new token does not verify", it.Name)
		}
	}
	if h.Store.VerifyToken("dev-00000", oldTok) {
		t.Error("dev-00000's old token still works after the batch issued a new one")
	}
	devs, _, err := h.Store.ListDevices(t.Context(), nil)
	if err != nil || len(devs) != 1200 {
		t.Fatalf("stored devices: %d, %v", len(devs), err)
	}
	if got := devs[0].Metadata.Labels["site"]; got != "old" {
		t.Errorf("existing dev-00000 has site=%q, want its own label kept", got)
	}
	if devs[7].Metadata.Labels["site"] != "new" || devs[7].Spec.Description != "Pi in the hall" {
		t.Errorf("new dev-00007: %+v", devs[7])
	}
	// Sending the same batch again is safe: everything exists, new tokens.
	resp = h.admin(t, http.MethodPost, "/v1/devices:batch", batchBody(t, items[:3]))
	if err := json.Unmarshal(resp.Body, &res); err != nil || resp.Code != http.StatusOK || res.Items[2].Action != schema.ActionUnchanged {
		t.Errorf("again: %d %s", resp.Code, resp.Body)
	}
	// Only an admin registers devices.
	if resp := h.do(t, http.MethodPost, "/v1/devices:batch", h.Monitor, []byte(batchBody(t, batchItems(5000, 1, nil)))); resp.Code != http.StatusForbidden {
		t.Errorf("monitor: %d, want 403", resp.Code)
	}
}

func TestDevicesBatchBadInputStoresNothing(t *testing.T) {
	h := newTestHub(t, Options{})
	bad := batchItems(0, 10, nil)
	bad[3].Name = "Bad_Name"
	bad[6].Name = bad[2].Name
	bad[8].Labels = map[string]string{"site": "not a label value!"}
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"bad rows", batchBody(t, bad), []string{"items[3].name", "items[6].name", "is also items[2]", "items[8]"}},
		{"empty", `{"items":[]}`, []string{"items", "no devices"}},
		{"too many", batchBody(t, batchItems(0, schema.MaxDeviceBatch+1, nil)), []string{"items", "at most 10000"}},
		{"not JSON", `name,site`, []string{"DeviceBatch"}},
		{"unknown field", `{"items":[{"name":"a","lables":{}}]}`, []string{"lables"}},
	} {
		resp := h.admin(t, http.MethodPost, "/v1/devices:batch", tc.body)
		if resp.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, resp.Code, resp.Body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(resp.Body), w) {
				t.Errorf("%s: answer %s does not say %q", tc.name, resp.Body, w)
			}
		}
	}
	if devs, _, err := h.Store.ListDevices(t.Context(), nil); err != nil || len(devs) != 0 {
		t.Errorf("after refused batches: %d devices stored, %v; want none", len(devs), err)
	}
	if resp := h.admin(t, http.MethodGet, "/v1/devices:batch", ""); resp.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/devices:batch: %d, want 405", resp.Code)
	}
}

// newTokenBenchHub is a hub whose store hashes tokens for Mosquitto too,
// as fleet-hub's does.
func newTokenBenchHub(b *testing.B) *testHub {
	st, err := store.Open(store.Options{Dir: b.TempDir(), GCInterval: -1, PasswordHash: broker.MosquittoPasswordHash})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return newTestHubOn(b, st, Options{})
}

// BenchmarkIssueTokens10k registers 10,000 devices as test/scale did:
// apply them in manifests of 500, then one POST /v1/devices/NAME/token per
// device, 16 at once. It reports the wall time per 10,000.
func BenchmarkIssueTokens10k(b *testing.B) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		h := newTokenBenchHub(b)
		b.StartTimer()
		start := time.Now()
		seedDevices(b, h, n)
		var wg sync.WaitGroup
		next := make(chan int)
		ctx, cancel := context.WithCancel(b.Context())
		for range 16 {
			wg.Go(func() {
				for i := range next {
					if resp := h.do(b, http.MethodPost, fmt.Sprintf("/v1/devices/device-%d/token", i), h.Admin, nil); resp.Code != http.StatusOK {
						b.Errorf("token: %d %s", resp.Code, resp.Body)
						cancel()
					}
				}
			})
		}
		for i := range n {
			if ctx.Err() != nil {
				break
			}
			next <- i
		}
		close(next)
		wg.Wait()
		cancel()
		b.ReportMetric(time.Since(start).Seconds(), "s/10k-devices")
	}
}

// BenchmarkDevicesBatch10k registers the same 10,000 devices with their
// tokens in one POST /v1/devices:batch.
func BenchmarkDevicesBatch10k(b *testing.B) {
	items := batchItems(0, 10000, map[string]string{"site": "a"})
	for b.Loop() {
		b.StopTimer()
		h := newTokenBenchHub(b)
		body := []byte(batchBody(b, items))
		b.StartTimer()
		start := time.Now()
		if resp := h.do(b, http.MethodPost, "/v1/devices:batch", h.Admin, body); resp.Code != http.StatusOK {
			b.Fatalf("batch: %d %s", resp.Code, resp.Body)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/10k-devices")
	}
}
