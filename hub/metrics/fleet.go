package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// Deployment device states, the values of the state label of
// fleet_deployment_devices (the counts of schema.DeploymentStatus).
const (
	StateTargeted = "targeted"
	StateUpdated  = "updated"
	StateReady    = "ready"
	StatePending  = "pending"
	StateFailed   = "failed"
)

// RolloutPhases are the values of the phase label of
// fleet_deployment_rollout_phase: every one is exported for a Staged
// deployment, 1 for the current phase and 0 for the others, so that a
// rule can ask for `== 1` without a missing series meaning anything.
var RolloutPhases = []schema.RolloutPhase{
	schema.RolloutProgressing, schema.RolloutPaused, schema.RolloutComplete,
	schema.RolloutStopped, schema.RolloutRolledBack,
}

// Certificate names, the values of the certificate label of
// fleet_hub_certificate_expiry_timestamp_seconds.
const (
	CertServer   = "server"
	CertCA       = "ca"
	CertClientCA = "client-ca"
)

// CertificateExpiry is when one of the hub's certificates expires.
type CertificateExpiry struct {
	// Certificate is CertServer, CertCA or CertClientCA.
	Certificate string
	NotAfter    time.Time
}

// fleetCollector exports, at scrape time, the per-device presence, the
// per-deployment counts and rollout state, and the expiry of the hub's
// certificates: what alert rules need per object (the fleet_devices*
// gauges only count). Nothing is registered per object, so a deleted
// device or deployment takes its series with it.
type fleetCollector struct {
	g Gauges

	online, converged, lastSeen  *prometheus.Desc
	depDevices, phase, step      *prometheus.Desc
	steps, revision, certExpires *prometheus.Desc
	rolledBack                   *prometheus.Desc
}

func newFleetCollector(g Gauges) *fleetCollector {
	dev, dep := []string{"device"}, []string{"deployment"}
	return &fleetCollector{
		g:         g,
		online:    prometheus.NewDesc("fleet_device_online", "1 if the device is online (connected, and not stale when staleness is on), else 0; one series per registered device.", dev, nil),
		converged: prometheus.NewDesc("fleet_device_converged", "1 if the device's report matches its latest desired state, else 0; one series per registered device.", dev, nil),
		lastSeen:  prometheus.NewDesc("fleet_device_last_seen_timestamp_seconds", "When the hub last heard from the device (Unix seconds); absent for a device never heard from.", dev, nil),
		depDevices: prometheus.NewDesc("fleet_deployment_devices",
			"A deployment's devices by state: targeted (matched by its selector), updated (on the current template), ready, pending, failed (online, updated, pod failed).", []string{"deployment", "state"}, nil),
		phase: prometheus.NewDesc("fleet_deployment_rollout_phase",
			"1 for the current phase of a Staged deployment's rollout (Progressing, Paused, Complete, Stopped, RolledBack), 0 for the others.", []string{"deployment", "phase"}, nil),
		step:  prometheus.NewDesc("fleet_deployment_rollout_step", "The current step (from 1) of a Staged deployment's rollout.", dep, nil),
		steps: prometheus.NewDesc("fleet_deployment_rollout_steps", "How many steps a Staged deployment's strategy has.", dep, nil),
		rolledBack: prometheus.NewDesc("fleet_deployment_rollout_rolled_back",
			"1 if a Staged deployment's current revision is the hub's automatic rollback of a revision that failed (status.rollout.rolledBackFrom), until a new revision is rolled out; else 0.", dep, nil),
		revision:    prometheus.NewDesc("fleet_deployment_revision", "The number of a deployment's current revision (0 until the hub has recorded one).", dep, nil),
		certExpires: prometheus.NewDesc("fleet_hub_certificate_expiry_timestamp_seconds", "When one of the hub's certificates expires (Unix seconds): server (its TLS listeners'), ca (its own CA), client-ca (the CA of devices' client certificates).", []string{"certificate"}, nil),
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.online, c.converged, c.lastSeen, c.depDevices, c.phase, c.step, c.steps, c.revision, c.certExpires, c.rolledBack} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.g.Presences != nil {
		for _, p := range c.g.Presences() {
			gauge(c.online, bool01(p.Online), p.Name)
			gauge(c.converged, bool01(p.Converged), p.Name)
			if !p.LastSeen.IsZero() {
				gauge(c.lastSeen, unixSeconds(p.LastSeen), p.Name)
			}
		}
	}
	if c.g.Deployments != nil {
		for _, d := range c.g.Deployments() {
			c.collectDeployment(gauge, d)
		}
	}
	if c.g.Certificates != nil {
		for _, e := range c.g.Certificates() {
			if !e.NotAfter.IsZero() {
				gauge(c.certExpires, unixSeconds(e.NotAfter), e.Certificate)
			}
		}
	}
}

func (c *fleetCollector) collectDeployment(gauge func(*prometheus.Desc, float64, ...string), d fleetmodel.NamedDeploymentStatus) {
	s := d.Status
	for _, n := range []struct {
		state string
		v     int
	}{{StateTargeted, s.Targeted}, {StateUpdated, s.Updated}, {StateReady, s.Ready}, {StatePending, s.Pending}, {StateFailed, s.Failed}} {
		gauge(c.depDevices, float64(n.v), d.Name, n.state)
	}
	gauge(c.revision, float64(s.Revision), d.Name)
	if r := s.Rollout; r != nil {
		for _, p := range RolloutPhases {
			gauge(c.phase, bool01(r.Phase == p), d.Name, string(p))
		}
		gauge(c.step, float64(r.Step), d.Name)
		gauge(c.steps, float64(r.Steps), d.Name)
		gauge(c.rolledBack, bool01(r.RolledBackFrom != nil), d.Name)
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
