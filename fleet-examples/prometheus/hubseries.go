package prometheus

import (
	"fmt"
	"slices"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/schema"
)

// HubSeriesNames returns the metric names hub/metrics' registry exports
// for a hub with a device, a Staged deployment and TLS (so that every
// per-object family has a series), sorted. Families whose series appear
// only once something happened (a request to a device, an ignored
// payload) are listed too when their labels are set up front; the
// end-to-end test checks the same names against a real hub's /metrics.
func HubSeriesNames() ([]string, error) {
	now := time.Now()
	temp := 50.0
	m := metrics.New(metrics.Gauges{
		Presences: func() []fleetmodel.DevicePresence {
			return []fleetmodel.DevicePresence{{Name: "pi-1", Online: true, LastSeen: now}}
		},
		Deployments: func() []fleetmodel.NamedDeploymentStatus {
			return []fleetmodel.NamedDeploymentStatus{{Name: "web", Status: schema.DeploymentStatus{
				Rollout: &schema.RolloutStatus{Phase: schema.RolloutProgressing, Step: 1, Steps: 2}}}}
		},
		Certificates: func() []metrics.CertificateExpiry {
			return []metrics.CertificateExpiry{{Certificate: metrics.CertServer, NotAfter: now.Add(time.Hour)}}
		},
		TopReports: func() []*schema.TopReport {
			return []*schema.TopReport{{Device: "pi-1", Node: schema.NodeMetrics{
				MemoryTotalBytes: 1 << 30, MemoryAvailableBytes: 1 << 29, StateDisk: &schema.DiskMetrics{FreeBytes: 1 << 30}, TemperatureCelsius: &temp},
				Containers: []schema.ContainerMetrics{{Pod: "web", Container: "main", MemoryWorkingSetBytes: 1 << 20}}}}
		},
	})
	m.ObserveRequest("GET /v1/devices", 200, time.Millisecond)
	m.ReconcileDuration.Observe(0.001)
	mfs, err := m.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather the hub's metrics: %w", err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	slices.Sort(names)
	return names, nil
}
