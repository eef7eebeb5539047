package backup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// fillStore writes a fleet of devices devices and deps deployments into a
// real store, with a desired state and a status per device of about the
// size the controller and the ingest write.
func fillStore(b *testing.B, st *store.Store, devices, deps int) {
	b.Helper()
	ctx := b.Context()
	var objs []schema.Object
	flush := func() {
		if _, err := st.ApplyAll(ctx, objs, false); err != nil {
			b.Fatal(err)
		}
		objs = objs[:0]
	}
	for i := range deps {
		objs = append(objs, &schema.Deployment{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
			Metadata: schema.ObjectMeta{Name: fmt.Sprintf("app-%04d", i)},
			Spec: schema.DeploymentSpec{
				Selector: schema.LabelSelector{MatchLabels: map[string]string{"site": fmt.Sprintf("s%03d", i%100)}},
				Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{{
					Name: "app", Image: fmt.Sprintf("registry.example.com/app-%04d:1.2.3", i),
					Env: []schema.EnvVar{{Name: "MODE", Value: "production"}, {Name: "SITE", Value: fmt.Sprint(i % 100)}},
				}}}},
			},
		})
		if len(objs) == 100 {
			flush()
		}
	}
	flush()
	for i := range devices {
		objs = append(objs, &schema.Device{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
			Metadata: schema.ObjectMeta{Name: fmt.Sprintf("dev-%05d", i), Labels: map[string]string{"site": fmt.Sprintf("s%03d", i%100), "fleet/arch": "arm64"}},
		})
		if len(objs) == 200 {
			flush()
		}
	}
	flush()
	pods := make([]schema.Pod, 10)
	for i := range pods {
		pods[i] = schema.Pod{Name: fmt.Sprintf("app-%04d", i), Hash: "0123456789abcdef", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "app", Image: "registry.example.com/app:1.2.3"}}}}
	}
	for start := 0; start < devices; start += 500 {
		_, err := st.Write(ctx, func(t *store.Txn) error {
			for i := start; i < min(start+500, devices); i++ {
				name := fmt.Sprintf("dev-%05d", i)
				ds, _ := json.Marshal(schema.DesiredState{Device: name, Generation: 7, Store: st.ID(), Pods: pods})
				stat, _ := json.Marshal(schema.DeviceStatus{Device: name, ObservedGeneration: 7, Time: time.Now(), Agent: schema.AgentInfo{Version: "v1.0.0", OS: "linux", Arch: "arm64"}})
				if err := t.Set(store.DesiredKey(name), ds); err != nil {
					return err
				}
				if err := t.Set("v1/status/"+name, stat); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBackup10kDevices measures a backup (age's real scrypt
// passphrase) and a restore of a store of 10,000 devices (each with a
// desired state of 10 pods and a status) and 1,000 deployments, and the
// apply latency (one deployment per apply, fsynced) before and while the
// backup runs. Run with -bench Backup10k -benchtime 1x.
func BenchmarkBackup10kDevices(b *testing.B) {
	dir := b.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store"), GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	fillStore(b, st, 10000, 1000)
	key := Key{Passphrase: "a benchmark passphrase of some length"}
	for b.Loop() {
		applies := func(stop <-chan struct{}) []time.Duration {
			var lat []time.Duration
			for i := 0; ; i++ {
				select {
				case <-stop:
					return lat
				default:
				}
				d := &schema.Deployment{
					TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
					Metadata: schema.ObjectMeta{Name: "load"},
					Spec: schema.DeploymentSpec{Selector: schema.LabelSelector{MatchLabels: map[string]string{"x": "y"}},
						Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{{Name: "a", Image: fmt.Sprintf("img:%d", i)}}}}},
				}
				start := time.Now()
				if _, _, err := st.Apply(b.Context(), d, false); err != nil {
					b.Error(err)
					return lat
				}
				lat = append(lat, time.Since(start))
				time.Sleep(50 * time.Millisecond) // 20 applies a second, the e2e's load
			}
		}
		run := func(d func()) []time.Duration {
			stop := make(chan struct{})
			var lat []time.Duration
			var wg sync.WaitGroup
			wg.Go(func() { lat = applies(stop) })
			d()
			close(stop)
			wg.Wait()
			return lat
		}
		base := run(func() { time.Sleep(3 * time.Second) })
		var buf bytes.Buffer
		var took time.Duration
		var m Manifest
		during := run(func() {
			start := time.Now()
			if m, err = Write(b.Context(), &buf, Source{Store: st, DataDir: dir}, key); err != nil {
				b.Fatal(err)
			}
			took = time.Since(start)
		})
		dst := filepath.Join(b.TempDir(), "restored")
		start := time.Now()
		if _, err := Restore(b.Context(), bytes.NewReader(buf.Bytes()), key, RestoreOptions{DataDir: dst}); err != nil {
			b.Fatal(err)
		}
		restoreTook := time.Since(start)
		var snap int64
		for _, p := range m.Parts {
			if p.Name == partStore {
				snap = p.Size
			}
		}
		b.ReportMetric(took.Seconds(), "backup-s")
		b.ReportMetric(float64(buf.Len())/(1<<20), "backup-MiB")
		b.ReportMetric(restoreTook.Seconds(), "restore-s")
		b.ReportMetric(float64(p99(base).Microseconds())/1000, "apply-p99-ms-idle")
		b.ReportMetric(float64(p99(during).Microseconds())/1000, "apply-p99-ms-during-backup")
		b.Logf("objects %v, keys %d, store snapshot %d bytes, file %d bytes; backup %v, restore %v; applies %d idle p99 %v, %d during p99 %v",
			m.Objects, m.Keys, snap, buf.Len(), took, restoreTook, len(base), p99(base), len(during), p99(during))
		_ = os.RemoveAll(dst)
	}
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}
