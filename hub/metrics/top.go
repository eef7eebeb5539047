package metrics

import (
	"github.com/fleetmq/fleet/schema"
	"github.com/prometheus/client_golang/prometheus"
)

// topCollector exports the last TopReport of every device at scrape
// time: no per-device series is registered, so a deleted device's series
// vanish with its report.
type topCollector struct {
	reports func() []*schema.TopReport

	load1, memAvail, memTotal, diskFree, temp, throttled *prometheus.Desc
	cpu, workingSet, memLimit                            *prometheus.Desc
}

func newTopCollector(reports func() []*schema.TopReport) *topCollector {
	dev := []string{"device"}
	ctr := []string{"device", "pod", "container"}
	return &topCollector{
		reports:   reports,
		load1:     prometheus.NewDesc("fleet_device_load1", "The device's 1-minute load average, as last reported.", dev, nil),
		memAvail:  prometheus.NewDesc("fleet_device_memory_available_bytes", "The device's available memory, as last reported.", dev, nil),
		memTotal:  prometheus.NewDesc("fleet_device_memory_total_bytes", "The device's total memory, as last reported.", dev, nil),
		diskFree:  prometheus.NewDesc("fleet_device_disk_free_bytes", "Free bytes of the device's state and image file systems, as last reported.", []string{"device", "disk"}, nil),
		temp:      prometheus.NewDesc("fleet_device_temperature_celsius", "The device's SoC temperature, as last reported.", dev, nil),
		throttled: prometheus.NewDesc("fleet_device_throttled", "1 if the device reported a throttling flag that holds now (a Raspberry Pi's *-now flags).", dev, nil),
		cpu:       prometheus.NewDesc("fleet_container_cpu_usage_seconds_total", "CPU time a container used since it started, as last reported.", ctr, nil),
		workingSet: prometheus.NewDesc("fleet_container_memory_working_set_bytes",
			"A container's memory working set, as last reported.", ctr, nil),
		memLimit: prometheus.NewDesc("fleet_container_memory_limit_bytes", "A container's memory limit (0: none), as last reported.", ctr, nil),
	}
}

func (c *topCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.load1, c.memAvail, c.memTotal, c.diskFree, c.temp, c.throttled, c.cpu, c.workingSet, c.memLimit} {
		ch <- d
	}
}

func (c *topCollector) Collect(ch chan<- prometheus.Metric) {
	if c.reports == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range c.reports() {
		if r == nil || r.Device == "" {
			continue
		}
		n := r.Node
		gauge(c.load1, n.Load1, r.Device)
		if n.MemoryTotalBytes > 0 {
			gauge(c.memTotal, float64(n.MemoryTotalBytes), r.Device)
			gauge(c.memAvail, float64(n.MemoryAvailableBytes), r.Device)
		}
		if n.StateDisk != nil {
			gauge(c.diskFree, float64(n.StateDisk.FreeBytes), r.Device, "state")
		}
		if n.ImageDisk != nil {
			gauge(c.diskFree, float64(n.ImageDisk.FreeBytes), r.Device, "image")
		}
		if n.TemperatureCelsius != nil {
			gauge(c.temp, *n.TemperatureCelsius, r.Device)
		}
		if n.Throttled != "" || len(n.ThrottledFlags) > 0 {
			gauge(c.throttled, b2f(throttledNow(n.ThrottledFlags)), r.Device)
		}
		seen := map[[2]string]bool{}
		for _, ctr := range r.Containers {
			k := [2]string{ctr.Pod, ctr.Container}
			if ctr.Pod == "" || ctr.Container == "" || seen[k] {
				continue // a duplicate would fail the whole scrape
			}
			seen[k] = true
			ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, float64(ctr.CPUUsageNanos)/1e9, r.Device, ctr.Pod, ctr.Container)
			gauge(c.workingSet, float64(ctr.MemoryWorkingSetBytes), r.Device, ctr.Pod, ctr.Container)
			gauge(c.memLimit, float64(ctr.MemoryLimitBytes), r.Device, ctr.Pod, ctr.Container)
		}
	}
}

// throttledNow reports whether any flag holds now ("…-now").
func throttledNow(flags []string) bool {
	for _, f := range flags {
		if len(f) > 4 && f[len(f)-4:] == "-now" {
			return true
		}
	}
	return false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
