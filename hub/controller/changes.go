package controller

import "github.com/fleetmq/fleet/schema"

// changeSet is what changed since the last pass, as the store's watch
// (load.go), the staged rollouts' clock and the status inbox report it:
// the one thing the stages of a pass learn about the change. It names
// objects, never what happened to them; each stage reads the objects as
// they are now and keeps its own state. The pass clears it at its end.
type changeSet struct {
	// full makes the next pass recompute everything: the first pass, a
	// (re)load, a republish, a failure.
	full bool
	// devices changed (or were deleted).
	devices map[string]bool
	// deployments changed (or were deleted), or their staged rollout's
	// plan may have changed by time alone.
	deployments map[string]bool
	// oldSel holds, for the deployments an event changed, the selector
	// they had before the first such event (nil: they are new).
	oldSel map[string]*schema.LabelSelector
	// config are the ConfigMaps and Secrets written or deleted.
	config map[configKey]bool
	// reported are the devices whose report changed (the status inbox's,
	// handed over at the start of the pass; nil when none).
	reported map[string]bool
}

func newChangeSet() *changeSet {
	return &changeSet{
		full:        true,
		devices:     map[string]bool{},
		deployments: map[string]bool{},
		oldSel:      map[string]*schema.LabelSelector{},
		config:      map[configKey]bool{},
	}
}

// deviceChanged notes a device event.
func (ch *changeSet) deviceChanged(name string) { ch.devices[name] = true }

// deploymentChanged notes a deployment event; old is the deployment as it
// was before it (nil: new).
func (ch *changeSet) deploymentChanged(name string, old *schema.Deployment) {
	ch.deployments[name] = true
	if _, ok := ch.oldSel[name]; !ok {
		var sel *schema.LabelSelector
		if old != nil {
			sel = &old.Spec.Selector
		}
		ch.oldSel[name] = sel
	}
}

// configChanged notes a ConfigMap or Secret event.
func (ch *changeSet) configChanged(kind, name string) { ch.config[configKey{kind, name}] = true }

// clear forgets everything: the pass has seen it.
func (ch *changeSet) clear() {
	ch.full = false
	clear(ch.devices)
	clear(ch.deployments)
	clear(ch.oldSel)
	clear(ch.config)
	ch.reported = nil
}
