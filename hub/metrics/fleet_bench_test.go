package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// BenchmarkScrape10kDevices: one /metrics scrape of a hub with 10,000
// devices (all online) and 100 Staged deployments, with the per-object
// series of fleet.go ("per-object") and without them ("counts-only").
func BenchmarkScrape10kDevices(b *testing.B) {
	model := fleetmodel.New(fleetmodel.Options{StaleAfter: -1})
	w := model.Writer()
	for i := range 10_000 {
		name := fmt.Sprintf("dev-%05d", i)
		w.PutDevice(name, fleetmodel.Device{UID: "u" + name})
		model.UpdateReport(name, "u"+name, func(r *fleetmodel.Report, _ bool) bool {
			r.Online, r.LastSeen = true, time.Now()
			return true
		})
	}
	for i := range 100 {
		w.SetDeploymentStatus(fmt.Sprintf("app-%03d", i), schema.DeploymentStatus{Targeted: 100, Updated: 100, Ready: 100,
			Rollout: &schema.RolloutStatus{Phase: schema.RolloutComplete, Step: 2, Steps: 2}})
	}
	counts := Gauges{
		Devices: func() float64 { return float64(model.DeviceCount()) },
		Online:  func() float64 { return float64(model.OnlineCount()) },
	}
	perObject := counts
	perObject.Presences, perObject.Deployments = model.DevicePresences, model.DeploymentStatuses
	for _, c := range []struct {
		name string
		g    Gauges
	}{{"counts-only", counts}, {"per-object", perObject}} {
		b.Run(c.name, func(b *testing.B) {
			h := New(c.g).Handler()
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
