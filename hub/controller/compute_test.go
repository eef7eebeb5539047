package controller

import (
	"fmt"
	"testing"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

func deployment(name, image string, match map[string]string) schema.Deployment {
	d := schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: name, Generation: 1},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: match},
			Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{{Name: "c", Image: image}}}},
		},
	}
	schema.Default(&d)
	return d
}

func device(name string, labels ...string) DeviceView {
	l := map[string]string{schema.LabelDevice: name}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return DeviceView{Name: name, Labels: l, Online: true}
}

func TestDesiredPodsSelectors(t *testing.T) {
	devs := []DeviceView{device("a", "role", "sensor"), device("b", "role", "kiosk"), device("c")}
	deps := []schema.Deployment{
		deployment("web", "nginx", nil),
		deployment("collector", "collector:1", map[string]string{"role": "sensor"}),
		deployment("pinned", "gate:1", map[string]string{schema.LabelDevice: "c"}),
		deployment("any-role", "x:1", nil),
		deployment("no-role", "x:1", nil),
		deployment("not-sensor", "x:1", nil),
		deployment("either", "x:1", nil),
	}
	exprs := map[string]schema.LabelSelectorRequirement{
		"any-role":   {Key: "role", Operator: schema.LabelSelectorOpExists},
		"no-role":    {Key: "role", Operator: schema.LabelSelectorOpDoesNotExist},
		"not-sensor": {Key: "role", Operator: schema.LabelSelectorOpNotIn, Values: []string{"sensor"}},
		"either":     {Key: "role", Operator: schema.LabelSelectorOpIn, Values: []string{"sensor", "kiosk"}},
	}
	for i := range deps {
		if r, ok := exprs[deps[i].Metadata.Name]; ok {
			deps[i].Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{r}
		}
	}
	got := DesiredPods(devs, deps)
	want := map[string][]string{
		"a": {"any-role", "collector", "either", "web"},
		"b": {"any-role", "either", "not-sensor", "web"},
		"c": {"no-role", "not-sensor", "pinned", "web"},
	}
	for dev, names := range want {
		if len(got[dev]) != len(names) {
			t.Fatalf("device %s: got %d pods %v, want %v", dev, len(got[dev]), got[dev], names)
		}
		for i, n := range names {
			if got[dev][i].Name != n || got[dev][i].Hash == "" {
				t.Errorf("device %s pod %d = %q (hash %q), want %q", dev, i, got[dev][i].Name, got[dev][i].Hash, n)
			}
		}
	}
	if pods := DesiredPods([]DeviceView{device("d", "role", "none")}, deps[1:2]); len(pods["d"]) != 0 {
		t.Errorf("unmatched device got pods %v", pods["d"])
	}
}

func TestDesiredPodsRollingUpdate(t *testing.T) {
	old := deployment("app", "app:1", nil)
	oldPod := schema.Pod{Name: "app", Spec: old.Spec.Template.Spec, Hash: schema.PodSpecHash(old.Spec.Template.Spec)}
	var devs []DeviceView
	for i := range 8 {
		d := device(fmt.Sprintf("d%d", i))
		d.Prev = &schema.DesiredState{Generation: 1, Pods: []schema.Pod{oldPod}}
		d.Status = &schema.DeviceStatus{ObservedGeneration: 1, Pods: []schema.PodStatus{{Name: "app", Hash: oldPod.Hash, Phase: schema.PhaseRunning, Ready: true}}}
		devs = append(devs, d)
	}
	newDep := deployment("app", "app:2", nil)
	newDep.Spec.Strategy = schema.Strategy{Type: schema.StrategyRollingUpdate, RollingUpdate: &schema.RollingUpdate{MaxUnavailable: "25%"}}
	newHash := schema.PodSpecHash(newDep.Spec.Template.Spec)

	count := func(pods map[string][]schema.Pod) (n int) {
		for _, p := range pods {
			if p[0].Hash == newHash {
				n++
			}
		}
		return n
	}
	got := DesiredPods(devs, []schema.Deployment{newDep})
	if n := count(got); n != 2 {
		t.Fatalf("first wave moved %d devices, want 2 (25%% of 8)", n)
	}
	// Feed the result back without convergence: nothing more may move.
	for i := range devs {
		devs[i].Prev = &schema.DesiredState{Generation: 2, Pods: got[devs[i].Name]}
	}
	if n := count(DesiredPods(devs, []schema.Deployment{newDep})); n != 2 {
		t.Fatalf("with the first wave unconverged, %d devices moved, want still 2", n)
	}
	// The first wave converges: the next two move.
	for i := range devs {
		if got[devs[i].Name][0].Hash == newHash {
			devs[i].Status.Pods[0].Hash = newHash
		}
	}
	if n := count(DesiredPods(devs, []schema.Deployment{newDep})); n != 4 {
		t.Fatalf("after the first wave converged, %d devices moved, want 4", n)
	}
}

func TestSamePods(t *testing.T) {
	a := []schema.Pod{{Name: "x", Hash: "1"}}
	if !SamePods(a, []schema.Pod{{Name: "x", Hash: "1"}}) || SamePods(a, []schema.Pod{{Name: "x", Hash: "2"}}) || SamePods(a, nil) || !SamePods(nil, []schema.Pod{}) {
		t.Error("SamePods is wrong")
	}
}

func TestConvergedAndAggregate(t *testing.T) {
	dep := deployment("web", "nginx", nil)
	hash := schema.PodSpecHash(dep.Spec.Template.Spec)
	desired := &schema.DesiredState{Generation: 4, Pods: []schema.Pod{{Name: "web", Hash: hash, Spec: dep.Spec.Template.Spec}}}
	ready := &schema.DeviceStatus{ObservedGeneration: 4, Pods: []schema.PodStatus{{Name: "web", Hash: hash, Phase: schema.PhaseRunning, Ready: true}}}
	behind := &schema.DeviceStatus{ObservedGeneration: 3, Pods: ready.Pods}
	failed := &schema.DeviceStatus{ObservedGeneration: 4, Pods: []schema.PodStatus{{Name: "web", Hash: hash, Phase: schema.PhaseFailed}}}
	if !fleetmodel.Converged(desired, ready) || fleetmodel.Converged(desired, behind) || fleetmodel.Converged(desired, failed) || fleetmodel.Converged(desired, nil) {
		t.Error("Converged is wrong")
	}
	a, b, c, d := device("a"), device("b"), device("c"), device("d")
	a.Status, b.Status, c.Status = ready, failed, failed
	c.Online = false
	s := AggregateDeployment(&dep, []DeviceView{a, b, c, d})
	want := schema.DeploymentStatus{ObservedGeneration: 1, Targeted: 4, Updated: 3, Ready: 1, Failed: 1, Pending: 2}
	if s != want {
		t.Errorf("AggregateDeployment = %+v, want %+v (offline device pending, not failed)", s, want)
	}
}
