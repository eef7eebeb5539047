package metrics

import (
	"slices"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// TestFleetCollector: the per-device, per-deployment and certificate
// series, as the alert rules and the Grafana dashboard read them.
func TestFleetCollector(t *testing.T) {
	seen := time.Unix(1_700_000_000, 500_000_000)
	notAfter := time.Unix(1_800_000_000, 0)
	m := New(Gauges{
		Presences: func() []fleetmodel.DevicePresence {
			return []fleetmodel.DevicePresence{{Name: "pi-1", Online: true, Converged: true, LastSeen: seen}, {Name: "pi-2"}}
		},
		Deployments: func() []fleetmodel.NamedDeploymentStatus {
			return []fleetmodel.NamedDeploymentStatus{
				{Name: "web", Status: schema.DeploymentStatus{Targeted: 3, Updated: 2, Ready: 1, Pending: 1, Failed: 1, Revision: 4,
					Rollout: &schema.RolloutStatus{Phase: schema.RolloutStopped, Step: 2, Steps: 3}}},
				{Name: "plain", Status: schema.DeploymentStatus{Targeted: 1, Updated: 1, Ready: 1}},
			}
		},
		Certificates: func() []CertificateExpiry {
			return []CertificateExpiry{{Certificate: CertServer, NotAfter: notAfter}, {Certificate: CertCA}}
		},
	})
	check := func(prefix string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if got := series(t, m, prefix); !slices.Equal(got, want) {
			t.Errorf("%s series:\n got %q\nwant %q", prefix, got, want)
		}
	}
	check("fleet_device_online", `fleet_device_online{device="pi-1"} 1`, `fleet_device_online{device="pi-2"} 0`)
	check("fleet_device_converged", `fleet_device_converged{device="pi-1"} 1`, `fleet_device_converged{device="pi-2"} 0`)
	check("fleet_device_last_seen", `fleet_device_last_seen_timestamp_seconds{device="pi-1"} 1.7000000005e+09`)
	check("fleet_deployment_devices",
		`fleet_deployment_devices{deployment="web",state="targeted"} 3`, `fleet_deployment_devices{deployment="web",state="updated"} 2`,
		`fleet_deployment_devices{deployment="web",state="ready"} 1`, `fleet_deployment_devices{deployment="web",state="pending"} 1`,
		`fleet_deployment_devices{deployment="web",state="failed"} 1`,
		`fleet_deployment_devices{deployment="plain",state="targeted"} 1`, `fleet_deployment_devices{deployment="plain",state="updated"} 1`,
		`fleet_deployment_devices{deployment="plain",state="ready"} 1`, `fleet_deployment_devices{deployment="plain",state="pending"} 0`,
		`fleet_deployment_devices{deployment="plain",state="failed"} 0`)
	// Only a Staged deployment has a rollout: every phase, one of them 1.
	check("fleet_deployment_rollout_phase",
		`fleet_deployment_rollout_phase{deployment="web",phase="Progressing"} 0`, `fleet_deployment_rollout_phase{deployment="web",phase="Paused"} 0`,
		`fleet_deployment_rollout_phase{deployment="web",phase="Complete"} 0`, `fleet_deployment_rollout_phase{deployment="web",phase="Stopped"} 1`,
		`fleet_deployment_rollout_phase{deployment="web",phase="RolledBack"} 0`)
	check("fleet_deployment_rollout_rolled_back", `fleet_deployment_rollout_rolled_back{deployment="web"} 0`)
	check("fleet_deployment_rollout_step", `fleet_deployment_rollout_step{deployment="web"} 2`, `fleet_deployment_rollout_steps{deployment="web"} 3`)
	check("fleet_deployment_revision", `fleet_deployment_revision{deployment="plain"} 0`, `fleet_deployment_revision{deployment="web"} 4`)
	// A certificate whose expiry is unknown is not exported as 1970.
	check("fleet_hub_certificate_expiry", `fleet_hub_certificate_expiry_timestamp_seconds{certificate="server"} 1.8e+09`)
}

// TestFleetCollectorWithoutSources: a hub part that gives no source
// exports none of those series, and the scrape still works.
func TestFleetCollectorWithoutSources(t *testing.T) {
	m := New(Gauges{})
	for _, p := range []string{"fleet_device_online", "fleet_device_converged", "fleet_deployment_devices", "fleet_deployment_rollout_", "fleet_hub_certificate_"} {
		if got := series(t, m, p); len(got) != 0 {
			t.Errorf("%s: %q, want none", p, got)
		}
	}
}

// TestRolledBackRollout: the hub's automatic rollback ends in phase
// Complete, on a new revision that names the failed one in
// rolledBackFrom: fleet_deployment_rollout_rolled_back says so, since no
// phase does.
func TestRolledBackRollout(t *testing.T) {
	m := New(Gauges{Deployments: func() []fleetmodel.NamedDeploymentStatus {
		return []fleetmodel.NamedDeploymentStatus{{Name: "undone", Status: schema.DeploymentStatus{Revision: 4, Rollout: &schema.RolloutStatus{
			Phase: schema.RolloutComplete, Step: 2, Steps: 2, RolledBackFrom: &schema.AutoRollback{Revision: 3, Reason: "image pull"}}}}}
	}})
	want := []string{`fleet_deployment_rollout_rolled_back{deployment="undone"} 1`}
	if got := series(t, m, "fleet_deployment_rollout_rolled_back"); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
