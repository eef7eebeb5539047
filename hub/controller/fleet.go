package controller

import (
	"iter"
	"maps"
	"slices"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// fleetView is what the stages of a pass read of the fleet: the
// registered devices, their desired states and reports, the deployments
// and the label index. Only the watch (load.go) changes the fleet; a stage
// sees it through this view and cannot.
type fleetView interface {
	device(name string) (fleetmodel.Device, bool)
	desired(name string) *schema.DesiredState
	// desiredStates are every device's desired state (deleted devices'
	// included, until they are cleared).
	desiredStates() iter.Seq2[string, *schema.DesiredState]
	deviceState(name, uid string) (*schema.DeviceStatus, bool)
	// size is how many devices are registered.
	size() int
	// selectNames returns, sorted, the devices sel matches.
	selectNames(sel schema.LabelSelector) []string
	// views are every device, as placement sees it, in name order.
	views() []DeviceView
	deployment(name string) (*schema.Deployment, bool)
	// deploymentsSorted are every deployment, sorted by name; the
	// caller must not change them.
	deploymentsSorted() []schema.Deployment
}

var _ fleetView = (*fleet)(nil)

// fleet is the controller's copy of the fleet as the store has it: the
// devices (in the fleet model, which the controller alone writes), the
// deployments, and the indexes over them. The watch keeps it current
// (load.go); it belongs to the Run goroutine.
type fleet struct {
	model       *fleetmodel.Writer
	status      StatusSource
	deployments map[string]*schema.Deployment
	index       labelIndex          // devices by label
	sortedNames []string            // device names, sorted; nil when the set changed
	sortedDeps  []schema.Deployment // deployments sorted by name; nil when changed
}

func newFleet(model *fleetmodel.Writer, status StatusSource) *fleet {
	return &fleet{model: model, status: status, deployments: map[string]*schema.Deployment{}, index: labelIndex{}}
}

func (f *fleet) device(name string) (fleetmodel.Device, bool) { return f.model.Device(name) }

func (f *fleet) desired(name string) *schema.DesiredState { return f.model.Desired(name) }

func (f *fleet) desiredStates() iter.Seq2[string, *schema.DesiredState] {
	return f.model.DesiredStates()
}

func (f *fleet) deviceState(name, uid string) (*schema.DeviceStatus, bool) {
	return f.status.DeviceState(name, uid)
}

func (f *fleet) size() int { return f.model.DeviceCount() }

func (f *fleet) deployment(name string) (*schema.Deployment, bool) {
	d, ok := f.deployments[name]
	return d, ok
}

// names returns the device names, sorted.
func (f *fleet) names() []string {
	if f.sortedNames == nil {
		f.sortedNames = slices.Sorted(f.model.DeviceNames())
	}
	return f.sortedNames
}

// views builds the computation's input for every device, in name order.
func (f *fleet) views() []DeviceView {
	names := f.names()
	views := make([]DeviceView, len(names))
	for i, name := range names {
		d, _ := f.model.Device(name)
		v := DeviceView{Name: name, Labels: d.Labels, Prev: f.model.Desired(name)}
		v.Status, v.Online = f.status.DeviceState(name, d.UID)
		views[i] = v
	}
	return views
}

func (f *fleet) deploymentsSorted() []schema.Deployment {
	if f.sortedDeps == nil {
		names := slices.Sorted(maps.Keys(f.deployments))
		f.sortedDeps = make([]schema.Deployment, len(names))
		for i, n := range names {
			f.sortedDeps[i] = *f.deployments[n]
		}
	}
	return f.sortedDeps
}

// labels returns a registered device's labels.
func (f *fleet) labels(name string) map[string]string {
	d, _ := f.model.Device(name)
	return d.Labels
}
