package fleetmodel

import (
	"cmp"
	"slices"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// DevicePresence is one registered device's presence and convergence as
// the per-device metrics export them.
type DevicePresence struct {
	Name string
	// Online: connected, heard from and not stale (as OnlineCount).
	Online bool
	// Converged: its report shows its latest desired state (as
	// ConvergedCount).
	Converged bool
	// LastSeen is when it was last heard from (zero: never).
	LastSeen time.Time
}

// DevicePresences returns every registered device's presence, by name.
// It looks at every device: it is for scrapes, not for hot paths.
func (m *Model) DevicePresences() []DevicePresence {
	now := m.now()
	m.mu.RLock()
	out := make([]DevicePresence, 0, len(m.devices))
	for name, d := range m.devices {
		p := DevicePresence{Name: name, Converged: m.counts.devices[name].converged}
		if r := m.usableLocked(name, d.UID); r != nil {
			p.Online, p.LastSeen = m.freshLocked(r, now), r.LastSeen
		}
		out = append(out, p)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b DevicePresence) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// NamedDeploymentStatus is a deployment's name and aggregated status.
type NamedDeploymentStatus struct {
	Name   string
	Status schema.DeploymentStatus
}

// DeploymentStatuses returns the aggregated status of every deployment
// as the controller last counted it, by name. The statuses share their
// Rollout and Conditions with the model: they must not be modified.
func (m *Model) DeploymentStatuses() []NamedDeploymentStatus {
	m.mu.RLock()
	out := make([]NamedDeploymentStatus, 0, len(m.deployments))
	for name, s := range m.deployments {
		out = append(out, NamedDeploymentStatus{Name: name, Status: s})
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b NamedDeploymentStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
