package fleetmodel

import (
	"maps"

	"github.com/fleetmq/fleet/schema"
)

// DeploymentStatuses returns a copy of every deployment's aggregated
// status, as the controller last counted it, by name.
func (m *Model) DeploymentStatuses() map[string]schema.DeploymentStatus {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.deployments)
}
