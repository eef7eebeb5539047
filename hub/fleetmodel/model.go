package fleetmodel

import (
	"cmp"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// DefaultStaleAfter is Options.StaleAfter's default: three heartbeats of
// an agent run with --status-heartbeat 30s. (The hub itself runs with
// staleness off by default: agents do not heartbeat, and presence comes
// from the MQTT session, its keepalive and its last will.)
const DefaultStaleAfter = 90 * time.Second

// Options configure a Model. The zero value works.
type Options struct {
	// StaleAfter: a device not heard from for this long is stale (and
	// counts as offline); 0: DefaultStaleAfter; negative: never stale, a
	// device is online while its online topic says so (the broker's
	// keepalive and the device's last will keep that true).
	StaleAfter time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Device is what the model keeps of a registered Device object.
type Device struct {
	UID string
	// Labels must not be modified.
	Labels map[string]string
}

// DeviceRef names a registered device.
type DeviceRef struct{ Name, UID string }

// Model is the fleet's in-memory model; see the package comment for who
// writes what. Create it with New.
type Model struct {
	staleAfter time.Duration
	now        func() time.Time
	epoch      time.Time // origin of the freshness buckets

	mu          sync.RWMutex
	devices     map[string]Device               // the Writer's
	desired     map[string]*schema.DesiredState // the Writer's
	deployments map[string]schema.DeploymentStatus
	reports     map[string]*report // the ingest's
	counts      counts
	eventsKeep  int // the ring size the ingest keeps events in
}

// New returns an empty model.
func New(opts Options) *Model {
	switch {
	case opts.StaleAfter == 0:
		opts.StaleAfter = DefaultStaleAfter
	case opts.StaleAfter < 0:
		opts.StaleAfter = 0 // off
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Model{
		staleAfter:  opts.StaleAfter,
		now:         opts.Now,
		epoch:       opts.Now(),
		devices:     map[string]Device{},
		desired:     map[string]*schema.DesiredState{},
		deployments: map[string]schema.DeploymentStatus{},
		reports:     map[string]*report{},
		counts:      newCounts(),
	}
}

// Now is the model's clock.
func (m *Model) Now() time.Time { return m.now() }

// StaleAfter is how long a device may stay silent before it is stale (0:
// never; presence comes from the session alone).
func (m *Model) StaleAfter() time.Duration { return m.staleAfter }

// ---- reads, from any goroutine --------------------------------------------------

// Device returns the uid and labels of a registered device. The labels
// map must not be modified.
func (m *Model) Device(name string) (uid string, labels map[string]string, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	d, ok := m.devices[name]
	return d.UID, d.Labels, ok
}

// Devices returns the registered devices whose labels satisfy sel (all of
// them for an empty sel), by name.
func (m *Model) Devices(sel schema.LabelSelector) []DeviceRef {
	m.mu.RLock()
	out := make([]DeviceRef, 0, len(m.devices))
	for name, d := range m.devices {
		if sel.Matches(d.Labels) {
			out = append(out, DeviceRef{Name: name, UID: d.UID})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b DeviceRef) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Desired returns the device's current desired state (nil if none). It
// must not be modified.
func (m *Model) Desired(name string) *schema.DesiredState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.desired[name]
}

// DeploymentStatus returns the aggregated status of a deployment as the
// controller last counted it.
func (m *Model) DeploymentStatus(name string) (schema.DeploymentStatus, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.deployments[name]
	return s, ok
}

// DeviceCount returns how many devices are registered.
func (m *Model) DeviceCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.devices)
}

// ---- the controller's side ------------------------------------------------------

// Writer is the controller's handle on the model: the one writer of
// devices, desired states and deployment statuses. Use it from one
// goroutine only: its reads take no lock, because nothing else writes what
// they read; its writes take the model's lock, for the other readers.
type Writer struct{ m *Model }

// Writer returns the model's writer; hand it to one part (the controller).
func (m *Model) Writer() *Writer { return &Writer{m: m} }

// Model is the model the writer writes.
func (w *Writer) Model() *Model { return w.m }

// Device returns a registered device.
func (w *Writer) Device(name string) (Device, bool) {
	d, ok := w.m.devices[name]
	return d, ok
}

// Desired returns the device's desired state (nil if none).
func (w *Writer) Desired(name string) *schema.DesiredState { return w.m.desired[name] }

// DeviceCount returns how many devices are registered.
func (w *Writer) DeviceCount() int { return len(w.m.devices) }

// DeviceNames yields the registered devices' names, in no order.
func (w *Writer) DeviceNames() iter.Seq[string] { return maps.Keys(w.m.devices) }

// DesiredStates yields every desired state, in no order; the device may
// be gone already (its removal not yet committed).
func (w *Writer) DesiredStates() iter.Seq2[string, *schema.DesiredState] {
	return maps.All(w.m.desired)
}

// Replace sets the registered devices and, unless desired is nil, the
// desired states, as loaded from the store. The model keeps the maps.
func (w *Writer) Replace(devices map[string]Device, desired map[string]*schema.DesiredState) {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices = devices
	if desired != nil {
		m.desired = desired
	}
	m.recountAllLocked()
}

// PutDevice registers a device or changes its uid or labels.
func (w *Writer) PutDevice(name string, d Device) {
	m := w.m
	m.mu.Lock()
	m.devices[name] = d
	m.recountLocked(name)
	m.mu.Unlock()
}

// DeleteDevice unregisters a device; its desired state stays until
// SetDesired removes it.
func (w *Writer) DeleteDevice(name string) {
	m := w.m
	m.mu.Lock()
	delete(m.devices, name)
	m.recountLocked(name)
	m.mu.Unlock()
}

// SetDesired sets the desired states of n devices under one lock: each
// call of at(i) names a device and its new desired state. A nil desired
// state removes the device's, and its last report with it: the device is
// gone.
func (w *Writer) SetDesired(n int, at func(i int) (string, *schema.DesiredState)) {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range n {
		name, ds := at(i)
		if ds == nil {
			delete(m.desired, name)
			delete(m.reports, name)
		} else {
			m.desired[name] = ds
		}
		m.recountLocked(name)
	}
}

// SetDeploymentStatus records a deployment's aggregated status.
func (w *Writer) SetDeploymentStatus(name string, s schema.DeploymentStatus) {
	w.m.mu.Lock()
	w.m.deployments[name] = s
	w.m.mu.Unlock()
}

// DeleteDeploymentStatus drops the status of a deleted deployment.
func (w *Writer) DeleteDeploymentStatus(name string) {
	w.m.mu.Lock()
	delete(w.m.deployments, name)
	w.m.mu.Unlock()
}
