package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// storeDevices creates n devices dev-00000 … in batched transactions.
func storeDevices(t testing.TB, st *store.Store, from, n int, labels map[string]string) {
	t.Helper()
	for start := from; start < from+n; start += 500 {
		var objs []schema.Object
		for i := start; i < min(start+500, from+n); i++ {
			d := &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}}
			d.Metadata.Name = fmt.Sprintf("dev-%05d", i)
			d.Metadata.Labels = labels
			objs = append(objs, d)
		}
		if _, err := st.ApplyAll(t.Context(), objs, false); err != nil {
			t.Fatal(err)
		}
	}
}

type devicePage struct {
	Metadata schema.ListMeta `json:"metadata"`
	Items    []schema.Device `json:"items"`
}

func (h *testHub) devicePage(t *testing.T, query string) devicePage {
	t.Helper()
	resp := h.admin(t, http.MethodGet, "/v1/devices?"+query, "")
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /v1/devices?%s: %d %s", query, resp.Code, resp.Body)
	}
	var p devicePage
	if err := json.Unmarshal(resp.Body, &p); err != nil {
		t.Fatalf("decode page: %v", err)
	}
	return p
}

// listAllPages follows continue tokens and returns the names in order.
func (h *testHub) listAllPages(t *testing.T, query string, between func(page int)) (names []string, pages int, revs []string) {
	t.Helper()
	cont := ""
	for {
		q := query
		if cont != "" {
			q += "&continue=" + url.QueryEscape(cont)
		}
		p := h.devicePage(t, q)
		pages++
		revs = append(revs, p.Metadata.ResourceVersion)
		for _, d := range p.Items {
			names = append(names, d.Metadata.Name)
		}
		if p.Metadata.Continue == "" {
			return names, pages, revs
		}
		cont = p.Metadata.Continue
		if between != nil {
			between(pages)
		}
		if pages > 1000 {
			t.Fatal("more than 1,000 pages: the listing does not end")
		}
	}
}

func TestListPagesEveryDeviceOnceInOrder(t *testing.T) {
	h := newTestHub(t, Options{})
	storeDevices(t, h.Store, 0, 2500, nil)
	names, pages, revs := h.listAllPages(t, "limit=1000", nil)
	if pages != 3 {
		t.Errorf("2,500 devices by 1,000: %d pages, want 3", pages)
	}
	if len(names) != 2500 {
		t.Fatalf("got %d devices, want 2,500", len(names))
	}
	for i, n := range names {
		if want := fmt.Sprintf("dev-%05d", i); n != want {
			t.Fatalf("item %d is %s, want %s (every device once, in name order)", i, n, want)
		}
	}
	for _, rv := range revs {
		if rv != revs[0] {
			t.Errorf("page resourceVersions %v: every page carries the first page's", revs)
		}
	}
	// Without limit: every device in one answer, no continue.
	all := h.devicePage(t, "")
	if len(all.Items) != 2500 || all.Metadata.Continue != "" {
		t.Errorf("no limit: %d items, continue %q; want 2,500 and none", len(all.Items), all.Metadata.Continue)
	}
	// A page that ends exactly at the last item has no continue.
	if p := h.devicePage(t, "limit=2500"); len(p.Items) != 2500 || p.Metadata.Continue != "" {
		t.Errorf("limit=2500 of 2,500: %d items, continue %q", len(p.Items), p.Metadata.Continue)
	}
}

func TestListPagesChangeBetweenPages(t *testing.T) {
	h := newTestHub(t, Options{})
	storeDevices(t, h.Store, 0, 2500, nil)
	first := h.devicePage(t, "limit=1000").Metadata.ResourceVersion
	names, _, revs := h.listAllPages(t, "limit=1000", func(page int) {
		if page != 1 {
			return
		}
		// dev-00500 (already listed) goes, dev-02000 (not yet) goes, and
		// dev-01500 is changed: the devices that stay are listed once.
		for _, n := range []string{"dev-00500", "dev-02000"} {
			if _, err := h.Store.Delete(t.Context(), schema.KindDevice, n, "", false); err != nil {
				t.Fatal(err)
			}
		}
		if resp := h.admin(t, http.MethodPost, "/v1/apply", deviceYAML("dev-01500", "site", "b")); resp.Code != http.StatusOK {
			t.Fatalf("apply: %d %s", resp.Code, resp.Body)
		}
	})
	seen := map[string]int{}
	for _, n := range names {
		seen[n]++
	}
	for i := range 2500 {
		n := fmt.Sprintf("dev-%05d", i)
		switch {
		case n == "dev-02000" && seen[n] != 0:
			t.Errorf("%s, deleted before its page, is listed", n)
		case n != "dev-00500" && n != "dev-02000" && seen[n] != 1:
			t.Errorf("%s is listed %d times, want once", n, seen[n])
		}
	}
	if revs[0] != first || revs[len(revs)-1] != first {
		t.Errorf("resourceVersions %v: want the first page's, %s, on every page", revs, first)
	}
	// A watch from the listing's revision replays what changed meanwhile.
	ws := h.watch(t, "/v1/devices?watch=true&resourceVersion="+first)
	if ev, ok := ws.next(t, false); !ok || ev.Type != schema.WatchDeleted {
		t.Errorf("first event after the listing's revision: %+v, want the DELETED of dev-00500", ev)
	}
}

