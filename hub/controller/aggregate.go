package controller

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// statusModel is where the status aggregator records deployment statuses;
// fleetmodel.Writer is one.
type statusModel interface {
	SetDeploymentStatus(name string, s schema.DeploymentStatus)
	DeleteDeploymentStatus(name string)
}

var _ statusModel = (*fleetmodel.Writer)(nil)

// rolloutStatus adds a Staged deployment's rollout to its status; the
// placer, which keeps the rollouts, is one.
type rolloutStatus interface {
	decorate(name string, s schema.DeploymentStatus) schema.DeploymentStatus
}

// statusAggregator is the last stage of a pass: it counts each
// deployment's status from what the devices it targets report (device by
// device, so an incremental pass recounts only what changed), adds its
// rollout and port conflicts, records it in the model and publishes it
// retained. It reads the fleet; it keeps the counts, the port conflicts
// and the status topics.
type statusAggregator struct {
	fleet    fleetView
	model    statusModel
	rollouts rolloutStatus
	ports    *portWatch
	topics   *statusTopics
	aggs     map[string]*depAgg // by deployment
}

// depAgg is a deployment's status, kept up to date device by device.
type depAgg struct {
	hash   string
	status schema.DeploymentStatus
	cat    map[string]category // the devices it targets
	upd    map[string]updateMark
}

// countAll counts every deployment's status afresh and publishes what
// changed, clearing the statuses of deleted deployments.
func (a *statusAggregator) countAll(ctx context.Context) {
	deps := a.fleet.deploymentsSorted()
	a.ports.update(deps)
	clear(a.aggs)
	names := make([]string, len(deps))
	for i := range deps {
		a.rebuild(&deps[i])
		names[i] = deps[i].Metadata.Name
	}
	a.publish(ctx, append(names, a.topics.deletedDeployments(a.fleet.deployment)...))
}

// recount brings the statuses up to date after an incremental pass: it
// recounts the deployments ch names (and those whose port conflicts
// changed), and in the others the devices that changed or reported, and
// publishes what changed.
func (a *statusAggregator) recount(ctx context.Context, ch *changeSet) {
	deps := a.fleet.deploymentsSorted()
	touched := maps.Clone(ch.deployments) // deployments whose status may have changed
	if touched == nil {
		touched = map[string]bool{}
	}
	if len(ch.devices) > 0 || len(touched) > 0 {
		// Devices or deployments changed: host port claims may too.
		for _, name := range a.ports.update(deps) {
			touched[name] = true
		}
	}
	rebuilt := maps.Clone(touched)
	for depName := range rebuilt {
		if dep, ok := a.fleet.deployment(depName); ok {
			a.rebuild(dep)
		} else {
			delete(a.aggs, depName)
		}
	}
	for _, devs := range []map[string]bool{ch.devices, ch.reported} {
		for name := range devs {
			d, _ := a.fleet.device(name)
			for i := range deps {
				depName := deps[i].Metadata.Name
				if rebuilt[depName] {
					continue
				}
				if _, counted := a.aggs[depName].cat[name]; counted || d.Labels != nil && deps[i].Spec.Selector.Matches(d.Labels) {
					a.update(&deps[i], name)
					touched[depName] = true
				}
			}
		}
	}
	if len(touched) > 0 || a.topics.clearing() {
		a.publish(ctx, slices.Sorted(maps.Keys(touched)))
	}
}

// rebuild counts a deployment's status from scratch.
func (a *statusAggregator) rebuild(dep *schema.Deployment) {
	names := a.fleet.selectNames(dep.Spec.Selector)
	g := &depAgg{
		hash:   schema.TemplateHash(dep.Spec.Template),
		status: schema.DeploymentStatus{ObservedGeneration: dep.Metadata.Generation, Revision: depRevision(dep)},
		cat:    make(map[string]category, len(names)),
		upd:    map[string]updateMark{},
	}
	for _, name := range names {
		cat := a.categoryOf(dep.Metadata.Name, g.hash, name)
		g.cat[name] = cat
		countDevice(&g.status, cat, 1)
		if m, ok := a.updateOf(dep.Metadata.Name, g.hash, name); ok {
			g.upd[name] = m
		}
	}
	a.aggs[dep.Metadata.Name] = g
}

