package storetest

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// BenchmarkApply measures one Apply that changes a Deployment (one
// committed write: fsynced by Badger, committed to a quorum by etcd) and
// reports its p50 and p99 latency.
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 2000x ./hub/store/storetest/
func BenchmarkApply(b *testing.B) {
	b.Run("badger", func(b *testing.B) {
		s, err := store.Open(store.Options{Dir: filepath.Join(b.TempDir(), "store"), GCInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchApply(b, s)
	})
	b.Run("etcd-3-members", func(b *testing.B) {
		c := etcdtest.Start(b, etcdtest.Options{})
		s, err := store.Open(store.Options{Dir: filepath.Join(b.TempDir(), "store"), GCInterval: -1,
			Etcd: &store.EtcdOptions{Endpoints: c.Endpoints()}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchApply(b, s)
	})
}

func benchApply(b *testing.B, s *store.Store) {
	ctx := b.Context()
	// A fleet-sized store under the write: 200 devices, 20 deployments.
	for i := range 200 {
		if _, err := s.Create(ctx, Device(fmt.Sprintf("d%03d", i)), false); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := s.Create(ctx, Deployment(fmt.Sprintf("w%02d", i), "nginx:0"), false); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, _, err := s.Apply(ctx, Deployment(fmt.Sprintf("w%02d", i%20), fmt.Sprintf("nginx:%d", i+1)), false); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
