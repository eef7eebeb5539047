package controller

import (
	"fmt"
	"reflect"
	"testing"
	"time"

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
	if !reflect.DeepEqual(s, want) {
		t.Errorf("AggregateDeployment = %+v, want %+v (offline device pending, not failed)", s, want)
	}
	// A device that went back by itself reports the revision it runs,
	// naming the desired one in failedRevision: it failed.
	e := device("e")
	e.Status = &schema.DeviceStatus{ObservedGeneration: 4, Pods: []schema.PodStatus{{Name: "web", Hash: "older", Phase: schema.PhaseRunning, Ready: true,
		FailedRevision: &schema.FailedRevision{Hash: hash, Reason: "CrashLoopBackOff"}}}}
	if fleetmodel.Converged(desired, e.Status) {
		t.Error("Converged: a device back on an older revision is not converged")
	}
	s = AggregateDeployment(&dep, []DeviceView{e})
	want = schema.DeploymentStatus{ObservedGeneration: 1, Targeted: 1, Updated: 1, Failed: 1}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("AggregateDeployment of a device that went back = %+v, want %+v", s, want)
	}
}

// TestPodHealthFailedRevision: a staged rollout counts a device that went
// back from the revision by itself as failed, with the reason it gives.
func TestPodHealthFailedRevision(t *testing.T) {
	now := time.Now()
	st := &schema.DeviceStatus{Pods: []schema.PodStatus{{Name: "web", Hash: "h1", Phase: schema.PhaseRunning, Ready: true,
		FailedRevision: &schema.FailedRevision{Hash: "h2", Reason: "RunContainerError"}}}}
	if ready, _, failed, reason := podHealth(st, "web", "h2", now); ready || !failed || reason != "RunContainerError" {
		t.Errorf("podHealth at the failed revision = ready %v, failed %v, %q; want failed, RunContainerError", ready, failed, reason)
	}
	if ready, _, failed, _ := podHealth(st, "web", "h1", now); !ready || failed {
		t.Errorf("podHealth at the revision that runs = ready %v, failed %v; want ready", ready, failed)
	}
}

// TestPlacePaused: a paused deployment moves no device to another
// template, and gives a device that has no pod the template already
// published, if any.
func TestPlacePaused(t *testing.T) {
	v1 := deployment("app", "app:1", nil)
	v2 := deployment("app", "app:2", nil)
	v3 := deployment("app", "app:3", nil)
	restarted := deployment("app", "app:1", nil)
	restarted.Spec.Template.Metadata = &schema.TemplateMeta{Annotations: map[string]string{schema.AnnotationRestartedAt: "2025-01-01T00:00:00Z"}}
	names := map[string]string{}
	pod := func(d schema.Deployment) *schema.Pod {
		p := templatePod(&d, schema.TemplateHash(d.Spec.Template))
		names[p.Hash] = d.Spec.Template.Spec.Containers[0].Image
		return &p
	}
	p1, p2 := pod(v1), pod(v2)
	pod(v3)
	if r := pod(restarted); r.Hash == p1.Hash || r.Annotations[schema.AnnotationRestartedAt] == "" {
		t.Fatalf("a restarted template's pod %+v must carry its annotations and another hash", r)
	}
	if p1.Hash != schema.PodSpecHash(v1.Spec.Template.Spec) {
		t.Fatal("a template without annotations must keep its spec hash")
	}
	paused := func(d schema.Deployment) schema.Deployment { d.Spec.Paused = true; return d }

	tests := []struct {
		name string
		dep  schema.Deployment
		prev []*schema.Pod // per device d0, d1…; nil: no pod yet
		want string
		held int
	}{
		{"paused mid-rollout: each keeps its pod; a new device gets the published current template",
			paused(v2), []*schema.Pod{p1, p2, nil}, "d0=app:1 d1=app:2 d2=app:2", 1},
		{"paused before the current template was published: a new device gets the pod most have",
			paused(v3), []*schema.Pod{p1, p1, p2, nil}, "d0=app:1 d1=app:1 d2=app:2 d3=app:1", 4},
		{"a tie goes to the smaller hash",
			paused(v3), []*schema.Pod{p1, p2, nil}, "d0=app:1 d1=app:2 d2=" + names[min(p1.Hash, p2.Hash)], 3},
		{"paused from the start publishes nothing",
			paused(v1), []*schema.Pod{nil, nil}, "d0=- d1=-", 2},
		{"a restart while paused moves no device",
			paused(restarted), []*schema.Pod{p1, p1}, "d0=app:1 d1=app:1", 2},
		{"resumed: every device moves (AllAtOnce)",
			v3, []*schema.Pod{p1, p2, nil}, "d0=app:3 d1=app:3 d2=app:3", 0},
		{"paused and current everywhere: nothing held",
			paused(v1), []*schema.Pod{p1, nil}, "d0=app:1 d1=app:1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var devs []DeviceView
			for i, p := range tt.prev {
				d := device(fmt.Sprintf("d%d", i))
				if p != nil {
					d.Prev = &schema.DesiredState{Generation: 1, Pods: []schema.Pod{*p}}
				}
				devs = append(devs, d)
			}
			targeted := make([]*DeviceView, len(devs))
			for i := range devs {
				targeted[i] = &devs[i]
			}
			dep := tt.dep
			pods, held := PlaceDeployment(&dep, targeted)
			got := ""
			for i, p := range pods {
				img := "-"
				if p.Name != "" {
					img = names[p.Hash]
				}
				got += fmt.Sprintf(" d%d=%s", i, img)
			}
			if got[1:] != tt.want || held != tt.held {
				t.Errorf("placed %s (held %d), want %s (held %d)", got[1:], held, tt.want, tt.held)
			}
			// The full placement agrees, and drops the empty slots.
			all := DesiredPods(devs, []schema.Deployment{dep})
			for i, p := range pods {
				if n := len(all[devs[i].Name]); (p.Name == "") != (n == 0) {
					t.Errorf("DesiredPods gives d%d %d pods, PlaceDeployment %+v", i, n, p)
				}
			}
		})
	}
}
