package controller

import (
	"maps"
	"slices"
	"strings"

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
// A paused deployment moves no device to another template (placePaused).
func DesiredPods(devices []DeviceView, deployments []schema.Deployment) map[string][]schema.Pod {
	out := placeAll(devices, deployments, PlaceDeployment, nil)
	for name := range out {
		sortPods(out[name])
	}
	return out
}

// placeFunc decides the pod one deployment puts on each device it targets:
// PlaceDeployment, or the placer's, which also places Staged deployments
// by their rollout's plan.
type placeFunc func(dep *schema.Deployment, targeted []*DeviceView) (pods []schema.Pod, held int)

// placeAll places every deployment on the devices its selector matches
// with place and returns each device's pods, unsorted (an empty list for a
// device none targets). holding, if set, is called with the name of each
// deployment that holds devices back on an older template.
func placeAll(devices []DeviceView, deployments []schema.Deployment, place placeFunc, holding func(dep string)) map[string][]schema.Pod {
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
		pods, held := place(dep, targeted)
		if held > 0 && holding != nil {
			holding(dep.Metadata.Name)
		}
		for j, d := range targeted {
			if pods[j].Name != "" { // a paused deployment may give none
				out[d.Name] = append(out[d.Name], pods[j])
			}
		}
	}
	return out
}

// increment is what changed since the last pass: the input of
// placeIncrementally.
type increment struct {
	// deps are every deployment, by name.
	deps []schema.Deployment
	// devices changed (or were deleted); changedDeps changed (or were
	// deleted); reported sent a report that changed.
	devices, changedDeps, reported map[string]bool
	// oldSel holds, for the changed deployments, the selector they had
	// before (nil: they are new): the devices that may hold their pod.
	oldSel map[string]*schema.LabelSelector
	// rolling names the deployments holding devices on an older
	// template (as the last pass left them).
	rolling map[string]bool
	// limit: more changed devices than this and the full placement is
	// the cheaper one.
	limit int
}

// placement is what placeIncrementally decided.
type placement struct {
	// work holds the new pods of every device whose pods were recomputed
	// (unchanged ones included).
	work map[string][]schema.Pod
	// removed are deleted devices that still have a desired state.
	removed []string
	// holding says, for every deployment placed, whether it now holds
	// devices back on an older template (the new rolling entries).
	holding map[string]bool
	// placed are the deployments placed on every device they may concern.
	placed map[string]bool
}

// placeIncrementally recomputes only what the changes in in can have
// changed: the pods of the changed devices, the placement of the changed
// deployments on the devices their selectors name (old and new), and of
// the rollouts in progress that the changed or reporting devices are part
// of. Its cost follows the size of the change, not of the fleet. ok is
// false when it declines (more than in.limit devices changed): then the
// caller places everything with placeAll, which gives the same result.
// place decides one deployment's pods; f is read only.
func placeIncrementally(f fleetView, place placeFunc, in increment) (p placement, ok bool) {
	if len(in.devices)+len(in.reported) > in.limit {
		return placement{}, false
	}
	if len(in.devices)+len(in.reported)+len(in.changedDeps) == 0 {
		return placement{}, true // nothing to place
	}
	hashes := make(map[string]string, len(in.deps))
	for i := range in.deps {
		hashes[in.deps[i].Metadata.Name] = schema.TemplateHash(in.deps[i].Spec.Template)
	}
	p = placement{work: map[string][]schema.Pod{}, holding: map[string]bool{}, placed: map[string]bool{}}
	for name := range in.changedDeps {
		p.placed[name] = true
	}
	for name := range in.devices {
		d, ok := f.device(name)
		prev := f.desired(name)
		in.joinRollouts(p.placed, prev, d.Labels, ok)
		if !ok {
			if prev != nil {
				p.removed = append(p.removed, name)
			}
			continue
		}
		p.work[name] = in.devicePods(p.placed, prev, d.Labels, hashes)
	}
	for name := range in.reported {
		if d, ok := f.device(name); ok {
			in.joinRollouts(p.placed, f.desired(name), d.Labels, true)
		}
	}
	for _, depName := range slices.Sorted(maps.Keys(p.placed)) {
		placeEverywhere(f, place, in, depName, p)
	}
	return p, true
}

