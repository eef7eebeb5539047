// Package controller turns Deployments and Devices into one full
// DesiredState per device, publishes it, and derives device and deployment
// status from what agents report. The computations are pure functions in
// this file; controller.go runs them level-triggered against the store.
package controller

import (
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// DeviceView is what the computation needs to know about one device.
type DeviceView struct {
	Name   string
	Labels map[string]string
	// Prev is the device's current desired state (nil if none yet).
	Prev *schema.DesiredState
	// Status is the agent's last report (nil if none).
	Status *schema.DeviceStatus
	Online bool
}

// DesiredPods computes every device's pods: one pod per Deployment whose
// selector matches the device, named after the Deployment, sorted by name.
//
// A RollingUpdate deployment moves at most maxUnavailable of its targeted
// devices to a changed template at a time: a device that already runs an
// older template keeps it until the devices moved before it have converged.
// Devices that never ran the deployment get the current template at once.
func DesiredPods(devices []DeviceView, deployments []schema.Deployment) map[string][]schema.Pod {
	out := placeAll(devices, deployments, nil)
	for name := range out {
		sortPods(out[name])
	}
	return out
}

// placeAll places every deployment on the devices its selector matches and
// returns each device's pods, unsorted (an empty list for a device none
// targets). holding, if set, is called with the name of each deployment
// that holds devices back on an older template.
func placeAll(devices []DeviceView, deployments []schema.Deployment, holding func(dep string)) map[string][]schema.Pod {
	out := make(map[string][]schema.Pod, len(devices))
	for _, d := range devices {
		out[d.Name] = []schema.Pod{}
	}
	var targeted []*DeviceView
	for i := range deployments {
		dep := &deployments[i]
		targeted = targeted[:0]
		for j := range devices {
			if dep.Spec.Selector.Matches(devices[j].Labels) {
				targeted = append(targeted, &devices[j])
			}
		}
		pods, held := PlaceDeployment(dep, targeted)
		if held > 0 && holding != nil {
			holding(dep.Metadata.Name)
		}
		for j, d := range targeted {
			out[d.Name] = append(out[d.Name], pods[j])
		}
	}
	return out
}

// PlaceDeployment decides the pod one deployment puts on each device it
// targets (pods[i] for targeted[i]) and how many of them it holds back on
// an older template: a RollingUpdate moves at most maxUnavailable devices
// at a time, and a device that already runs an older template keeps it
// until the devices moved before it have converged. Devices that never ran
// the deployment get the current template at once. held > 0 means a
// rollout is in progress, so a report can change the placement.
func PlaceDeployment(dep *schema.Deployment, targeted []*DeviceView) (pods []schema.Pod, held int) {
	spec := dep.Spec.Template.Spec
	hash := schema.PodSpecHash(spec)
	name := dep.Metadata.Name
	budget := len(targeted)
	if dep.Spec.Strategy.Type == schema.StrategyRollingUpdate {
		budget = dep.Spec.Strategy.MaxUnavailable(len(targeted))
		// Devices already moved to this template but not yet there use up
		// the budget.
		for _, d := range targeted {
			if p := findPod(d.Prev, name); p != nil && p.Hash == hash && !podSettled(d, name, hash) {
				budget--
			}
		}
	}
	pods = make([]schema.Pod, len(targeted))
	for i, d := range targeted {
		prev := findPod(d.Prev, name)
		switch {
		case prev == nil || prev.Hash == hash:
			// New on this device, or already current.
		case podSettled(d, name, hash):
			// Its report shows the new template running already: moving
			// it makes nothing unavailable.
		case budget > 0:
			budget--
		default:
			pods[i] = *prev
			held++
			continue
		}
		pods[i] = schema.Pod{Name: name, Spec: spec, Hash: hash}
	}
	return pods, held
}

func sortPods(pods []schema.Pod) {
	slices.SortFunc(pods, func(a, b schema.Pod) int { return strings.Compare(a.Name, b.Name) })
}

func findPod(ds *schema.DesiredState, name string) *schema.Pod {
	if ds == nil {
		return nil
	}
	for i := range ds.Pods {
		if ds.Pods[i].Name == name {
			return &ds.Pods[i]
		}
	}
	return nil
}

// podSettled reports whether the device runs pod name at hash and it is
// ready (or finished, for pods that are not restarted).
func podSettled(d *DeviceView, name, hash string) bool {
	if d.Status == nil {
		return false
	}
	for _, p := range d.Status.Pods {
		if p.Name == name {
			return p.Hash == hash && (p.Ready || p.Phase == schema.PhaseSucceeded)
		}
	}
	return false
}

// SamePods reports whether two pod lists are the same content: a new
// generation is issued only when they differ.
func SamePods(a, b []schema.Pod) bool {
	return slices.EqualFunc(a, b, func(x, y schema.Pod) bool {
		return x.Name == y.Name && x.Hash == y.Hash
	})
}

// Converged reports whether a device's report shows it at its desired
// generation with every desired pod running its spec (ready, or finished
// for pods that are not restarted).
func Converged(desired *schema.DesiredState, st *schema.DeviceStatus) bool {
	if st == nil {
		return desired == nil || len(desired.Pods) == 0 && desired.Generation == 0
	}
	if desired == nil {
		return true
	}
	if st.ObservedGeneration < desired.Generation || (desired.Store != "" && st.Store != "" && st.Store != desired.Store) {
		return false
	}
	for _, want := range desired.Pods {
		ok := false
		for _, got := range st.Pods {
			if got.Name != want.Name {
				continue
			}
			ok = (want.Hash == "" || got.Hash == "" || got.Hash == want.Hash) &&
				(got.Ready || got.Phase == schema.PhaseSucceeded && want.Spec.RestartPolicy != schema.RestartAlways)
			break
		}
		if !ok {
			return false
		}
	}
	return true
}

// ObservedInfo derives the API's view of a device from its desired state,
// its last report and its online flag.
func ObservedInfo(desired *schema.DesiredState, st *schema.DeviceStatus, online bool, lastSeen time.Time, now time.Time, staleAfter time.Duration) *schema.DeviceObservedInfo {
	info := &schema.DeviceObservedInfo{Online: online}
	if desired != nil {
		info.DesiredGeneration = desired.Generation
	}
	if !lastSeen.IsZero() {
		ls := lastSeen.UTC()
		info.LastSeen = &ls
		info.Stale = staleAfter > 0 && now.Sub(lastSeen) > staleAfter
	}
	if st != nil {
		info.ObservedGeneration = st.ObservedGeneration
		agent := st.Agent
		info.Agent = &agent
		info.Node = st.Node
		info.Pods = st.Pods
	}
	info.Converged = Converged(desired, st)
	return info
}

// AggregateDeployment counts, over the devices a deployment targets, how
// many run its current template (updated), how many have it ready, how many
// are failing and how many are pending. An offline device is pending, never
// failed.
func AggregateDeployment(dep *schema.Deployment, devices []DeviceView) schema.DeploymentStatus {
	hash := schema.PodSpecHash(dep.Spec.Template.Spec)
	s := schema.DeploymentStatus{ObservedGeneration: dep.Metadata.Generation}
	for i := range devices {
		d := &devices[i]
		if dep.Spec.Selector.Matches(d.Labels) {
			countDevice(&s, deviceCategory(dep.Metadata.Name, hash, d.Status, d.Online), 1)
		}
	}
	return s
}

// category is where one targeted device counts in a DeploymentStatus.
type category uint8

const (
	catPending        category = iota // not on the current template yet
	catReady                          // current template, ready or done
	catFailed                         // current template, failed, online
	catUpdatedPending                 // current template, on its way
)

// deviceCategory says where a device the deployment targets counts, from
// its report.
func deviceCategory(depName, hash string, st *schema.DeviceStatus, online bool) category {
	var got *schema.PodStatus
	if st != nil {
		for j := range st.Pods {
			if st.Pods[j].Name == depName {
				got = &st.Pods[j]
			}
		}
	}
	current := got != nil && got.Hash == hash
	switch {
	case current && (got.Ready || got.Phase == schema.PhaseSucceeded):
		return catReady
	case current && got.Phase == schema.PhaseFailed && online:
		return catFailed
	case current:
		return catUpdatedPending
	}
	return catPending
}

// countDevice adds (delta 1) or removes (delta -1) one targeted device.
func countDevice(s *schema.DeploymentStatus, c category, delta int) {
	s.Targeted += delta
	switch c {
	case catReady:
		s.Updated += delta
		s.Ready += delta
	case catFailed:
		s.Updated += delta
		s.Failed += delta
	case catUpdatedPending:
		s.Updated += delta
		s.Pending += delta
	default:
		s.Pending += delta
	}
}
