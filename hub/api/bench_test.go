package api

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// BenchmarkListDevices10k lists 10,000 devices through the HTTP API (real
// TCP, JSON encoding, Badger read) and reports the median latency.
func BenchmarkListDevices10k(b *testing.B) {
	h := newTestHub(b, Options{})
	const n = 10000
	seedDevices(b, h, n)

	get := func() []byte {
		req, err := http.NewRequestWithContext(b.Context(), "GET", h.URL+"/v1/devices", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.Admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("list: %d %v", resp.StatusCode, err)
		}
		return body
	}
	var list schema.DeviceList
	body := get()
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != n {
		b.Fatalf("list: %v, %d items", err, len(list.Items))
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		get()
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(len(body)), "bytes")
}

// BenchmarkListDevices10kSelector is the same list with a labelSelector
// that keeps a tenth of the devices.
func BenchmarkListDevices10kSelector(b *testing.B) {
	h := newTestHub(b, Options{})
	seedDevices(b, h, 10000)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		r := h.do(b, "GET", "/v1/devices?labelSelector=site%3Dsite-3", h.Admin, nil)
		if r.Code != http.StatusOK {
			b.Fatal(r.Code)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// seedDevices stores n devices with a site label (ten sites) and an arch.
func seedDevices(b *testing.B, h *testHub, n int) {
	const batch = 500
	for i := 0; i < n; i += batch {
		objs := make([]schema.Object, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			objs = append(objs, &schema.Device{Metadata: schema.ObjectMeta{
				Name:   "device-" + strconv.Itoa(j),
				Labels: map[string]string{"site": "site-" + strconv.Itoa(j%10), "fleet/arch": "arm64"},
			}})
		}
		if _, err := h.Store.ApplyAll(b.Context(), objs, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPApplyDeployment is POST /v1/apply of one changed deployment
// (decode, validate, fsynced commit, response) over real TCP.
func BenchmarkHTTPApplyDeployment(b *testing.B) {
	h := newTestHub(b, Options{})
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		body := []byte(deploymentYAML("web", "nginx:1."+strconv.Itoa(i)))
		i++
		start := time.Now()
		r := h.do(b, "POST", "/v1/apply", h.Admin, body)
		if r.Code != http.StatusOK {
			b.Fatalf("%d %s", r.Code, r.Body)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