// joinRollouts marks for placement the rollouts in progress a device is
// (or was) part of: a device joining, leaving or reporting in one changes
// its budget.
func (in *increment) joinRollouts(place map[string]bool, prev *schema.DesiredState, labels map[string]string, exists bool) {
	for i := range in.deps {
		depName := in.deps[i].Metadata.Name
		if in.rolling[depName] && (findPod(prev, depName) != nil || exists && in.deps[i].Spec.Selector.Matches(labels)) {
			place[depName] = true
		}
	}
}

// devicePods computes a changed device's pods, keeping the slot of the
// deployments placed later (those in place, which it may add to).
func (in *increment) devicePods(place map[string]bool, prev *schema.DesiredState, labels map[string]string, hashes map[string]string) []schema.Pod {
	pods := []schema.Pod{}
	for i := range in.deps {
		dep := &in.deps[i]
		depName := dep.Metadata.Name
		p := findPod(prev, depName)
		switch {
		case place[depName]:
			// Placed later; keep the slot meanwhile.
			if p != nil {
				pods = append(pods, *p)
			}
		case !dep.Spec.Selector.Matches(labels):
		case p != nil && p.Hash != hashes[depName] && dep.Spec.Strategy.Type == schema.StrategyRollingUpdate,
			dep.Spec.Paused, dep.Spec.Strategy.Type == schema.StrategyStaged:
			// Part of a rollout, paused, or staged (its plan says which
			// revision a joining device gets): the placement of the whole
			// deployment decides.
			place[depName] = true
			if p != nil {
				pods = append(pods, *p)
			}
		default:
			pods = append(pods, templatePod(dep, hashes[depName]))
		}
	}
	return pods
}

// placeEverywhere recomputes the pod of one deployment (or, deleted, its
// absence) on every device it may concern: those its selector matches,
// those its previous selector matched (they hold its pod) and those that
// changed (in.devices). Results go into p.work.
func placeEverywhere(f fleetView, place placeFunc, in increment, depName string, p placement) {
	pods := func(name string) []schema.Pod {
		if w, ok := p.work[name]; ok {
			return w
		}
		if ds := f.desired(name); ds != nil {
			return slices.Clone(ds.Pods)
		}
		return []schema.Pod{}
	}
	hasPod := func(name string) bool {
		var cur []schema.Pod
		if w, ok := p.work[name]; ok {
			cur = w
		} else if ds := f.desired(name); ds != nil {
			cur = ds.Pods
		}
		return slices.ContainsFunc(cur, func(p schema.Pod) bool { return p.Name == depName })
	}
	// Devices that may hold the pod without being targeted now.
	maybe := maps.Clone(in.devices)
	if maybe == nil {
		maybe = map[string]bool{}
	}
	if sel := in.oldSel[depName]; sel != nil {
		for _, name := range f.selectNames(*sel) {
			maybe[name] = true
		}
	}
	dep, ok := f.deployment(depName)
	var targeted []*DeviceView
	if ok {
		rolling := dep.Spec.Strategy.Type == schema.StrategyRollingUpdate || dep.Spec.Strategy.Type == schema.StrategyStaged
		for _, name := range f.selectNames(dep.Spec.Selector) {
			delete(maybe, name)
			d, _ := f.device(name)
			v := &DeviceView{Name: name, Labels: d.Labels, Prev: f.desired(name)}
			if rolling {
				v.Status, v.Online = f.deviceState(name, d.UID)
			}
			targeted = append(targeted, v)
		}
	}
	for name := range maybe {
		if _, exists := f.device(name); exists && hasPod(name) {
			p.work[name] = slices.DeleteFunc(pods(name), func(p schema.Pod) bool { return p.Name == depName })
		}
	}
	if !ok {
		p.holding[depName] = false
		return
	}
	placed, held := place(dep, targeted)
	p.holding[depName] = held > 0
	for i, v := range targeted {
		if placed[i].Name == "" {
			continue // paused, with nothing to give a device that has no pod
		}
		if cur := findPod(v.Prev, depName); cur != nil && cur.Hash == placed[i].Hash {
			if _, ok := p.work[v.Name]; !ok {
				continue // unchanged, and nothing else changed it
			}
		}
		pods := pods(v.Name)
		if j := slices.IndexFunc(pods, func(p schema.Pod) bool { return p.Name == depName }); j >= 0 {
			pods[j] = placed[i]
		} else {
			pods = append(pods, placed[i])
			sortPods(pods)
		}
		p.work[v.Name] = pods
	}
}

