package store

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// BenchmarkApplyDeployment applies a changed deployment per iteration: one
// committed, fsynced transaction each. It reports the median and the 99th
// percentile latency.
func BenchmarkApplyDeployment(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		d := newDeployment("web", "nginx:1."+strconv.Itoa(i))
		i++
		start := time.Now()
		if _, _, err := s.Apply(ctx, d, false); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

// BenchmarkApplyUnchanged applies the stored deployment again: a read, no
// write.
func BenchmarkApplyUnchanged(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	if _, _, err := s.Apply(ctx, newDeployment("web", "nginx:1"), false); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, action, err := s.Apply(ctx, newDeployment("web", "nginx:1"), false); err != nil || action != "unchanged" {
			b.Fatal(action, err)
		}
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkListDevices10kDecoded is a typed List of 10,000 devices (what
// a controller does on every full reconcile).
func BenchmarkListDevices10kDecoded(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	for i := 0; i < 10000; i += 500 {
		objs := make([]schema.Object, 0, 500)
		for j := i; j < i+500; j++ {
			objs = append(objs, newDevice("device-"+strconv.Itoa(j), map[string]string{"site": "s" + strconv.Itoa(j%10)}))
		}
		if _, err := s.ApplyAll(ctx, objs, false); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		devs, _, err := s.ListDevices(ctx, nil)
		if err != nil || len(devs) != 10000 {
			b.Fatal(len(devs), err)
		}
	}
}
