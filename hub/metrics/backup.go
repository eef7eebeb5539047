package metrics

import "github.com/prometheus/client_golang/prometheus"

// Backup are the metrics of the hub's scheduled backups (hub/backup).
type Backup struct {
	// LastSuccess is the Unix time of the last backup written.
	LastSuccess prometheus.Gauge
	// Failures counts scheduled backups that failed.
	Failures prometheus.Counter
	// Duration is how long the last backup took.
	Duration prometheus.Gauge
	// Size is the size of the last backup written.
	Size prometheus.Gauge
}

func newBackup(reg *prometheus.Registry) Backup {
	b := Backup{
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_hub_backup_last_success_timestamp_seconds",
			Help: "Unix time of the last scheduled backup written (0: none since the hub started).",
		}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_hub_backup_failures_total",
			Help: "Scheduled backups that failed.",
		}),
		Duration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_hub_backup_duration_seconds",
			Help: "How long the last scheduled backup took.",
		}),
		Size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_hub_backup_size_bytes",
			Help: "Size of the last scheduled backup written.",
		}),
	}
	reg.MustRegister(b.LastSuccess, b.Failures, b.Duration, b.Size)
	return b
}