// update recounts one device in a deployment's status.
func (a *statusAggregator) update(dep *schema.Deployment, name string) {
	g := a.aggs[dep.Metadata.Name]
	if g == nil {
		a.rebuild(dep)
		return
	}
	if old, ok := g.cat[name]; ok {
		countDevice(&g.status, old, -1)
		delete(g.cat, name)
	}
	delete(g.upd, name)
	if d, ok := a.fleet.device(name); ok && dep.Spec.Selector.Matches(d.Labels) {
		cat := a.categoryOf(dep.Metadata.Name, g.hash, name)
		g.cat[name] = cat
		countDevice(&g.status, cat, 1)
		if m, ok := a.updateOf(dep.Metadata.Name, g.hash, name); ok {
			g.upd[name] = m
		}
	}
}

func (a *statusAggregator) categoryOf(depName, hash, device string) category {
	d, _ := a.fleet.device(device)
	st, online := a.fleet.deviceState(device, d.UID)
	return deviceCategory(depName, hash, st, online)
}

// publish records the statuses of the named deployments in the model and
// publishes those that changed since they were last published; it clears
// the published status of the deleted ones.
func (a *statusAggregator) publish(ctx context.Context, names []string) {
	live := make([]namedStatus, 0, len(names))
	var gone []string
	for _, name := range names {
		g := a.aggs[name]
		if _, ok := a.fleet.deployment(name); !ok || g == nil {
			a.model.DeleteDeploymentStatus(name)
			gone = append(gone, name)
			continue
		}
		status := a.ports.withConflict(name, a.rollouts.decorate(name, g.status))
		status.Updates = countUpdates(g.upd)
		a.model.SetDeploymentStatus(name, status)
		live = append(live, namedStatus{name, status})
	}
	a.topics.publishDeploymentStatuses(ctx, live, gone)
}

// updateMark is where a deployment's current revision stands on one
// device that reports its update (schema.PodUpdate).
type updateMark struct {
	state   schema.UpdateState
	waiting bool
	until   time.Time
}

// updateOf reads device's report of pod depName's update to hash.
func (a *statusAggregator) updateOf(depName, hash, device string) (updateMark, bool) {
	d, _ := a.fleet.device(device)
	st, _ := a.fleet.deviceState(device, d.UID)
	if st == nil {
		return updateMark{}, false
	}
	for i := range st.Pods {
		p := &st.Pods[i]
		if p.Name != depName || p.Update == nil || p.Update.Hash != hash {
			continue
		}
		m := updateMark{state: p.Update.State, waiting: p.Update.Reason != ""}
		if p.Update.Until != nil && p.Update.Reason == schema.UpdateReasonWindow {
			m.until = *p.Update.Until
		}
		return m, true
	}
	return updateMark{}, false
}

// countUpdates sums the marks up; nil when there are none.
func countUpdates(marks map[string]updateMark) *schema.UpdateCounts {
	if len(marks) == 0 {
		return nil
	}
	var c schema.UpdateCounts
	for _, m := range marks {
		switch m.state {
		case schema.UpdateDownloading:
			c.Downloading++
		case schema.UpdateDownloaded, schema.UpdateWaiting:
			c.Downloaded++
		case schema.UpdateSwitched:
			c.Switched++
		}
		if m.waiting {
			c.Waiting++
			if !m.until.IsZero() && (c.WaitingUntil == nil || m.until.Before(*c.WaitingUntil)) {
				t := m.until
				c.WaitingUntil = &t
			}
		}
	}
	return &c
}
