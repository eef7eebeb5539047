package controller

import (
	"context"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// placer is the first stage of a pass: it turns the deployments and the
// devices into each device's pods, all of them (all) or what a change set
// can have changed (some). It keeps the staged rollouts, whose records it
// stores before the desired states that follow from them (save), and the
// deployments that hold devices back on an older template. It reads the
// fleet and writes nothing but its rollout records.
type placer struct {
	fleet   fleetView
	staged  *stagedRollouts
	store   *store.Store // the rollout records
	now     func() time.Time
	rolling map[string]bool // deployments holding devices on an older template
}

func newPlacer(opts Options, f fleetView) *placer {
	st := opts.Store
	return &placer{
		fleet: f,
		staged: newStagedRollouts(opts.Logger, func(dep string) ([]schema.DeploymentRevision, error) {
			return st.DeploymentRevisions(context.Background(), dep)
		}),
		store:   st,
		now:     opts.Now,
		rolling: map[string]bool{},
	}
}

// place is the placer's placeFunc: Staged deployments by their rollout's
// plan, the others by PlaceDeployment.
func (p *placer) place(dep *schema.Deployment, targeted []*DeviceView) ([]schema.Pod, int) {
	if dep.Spec.Strategy.Type == schema.StrategyStaged {
		return p.staged.place(dep, targeted, p.now())
	}
	return PlaceDeployment(dep, targeted)
}

// all places every deployment on every device: views are the devices, pods
// their pods (unsorted).
func (p *placer) all() (views []DeviceView, pods map[string][]schema.Pod) {
	views = p.fleet.views()
	clear(p.rolling)
	pods = placeAll(views, p.fleet.deploymentsSorted(), p.place, func(dep string) { p.rolling[dep] = true })
	return views, pods
}

// some places what ch can have changed (placeIncrementally); ok is false
// when that is no cheaper than all, and nothing was placed.
func (p *placer) some(ch *changeSet) (placement, bool) {
	return placeIncrementally(p.fleet, p.place, increment{
		deps:    p.fleet.deploymentsSorted(),
		devices: ch.devices, changedDeps: ch.deployments, reported: ch.reported,
		oldSel: ch.oldSel, rolling: p.rolling,
		limit: max(minIncrementalLimit, p.fleet.size()/2),
	})
}

// hold records which deployments an incremental placement left holding
// devices back; call it once its rollout records are saved.
func (p *placer) hold(pl placement) {
	for dep, holding := range pl.holding {
		if holding {
			p.rolling[dep] = true
		} else {
			delete(p.rolling, dep)
		}
	}
}

// save stores the staged rollouts' records that the placement changed,
// before the desired states that follow from them: a hub killed in between
// resumes from the records. On failure the pass must write nothing else.
func (p *placer) save(ctx context.Context) error {
	p.staged.forget(p.fleet.deployment)
	return p.staged.flush(ctx, p.store)
}

// replace installs the rollout records read from the store.
func (p *placer) replace(recs map[string]*rolloutRecord) { p.staged.replace(recs) }

// deviceGone forgets what the rollouts saw of a deleted device.
func (p *placer) deviceGone(name string) { delete(p.staged.online, name) }

// nextRecheck is when a staged rollout's plan may change by time alone
// (zero: none).
func (p *placer) nextRecheck() time.Time { return p.staged.nextRecheck() }

// due returns the deployments whose staged rollout's plan may have changed
// by now, by time alone (a deadline, minReadySeconds, a pause).
func (p *placer) due(now time.Time) []string {
	var out []string
	for _, name := range p.staged.due(now) {
		if _, ok := p.fleet.deployment(name); ok {
			out = append(out, name)
		}
	}
	return out
}

// decorate adds a Staged deployment's rollout to its status (the status
// aggregator's rolloutStatus).
func (p *placer) decorate(name string, s schema.DeploymentStatus) schema.DeploymentStatus {
	return p.staged.decorate(name, s)
}
