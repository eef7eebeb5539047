package controller

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestControllerReportsHostPortConflicts: two deployments that declare the
// same port on a shared device both carry a PortConflict condition naming
// the other and the device; it clears when the device stops being shared.
func TestControllerReportsHostPortConflicts(t *testing.T) {
	st := openStore(t, t.TempDir())
	c, _ := runController(t, st, newRecorder(), nil)
	web := depl("web", "nginx:1", "role", "kiosk")
	web.Spec.Template.Spec.Containers[0].Ports = []schema.ContainerPort{{ContainerPort: 8080}}
	api := depl("api", "api:1", "site", "north")
	api.Spec.Template.Spec.Containers[0].Ports = []schema.ContainerPort{{ContainerPort: 8080, Protocol: "TCP"}, {ContainerPort: 53, Protocol: "UDP"}}
	dns := depl("dns", "dns:1", "site", "north")
	dns.Spec.Template.Spec.Containers[0].Ports = []schema.ContainerPort{{ContainerPort: 53, Protocol: "TCP"}} // another protocol
	apply(t, st, dev("pi-1", "role", "kiosk", "site", "north"), dev("pi-2", "role", "kiosk", "site", "south"), web, api, dns)

	cond := func(dep string) string {
		s, ok := c.model.Model().DeploymentStatus(dep)
		if !ok {
			return "<no status>"
		}
		for _, cd := range s.Conditions {
			if cd.Type == ConditionPortConflict {
				return cd.Message
			}
		}
		return ""
	}
	eventually(t, "both report the conflict", func() bool {
		return strings.Contains(cond("web"), `port 8080/TCP also claimed by deployment "api" on 1 device (pi-1)`) &&
			strings.Contains(cond("api"), `port 8080/TCP also claimed by deployment "web" on 1 device (pi-1)`)
	})
	ev := func(device string) bool {
		for _, e := range c.model.Model().Events(device, "") {
			if e.Type == schema.EventWarning && e.Reason == ConditionPortConflict &&
				strings.Contains(e.Message, `port 8080/TCP claimed by deployments "api" and "web"`) {
				return true
			}
		}
		return false
	}
	if !ev("pi-1") || ev("pi-2") {
		t.Errorf("PortConflict events: pi-1 %v (want true), pi-2 %v (want false)", ev("pi-1"), ev("pi-2"))
	}
	if m := cond("dns"); m != "" {
		t.Errorf("dns (53/TCP, not 53/UDP) reports a conflict: %s", m)
	}
	// pi-1 moves south: nothing is shared any more.
	apply(t, st, dev("pi-1", "role", "kiosk", "site", "south"))
	eventually(t, "the conflict clears", func() bool { return cond("web") == "" && cond("api") == "" })
}
