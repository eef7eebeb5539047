package controller

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestIncrementalPassMatchesFullPass drives a controller pass by pass
// through random device, deployment and report changes. Every pass must
// be an incremental one (placeIncrementally deciding, not declining), and
// after it, recomputing everything from scratch (placeAll) must agree with
// it: the same pods on every device (a full pass would change nothing)
// and the same deployment statuses.
func TestIncrementalPassMatchesFullPass(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { incrementalVsFull(t, seed) })
	}
}

func incrementalVsFull(t *testing.T, seed uint64) {
	ctx := t.Context()
	st := openStore(t, t.TempDir())
	status := &fakeStatus{st: map[string]*schema.DeviceStatus{}}
	pub := newRecorder()
	c, err := New(Options{Store: st, Conn: pub, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	events, err := st.Watch(ctx, "", c.listRev)
	if err != nil {
		t.Fatal(err)
	}
	c.pass(ctx)

	rng := rand.New(rand.NewPCG(seed, 42))
	// Device keys for the reports (the last: none reported).
	keys := []string{newDeviceKey(t).public, newDeviceKey(t).public, ""}
	sites := []string{"north", "south", "east"}
	devName := func() string { return fmt.Sprintf("d%02d", rng.IntN(24)) }
	depName := func() string { return fmt.Sprintf("app%d", rng.IntN(5)) }
	// await applies the store's events to the controller, as Run does,
	// up to the one for this object.
	await := func(kind, name string) {
		t.Helper()
		for {
			select {
			case ev := <-events:
				c.apply(ev)
				if ev.Kind == kind && ev.Name == name {
					return
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no store event for %s %s", kind, name)
			}
		}
	}
	write := func(o schema.Object) {
		t.Helper()
		res, err := st.ApplyAll(ctx, []schema.Object{o}, false)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Action != schema.ActionUnchanged {
			await(o.GetTypeMeta().Kind, o.GetMetadata().Name)
		}
	}
	del := func(kind, name string) {
		t.Helper()
		if _, err := st.Delete(ctx, kind, name, "", false); err != nil {
			if _, gerr := st.Get(ctx, kind, name); gerr == nil {
				t.Fatalf("delete %s %s: %v", kind, name, err)
			}
			return // already gone
		}
		await(kind, name)
	}
	report := func(name string, ready bool) {
		ds := c.model.Desired(name)
		if ds == nil {
			return
		}
		s := &schema.DeviceStatus{Device: name, ObservedGeneration: ds.Generation, Store: ds.Store, PublicKey: keys[rng.IntN(len(keys))]}
		for _, p := range ds.Pods {
			s.Pods = append(s.Pods, schema.PodStatus{Name: p.Name, Hash: p.Hash, Phase: schema.PhaseRunning, Ready: ready})
		}
		status.set(name, s)
		c.DeviceStatusChanged(name)
	}

	for step := range 400 {
		var what string
		switch op := rng.IntN(12); {
		case op >= 10:
			// ConfigMaps and Secrets the deployments may use.
			name := fmt.Sprintf("cfg%d", rng.IntN(3))
			switch rng.IntN(4) {
			case 0:
				what = "configmap " + name
				write(configMap(name, map[string]string{"k": fmt.Sprint(rng.IntN(3))}))
			case 1:
				what = "secret " + name
				write(secret(name, map[string]string{"token": fmt.Sprint(rng.IntN(3))}))
			case 2:
				what = "delete configmap " + name
				del(schema.KindConfigMap, name)
			default:
				what = "delete secret " + name
				del(schema.KindSecret, name)
			}
		case op < 3:
			name := devName()
			what = "device " + name
			labels := []string{"site", sites[rng.IntN(len(sites))]}
			if rng.IntN(3) > 0 { // some devices have no tier
				labels = append(labels, "tier", fmt.Sprint(rng.IntN(2)))
			}
			write(dev(name, labels...))
		case op < 4:
			name := devName()
			what = "delete device " + name
			del(schema.KindDevice, name)
		case op < 6:
			name := depName()
			what = "deployment " + name
			var d *schema.Deployment
			site := func() string { return sites[rng.IntN(len(sites))] }
			img := fmt.Sprintf("img:%d", rng.IntN(3))
			switch rng.IntN(8) {
			case 0:
				d = depl(name, img)
			case 1:
				d = depl(name, img, "site", site())
			case 2:
				d = depl(name, img, "tier", fmt.Sprint(rng.IntN(2)))
			case 3:
				d = depl(name, img, "site", site(), "tier", fmt.Sprint(rng.IntN(2)))
			// matchExpressions, alone (placement finds every device
			// without the label index) and with the pairs the index uses.
			case 4:
				d = depl(name, img)
				d.Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{
					{Key: "site", Operator: schema.LabelSelectorOpIn, Values: []string{site(), site()}}}
			case 5:
				d = depl(name, img, "tier", fmt.Sprint(rng.IntN(2)))
				d.Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{
					{Key: "site", Operator: schema.LabelSelectorOpNotIn, Values: []string{site()}}}
			case 6:
				d = depl(name, img, "site", site())
				d.Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{
					{Key: "tier", Operator: schema.LabelSelectorOpDoesNotExist}}
			default:
				d = depl(name, img)
				d.Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{
					{Key: "tier", Operator: schema.LabelSelectorOpExists},
					{Key: "site", Operator: schema.LabelSelectorOpNotIn, Values: []string{site()}}}
			}
			if rng.IntN(2) == 0 {
				d.Spec.Strategy = schema.Strategy{Type: schema.StrategyRollingUpdate,
					RollingUpdate: &schema.RollingUpdate{MaxUnavailable: fmt.Sprint(1 + rng.IntN(2))}}
			}
			// References to ConfigMaps and Secrets, some missing.
			c := &d.Spec.Template.Spec.Containers[0]
			if rng.IntN(2) == 0 {
				c.EnvFrom = []schema.EnvFromSource{{ConfigMapRef: &schema.ObjectRef{Name: fmt.Sprintf("cfg%d", rng.IntN(4))}}}
			}
			if rng.IntN(2) == 0 {
				c.Env = []schema.EnvVar{{Name: "T", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: fmt.Sprintf("cfg%d", rng.IntN(4)), Key: "token"}}}}
			}
			// Host ports, which two deployments on one device may both
			// claim (a PortConflict condition).
			if rng.IntN(3) == 0 {
				c.Ports = []schema.ContainerPort{{ContainerPort: int32(8080 + rng.IntN(2))}}
			}
			// Paused deployments, and restarts (a template annotation).
			d.Spec.Paused = rng.IntN(4) == 0
			if rng.IntN(4) == 0 {
				d.Spec.Template.Metadata = &schema.TemplateMeta{Annotations: map[string]string{
					schema.AnnotationRestartedAt: fmt.Sprintf("2025-01-01T00:00:0%dZ", rng.IntN(2))}}
			}
			write(d)
		case op < 7:
			name := depName()
			what = "delete deployment " + name
			del(schema.KindDeployment, name)
		default:
			n := 1 + rng.IntN(6)
			what = fmt.Sprintf("%d reports", n)
			for range n {
				report(devName(), rng.IntN(4) != 0)
			}
		}
		if c.changes.full {
			t.Fatalf("step %d (%s): the next pass would be a full one", step, what)
		}
		full := c.fullPasses.Load()
		c.pass(ctx)
		if c.fullPasses.Load() != full {
			t.Fatalf("step %d (%s): ran a full pass", step, what)
		}
		checkFixpoint(t, c, fmt.Sprintf("step %d (%s)", step, what))
		checkFreshController(t, c, st, status, pub, fmt.Sprintf("step %d (%s)", step, what))
	}
	if len(pub.retained) == 0 {
		t.Fatal("nothing published")
	}
}

// checkFixpoint fails unless a full recomputation agrees with the
// controller's desired states and deployment statuses.
func checkFixpoint(t *testing.T, c *Controller, when string) {
	t.Helper()
	views := c.fleet.views()
	deps := c.fleet.deploymentsSorted()
	want := DesiredPods(views, deps)
	for _, v := range views {
		got := c.model.Desired(v.Name)
		if got == nil {
			t.Fatalf("%s: device %s has no desired state", when, v.Name)
		}
		if !SamePods(got.Pods, want[v.Name]) {
			for i := range deps {
				d := &deps[i]
				t.Logf("dep %s strategy %+v hash %s sel %v", d.Metadata.Name, d.Spec.Strategy, schema.PodSpecHash(d.Spec.Template.Spec)[:6], d.Spec.Selector)
			}
			for _, v := range views {
				st := ""
				if v.Status != nil {
					for _, p := range v.Status.Pods {
						st += fmt.Sprintf("%s@%s/%v ", p.Name, p.Hash[:6], p.Ready)
					}
				}
				t.Logf("%s labels %v pods %s status %s", v.Name, v.Labels, podList(v.Prev.Pods), st)
			}
			t.Fatalf("%s: device %s has pods %s, a full pass gives %s", when, v.Name, podList(got.Pods), podList(want[v.Name]))
		}
	}
	for name := range c.model.DesiredStates() {
		if _, ok := c.model.Device(name); !ok {
			t.Fatalf("%s: deleted device %s still has a desired state", when, name)
		}
	}
	checkConfigFixpoint(t, c, when)
	for i := range deps {
		d := &deps[i]
		got, ok := c.model.Model().DeploymentStatus(d.Metadata.Name)
		// Port conflicts are not AggregateDeployment's: checkFreshController
		// checks them.
		got.Conditions = slices.DeleteFunc(slices.Clone(got.Conditions), func(cd schema.DeploymentCondition) bool { return cd.Type == ConditionPortConflict })
		if len(got.Conditions) == 0 {
			got.Conditions = nil
		}
		if w := AggregateDeployment(d, views); !ok || !reflect.DeepEqual(got, w) {
			t.Fatalf("%s: deployment %s status %+v (known %v), want %+v", when, d.Metadata.Name, got, ok, w)
		}
	}
	for i := range 5 { // every name depName gives
		name := fmt.Sprintf("app%d", i)
		_, exists := c.fleet.deployments[name]
		if _, ok := c.model.Model().DeploymentStatus(name); ok != exists {
			t.Fatalf("%s: deployment %s exists %v, has a status %v", when, name, exists, ok)
		}
	}
}

func podList(pods []schema.Pod) string {
	s := "["
	for i, p := range pods {
		if i > 0 {
			s += " "
		}
		s += p.Name + "@" + p.Hash[:6]
	}
	return s + "]"
}

// TestIncrementalPlacementDeclines: when more devices changed than the
// limit, placeIncrementally declines without deciding anything, and the
// pass falls back to placing everything, with the same outcome.
func TestIncrementalPlacementDeclines(t *testing.T) {
	ctx := t.Context()
	st := openStore(t, t.TempDir())
	c, err := New(Options{Store: st, Conn: newRecorder()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	events, err := st.Watch(ctx, "", c.listRev)
	if err != nil {
		t.Fatal(err)
	}
	c.pass(ctx)
	apply(t, st, depl("web", "nginx:1", "site", "lab"))
	objs := make([]schema.Object, 0, minIncrementalLimit+1)
	for i := range minIncrementalLimit + 1 {
		objs = append(objs, dev(fmt.Sprintf("d%04d", i), "site", "lab"))
	}
	apply(t, st, objs...)
	last := fmt.Sprintf("d%04d", minIncrementalLimit)
	for seen := false; !seen; {
		select {
		case ev := <-events:
			c.apply(ev)
			seen = ev.Name == last
		case <-time.After(5 * time.Second):
			t.Fatal("no store event for the last device")
		}
	}
	rolling := maps.Clone(c.placer.rolling)
	if _, ok := placeIncrementally(c.fleet, c.placer.place, increment{devices: c.changes.devices, rolling: c.placer.rolling, limit: minIncrementalLimit}); ok {
		t.Fatalf("placeIncrementally decided for %d changed devices, limit %d", len(c.changes.devices), minIncrementalLimit)
	}
	if !maps.Equal(rolling, c.placer.rolling) {
		t.Error("placeIncrementally changed the rollouts while declining")
	}
	full := c.fullPasses.Load()
	c.pass(ctx)
	if c.fullPasses.Load() != full+1 {
		t.Fatal("the pass did not fall back to the full placement")
	}
	checkFixpoint(t, c, "after the fallback")
	if ds := c.model.Desired(last); ds == nil || len(ds.Pods) != 1 {
		t.Errorf("desired state of %s: %+v, want web", last, ds)
	}
}

// checkFreshController fails unless a controller started afresh on c's
// store, passing once in full, writes nothing (the store holds the desired
// states and tombstones a full pass gives) and counts the same deployment
// statuses, port conflicts included; and unless pub's retained desired
// topics are exactly what the store holds.
func checkFreshController(t *testing.T, c *Controller, st *store.Store, status StatusSource, pub *recorder, when string) {
	t.Helper()
	ctx := t.Context()
	revision := func() uint64 {
		var rev uint64
		if err := st.View(ctx, func(tx *store.Txn) error { rev = tx.Revision(); return nil }); err != nil {
			t.Fatal(err)
		}
		return rev
	}
	fresh, err := New(Options{Store: st, Conn: newRecorder(), Status: status})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(fresh.writer.tombstones, c.writer.tombstones) {
		t.Fatalf("%s: tombstones %v, the store holds %v", when, c.writer.tombstones, fresh.writer.tombstones)
	}
	before := revision()
	fresh.pass(ctx)
	if after := revision(); after != before {
		t.Fatalf("%s: a fresh controller's full pass wrote to the store (revision %d → %d)", when, before, after)
	}
	for i, d := range c.fleet.deploymentsSorted() {
		got, ok := c.model.Model().DeploymentStatus(d.Metadata.Name)
		want, wok := fresh.model.Model().DeploymentStatus(d.Metadata.Name)
		if ok != wok || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: deployment %d %s status %+v (known %v), a fresh controller counts %+v (known %v)", when, i, d.Metadata.Name, got, ok, want, wok)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	n := 0
	for name := range c.model.DesiredStates() {
		n++
		topic := schema.Topics{}.Device(name, schema.TopicDesired)
		if stored := fresh.writer.topics.raw[name]; !bytes.Equal(pub.retained[topic], stored) {
			t.Fatalf("%s: %s retains %s, the store holds %s", when, topic, pub.retained[topic], stored)
		}
	}
	retained := 0
	for topic := range pub.retained {
		if _, what, err := (schema.Topics{}).ParseDevice(topic); err == nil && what == schema.TopicDesired {
			retained++
		}
	}
	if retained != n {
		t.Fatalf("%s: %d desired topics retained, %d devices have a desired state", when, retained, n)
	}
}
