package metrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// series returns the registry's series whose names start with prefix, as
// `name{k="v",…} value` lines, sorted.
func series(t *testing.T, m *Metrics, prefix string) []string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := mt.GetGauge().GetValue()
			if mt.Counter != nil {
				v = mt.GetCounter().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	slices.Sort(out)
	return out
}

func TestTopCollector(t *testing.T) {
	temp := 48.0
	reports := []*schema.TopReport{
		{Device: "pi-1", Node: schema.NodeMetrics{
			Load1: 0.5, MemoryTotalBytes: 1000, MemoryAvailableBytes: 400, TemperatureCelsius: &temp,
			ImageDisk: &schema.DiskMetrics{FreeBytes: 7}, Throttled: "0x20000", ThrottledFlags: []string{"throttled-occurred"},
		}, Containers: []schema.ContainerMetrics{
			{Pod: "web", Container: "app", CPUUsageNanos: 1_500_000_000, MemoryWorkingSetBytes: 10, MemoryLimitBytes: 64},
			{Pod: "web", Container: "app", CPUUsageNanos: 9}, // a duplicate must not fail the scrape
		}},
		{Device: "pi-2", Node: schema.NodeMetrics{ThrottledFlags: []string{"under-voltage-now"}}}, // figures it could not read are left out
	}
	m := New(Gauges{TopReports: func() []*schema.TopReport { return reports }})
	want := []string{
		`fleet_container_cpu_usage_seconds_total{container="app",device="pi-1",pod="web"} 1.5`,
		`fleet_container_memory_limit_bytes{container="app",device="pi-1",pod="web"} 64`,
		`fleet_container_memory_working_set_bytes{container="app",device="pi-1",pod="web"} 10`,
		`fleet_device_disk_free_bytes{device="pi-1",disk="image"} 7`,
		`fleet_device_load1{device="pi-1"} 0.5`,
		`fleet_device_load1{device="pi-2"} 0`,
		`fleet_device_memory_available_bytes{device="pi-1"} 400`,
		`fleet_device_memory_total_bytes{device="pi-1"} 1000`,
		`fleet_device_temperature_celsius{device="pi-1"} 48`,
		`fleet_device_throttled{device="pi-1"} 0`,
		`fleet_device_throttled{device="pi-2"} 1`,
	}
	var got []string
	for _, p := range []string{"fleet_container_", "fleet_device_"} {
		got = append(got, series(t, m, p)...)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	reports = nil // deleted devices vanish
	if got := series(t, m, "fleet_device_"); len(got) != 0 {
		t.Errorf("after the reports went: %v", got)
	}
}
