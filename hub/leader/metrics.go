package leader

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the leadership's metrics.
type Metrics struct {
	// Leader is fleet_hub_leader: 1 while this hub leads, 0 otherwise.
	Leader prometheus.Gauge
	// Changes is fleet_hub_leader_changes_total: changes of the fleet's
	// leader this hub has seen (this hub's own terms included).
	Changes prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_hub_leader",
			Help: "1 while this hub is the fleet's leader (runs the controller and rollouts, publishes desired states, its embedded broker accepts devices), 0 on a standby.",
		}),
		Changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_hub_leader_changes_total",
			Help: "Changes of the fleet's leader hub this hub has seen, its own elections included.",
		}),
	}
	for _, c := range []prometheus.Collector{m.Leader, m.Changes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register leader metrics: %w", err)
		}
	}
	return m, nil
}
