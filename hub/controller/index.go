package controller

import (
	"slices"

	"github.com/fleetmq/fleet/schema"
)

// labelIndex maps "key=value" to the names of the devices carrying that
// label, so a selector finds its devices without looking at every device.
type labelIndex map[string]map[string]struct{}

func labelKey(k, v string) string { return k + "=" + v }

func (ix labelIndex) add(name string, labels map[string]string) {
	for k, v := range labels {
		key := labelKey(k, v)
		set := ix[key]
		if set == nil {
			set = map[string]struct{}{}
			ix[key] = set
		}
		set[name] = struct{}{}
	}
}

func (ix labelIndex) remove(name string, labels map[string]string) {
	for k, v := range labels {
		key := labelKey(k, v)
		if set := ix[key]; set != nil {
			delete(set, name)
			if len(set) == 0 {
				delete(ix, key)
			}
		}
	}
}

// selectNames returns, sorted, the devices sel matches. The index narrows
// the candidates to the smallest of the device sets that the matchLabels
// pairs and the In requirements name (an In requirement's set is the union
// over its values); every candidate is then checked against the whole
// selector, so the other requirements (NotIn, Exists, DoesNotExist) hold
// too. A selector with neither pairs nor In looks at every device.
func (c *Controller) selectNames(sel schema.LabelSelector) []string {
	if sel.Empty() {
		return c.names()
	}
	var (
		best     []map[string]struct{}
		bestSize int
		narrowed bool
	)
	consider := func(sets []map[string]struct{}) {
		n := 0
		for _, set := range sets {
			n += len(set)
		}
		if !narrowed || n < bestSize {
			best, bestSize, narrowed = sets, n, true
		}
	}
	for k, v := range sel.MatchLabels {
		consider([]map[string]struct{}{c.index[labelKey(k, v)]})
	}
	for _, r := range sel.MatchExpressions {
		if r.Operator != schema.LabelSelectorOpIn {
			continue
		}
		sets := make([]map[string]struct{}, 0, len(r.Values))
		for _, v := range r.Values {
			sets = append(sets, c.index[labelKey(r.Key, v)])
		}
		consider(sets)
	}
	if !narrowed {
		var out []string
		for _, name := range c.names() {
			if sel.Matches(c.devices[name].Labels) {
				out = append(out, name)
			}
		}
		return out
	}
	out := make([]string, 0, bestSize)
	seen := make(map[string]struct{}, bestSize)
	for _, set := range best {
		for name := range set {
			if _, dup := seen[name]; dup {
				continue
			}
			seen[name] = struct{}{}
			if d, ok := c.devices[name]; ok && sel.Matches(d.Labels) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

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
		hash:   schema.PodSpecHash(dep.Spec.Template.Spec),
		status: schema.DeploymentStatus{ObservedGeneration: dep.Metadata.Generation},
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
	if d, ok := c.devices[name]; ok && dep.Spec.Selector.Matches(d.Labels) {
		cat := c.categoryOf(dep.Metadata.Name, a.hash, name)
		a.cat[name] = cat
		countDevice(&a.status, cat, 1)
	}
}

func (c *Controller) categoryOf(depName, hash, device string) category {
	var st *schema.DeviceStatus
	var online bool
	if c.opts.Status != nil {
		st, online = c.opts.Status.DeviceState(device, c.devices[device].UID)
	}
	return deviceCategory(depName, hash, st, online)
}
