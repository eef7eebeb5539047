package controller

import (
	"context"

	"github.com/fleetmq/fleet/schema"
)

// depAgg is a deployment's status, kept up to date device by device.
type depAgg struct {
	hash   string
	status schema.DeploymentStatus
	cat    map[string]category // the devices it targets
}

// rebuildAgg counts a deployment's status from scratch.
func (c *Controller) rebuildAgg(dep *schema.Deployment) {
	names := c.selectNames(dep.Spec.Selector)
	a := &depAgg{
		hash:   schema.TemplateHash(dep.Spec.Template),
		status: schema.DeploymentStatus{ObservedGeneration: dep.Metadata.Generation, Revision: depRevision(dep)},
		cat:    make(map[string]category, len(names)),
	}
	for _, name := range names {
		cat := c.categoryOf(dep.Metadata.Name, a.hash, name)
		a.cat[name] = cat
		countDevice(&a.status, cat, 1)
	}
	c.aggs[dep.Metadata.Name] = a
}

// updateAgg recounts one device in a deployment's status.
func (c *Controller) updateAgg(dep *schema.Deployment, name string) {
	a := c.aggs[dep.Metadata.Name]
	if a == nil {
		c.rebuildAgg(dep)
		return
	}
	if old, ok := a.cat[name]; ok {
		countDevice(&a.status, old, -1)
		delete(a.cat, name)
	}
	if d, ok := c.model.Device(name); ok && dep.Spec.Selector.Matches(d.Labels) {
		cat := c.categoryOf(dep.Metadata.Name, a.hash, name)
		a.cat[name] = cat
		countDevice(&a.status, cat, 1)
	}
}

func (c *Controller) categoryOf(depName, hash, device string) category {
	d, _ := c.model.Device(device)
	st, online := c.status.DeviceState(device, d.UID)
	return deviceCategory(depName, hash, st, online)
}

// publishAggs records the statuses of the named deployments in the model
// and publishes those that changed since they were last published; it
// clears the published status of the deleted ones.
func (c *Controller) publishAggs(ctx context.Context, names []string) {
	live := make([]namedStatus, 0, len(names))
	var gone []string
	for _, name := range names {
		a := c.aggs[name]
		if _, ok := c.deployments[name]; !ok || a == nil {
			c.model.DeleteDeploymentStatus(name)
			gone = append(gone, name)
			continue
		}
		status := c.withPortConflict(name, c.staged.decorate(name, a.status))
		c.model.SetDeploymentStatus(name, status)
		live = append(live, namedStatus{name, status})
	}
	c.pub.publishDeploymentStatuses(ctx, live, gone)
}