func TestListPagesWithSelector(t *testing.T) {
	h := newTestHub(t, Options{})
	storeDevices(t, h.Store, 0, 300, map[string]string{"site": "a"})
	storeDevices(t, h.Store, 300, 300, map[string]string{"site": "b"})
	names, pages, _ := h.listAllPages(t, "limit=100&labelSelector=site%3Db", nil)
	if len(names) != 300 || pages != 3 || names[0] != "dev-00300" || names[299] != "dev-00599" {
		t.Errorf("site=b by 100: %d items in %d pages (%v … %v), want 300 in 3 from dev-00300", len(names), pages, names[:1], names[len(names)-1:])
	}
	p := h.devicePage(t, "limit=100&labelSelector=site%3Db")
	resp := h.admin(t, http.MethodGet, "/v1/devices?limit=100&labelSelector=site%3Da&continue="+url.QueryEscape(p.Metadata.Continue), "")
	if resp.Code != http.StatusBadRequest || !strings.Contains(string(resp.Body), "continue") {
		t.Errorf("a token used with another labelSelector: %d %s, want 400 naming continue", resp.Code, resp.Body)
	}
	resp = h.admin(t, http.MethodGet, "/v1/deployments?limit=100&continue="+url.QueryEscape(p.Metadata.Continue), "")
	if resp.Code != http.StatusBadRequest || !strings.Contains(string(resp.Body), "continue") {
		t.Errorf("a devices token used on deployments: %d %s, want 400 naming continue", resp.Code, resp.Body)
	}
}

func TestListPagesBadInput(t *testing.T) {
	h := newTestHub(t, Options{})
	storeDevices(t, h.Store, 0, 20, nil)
	good := h.devicePage(t, "limit=5").Metadata.Continue
	body, mac, _ := strings.Cut(good, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	forged := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "dev-00004", "dev-00010", 1))) + "." + mac
	for _, tc := range []struct{ query, param string }{
		{"limit=-1", "limit"},
		{"limit=abc", "limit"},
		{"limit=1.5", "limit"},
		{"limit=5&continue=garbage", "continue"},
		{"limit=5&continue=%21%21.%21%21", "continue"},
		{"limit=5&continue=" + url.QueryEscape(forged), "continue"},
		{"limit=5&continue=" + url.QueryEscape(body+"."), "continue"},
		{"limit=5&continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"k":"Device","a":"x","r":1}`)) + ".AAAA", "continue"},
	} {
		resp := h.admin(t, http.MethodGet, "/v1/devices?"+tc.query, "")
		if resp.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.query, resp.Code, resp.Body)
			continue
		}
		if st := resp.status(t); !strings.Contains(st.Message, tc.param) {
			t.Errorf("%s: message %q does not name %s", tc.query, st.Message, tc.param)
		}
	}
	// Nothing was harmed: the good token still continues.
	if p := h.devicePage(t, "limit=5&continue="+url.QueryEscape(good)); len(p.Items) != 5 || p.Items[0].Metadata.Name != "dev-00005" {
		t.Errorf("the good token after bad ones: %d items from %v", len(p.Items), p.Items)
	}
}

func TestListPagesExpiredRevision(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), WatchRing: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := newTestHubOn(t, st, Options{})
	storeDevices(t, st, 0, 20, nil)
	cont := h.devicePage(t, "limit=5").Metadata.Continue
	for i := range 8 { // more commits than the ring holds
		storeDevices(t, st, 100+i, 1, nil)
	}
	resp := h.admin(t, http.MethodGet, "/v1/devices?limit=5&continue="+url.QueryEscape(cont), "")
	if resp.Code != http.StatusGone {
		t.Fatalf("continue after the ring moved past the listing: %d %s, want 410 Gone", resp.Code, resp.Body)
	}
	if msg := resp.status(t).Message; !strings.Contains(msg, "revision") || !strings.Contains(msg, "list again") {
		t.Errorf("410 message %q: want the revision and to list again", msg)
	}
}

// BenchmarkListDevices10kPaged lists the 10,000 devices of
// BenchmarkListDevices10k in pages of 500 (as fleet get does by default),
// following continue, and reports the time of the whole listing.
func BenchmarkListDevices10kPaged(b *testing.B) {
	h := newTestHub(b, Options{})
	seedDevices(b, h, 10000)
	for b.Loop() {
		cont, n := "", 0
		for {
			q := "/v1/devices?limit=500"
			if cont != "" {
				q += "&continue=" + url.QueryEscape(cont)
			}
			resp := h.do(b, http.MethodGet, q, h.Admin, nil)
			var p devicePage
			if err := json.Unmarshal(resp.Body, &p); err != nil || resp.Code != http.StatusOK {
				b.Fatalf("page: %d %v", resp.Code, err)
			}
			n += len(p.Items)
			if cont = p.Metadata.Continue; cont == "" {
				break
			}
		}
		if n != 10000 {
			b.Fatalf("listed %d devices, want 10,000", n)
		}
	}
}
