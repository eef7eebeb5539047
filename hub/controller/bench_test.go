package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// BenchmarkPass10k is one controller pass over 10,000 devices and 11
// deployments in which nothing changed: the floor of what every pass
// costs at the scale target. The first, full pass is logged.
//
//	go test -run XXX -bench Pass10k -benchtime 20x ./hub/controller/
func BenchmarkPass10k(b *testing.B) {
	st := openStoreB(b)
	const devices, deployments = 10000, 10
	for start := 0; start < devices; start += 1000 {
		objs := make([]schema.Object, 0, 1000)
		for i := start; i < start+1000; i++ {
			objs = append(objs, dev(fmt.Sprintf("d%05d", i), "site", fmt.Sprintf("s%d", i%deployments), "fleet", "big"))
		}
		if _, err := st.ApplyAll(b.Context(), objs, false); err != nil {
			b.Fatal(err)
		}
	}
	objs := []schema.Object{}
	for i := range deployments {
		objs = append(objs, depl(fmt.Sprintf("app%d", i), fmt.Sprintf("app:%d", i), "site", fmt.Sprintf("s%d", i)))
	}
	objs = append(objs, depl("agent", "agent:1", "fleet", "big"))
	if _, err := st.ApplyAll(b.Context(), objs, false); err != nil {
		b.Fatal(err)
	}
	status := &fakeStatus{st: map[string]*schema.DeviceStatus{}}
	c, err := New(Options{Store: st, Conn: newRecorder(), Status: status})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Load(b.Context()); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	c.pass(b.Context())
	b.Logf("first pass (10,000 desired states computed, stored and published): %v", time.Since(start))
	for name, ds := range c.model.DesiredStates() {
		status.st[name] = &schema.DeviceStatus{Device: name, ObservedGeneration: ds.Generation, Store: ds.Store, Pods: func() []schema.PodStatus {
			var out []schema.PodStatus
			for _, p := range ds.Pods {
				out = append(out, schema.PodStatus{Name: p.Name, Hash: p.Hash, Phase: schema.PhaseRunning, Ready: true})
			}
			return out
		}()}
	}
	b.ResetTimer()
	for range b.N {
		c.pass(b.Context())
	}
	b.StopTimer()
	d, conv := 0, 0
	for name, ds := range c.model.DesiredStates() {
		d++
		if fleetmodel.Converged(ds, status.st[name]) {
			conv++
		}
	}
	if d != devices || conv != devices {
		b.Errorf("counts: %d devices, %d converged", d, conv)
	}
}