// PlaceDeployment decides the pod one deployment puts on each device it
// targets (pods[i] for targeted[i]) and how many of them it holds back on
// an older template: a RollingUpdate moves at most maxUnavailable devices
// at a time, and a device that already runs an older template keeps it
// until the devices moved before it have converged. Devices that never ran
// the deployment get the current template at once. A paused deployment
// moves no device (placePaused); pods[i] has no name when it gives
// device i no pod. held > 0 means a rollout is in progress (or paused),
// so a report or a device joining can change the placement.
func PlaceDeployment(dep *schema.Deployment, targeted []*DeviceView) (pods []schema.Pod, held int) {
	if dep.Spec.Paused {
		return placePaused(dep, targeted)
	}
	hash := schema.TemplateHash(dep.Spec.Template)
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
		pods[i] = templatePod(dep, hash)
	}
	return pods, held
}

// templatePod is the pod of the deployment's current template; hash is
// its schema.TemplateHash.
func templatePod(dep *schema.Deployment, hash string) schema.Pod {
	p := schema.Pod{Name: dep.Metadata.Name, Spec: dep.Spec.Template.Spec, Hash: hash}
	if m := dep.Spec.Template.Metadata; m != nil && len(m.Annotations) > 0 {
		p.Annotations = m.Annotations
	}
	// When the agent may replace an older revision by this one (not in
	// the hash: a new window changes no pod).
	p.UpdateWindow, p.UpdateLock = dep.Spec.UpdateWindow, dep.Spec.UpdateLock
	p.UpdateNow = p.UpdateWindow != nil && dep.Metadata.Annotations[schema.AnnotationUpdateNow] == hash
	return p
}

// placePaused is PlaceDeployment for a paused deployment: no device is
// moved to another template. A device keeps the pod it has; one that has
// none gets the current template if a targeted device already has it
// (the rollout had published it), else the pod most targeted devices have
// (on a tie, the one with the smallest hash), else nothing: a paused
// deployment never publishes a template that no device had. Every device
// not on the current template counts as held.
func placePaused(dep *schema.Deployment, targeted []*DeviceView) (pods []schema.Pod, held int) {
	name := dep.Metadata.Name
	hash := schema.TemplateHash(dep.Spec.Template)
	var (
		fill    *schema.Pod
		count   = map[string]int{}
		current bool
	)
	for _, d := range targeted {
		p := findPod(d.Prev, name)
		if p == nil {
			continue
		}
		count[p.Hash]++
		switch {
		case p.Hash == hash:
			current = true
		case fill == nil, count[p.Hash] > count[fill.Hash], count[p.Hash] == count[fill.Hash] && p.Hash < fill.Hash:
			fill = p
		}
	}
	if current {
		cur := templatePod(dep, hash)
		fill = &cur
	}
	pods = make([]schema.Pod, len(targeted))
	for i, d := range targeted {
		p := findPod(d.Prev, name)
		switch {
		case p != nil:
			pods[i] = *p
		case fill != nil:
			pods[i] = *fill
		default:
			// Nothing to give it: an empty slot the callers skip.
			held++
			continue
		}
		if pods[i].Hash != hash {
			held++
		}
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

// AggregateDeployment counts, over the devices a deployment targets, how
// many run its current template (updated), how many have it ready, how many
// are failing and how many are pending. An offline device is pending, never
// failed.
func AggregateDeployment(dep *schema.Deployment, devices []DeviceView) schema.DeploymentStatus {
	hash := schema.TemplateHash(dep.Spec.Template)
	s := schema.DeploymentStatus{ObservedGeneration: dep.Metadata.Generation, Revision: depRevision(dep)}
	for i := range devices {
		d := &devices[i]
		if dep.Spec.Selector.Matches(d.Labels) {
			countDevice(&s, deviceCategory(dep.Metadata.Name, hash, d.Status, d.Online), 1)
		}
	}
	return s
}

// depRevision is the deployment's current revision, as the store keeps
// it in its status.
func depRevision(dep *schema.Deployment) int64 {
	if dep.Status == nil {
		return 0
	}
	return dep.Status.Revision
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
	case got != nil && got.RevisionFailed(hash) && online:
		return catFailed // it went back to the revision it runs
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
