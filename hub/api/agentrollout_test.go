package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func agentRolloutYAML(version, selector string) string {
	return "apiVersion: fleet/v1\nkind: AgentRollout\nmetadata:\n  name: fleet\nspec:\n  version: " + version +
		"\n  image: registry.example.com/fleet/agent:" + version + "\n  selector:\n    matchLabels:\n      site: " + selector + "\n"
}

// TestAgentRolloutAdmission: an unknown version (newer than the hub), a
// malformed one, one below the version-skew policy, and a selector that
// matches no device are each a 400 naming the field, on create, update
// and apply alike, and nothing is stored; a good one is stored.
func TestAgentRolloutAdmission(t *testing.T) {
	h := newTestHub(t, Options{HubVersion: "v1.4.0"})
	if r := h.admin(t, "POST", "/v1/devices", deviceYAML("pi-1", "site", "north")); r.Code != http.StatusCreated {
		t.Fatalf("create device: %d %s", r.Code, r.Body)
	}
	bad := []struct {
		name, body, want string
	}{
		{"unknown version", agentRolloutYAML("v1.5.0", "north"), "spec.version: unknown version v1.5.0"},
		{"malformed version", agentRolloutYAML("latest", "north"), `want a release such as v1.4.0`},
		{"below the skew policy", agentRolloutYAML("v1.1.0", "north"), "spec.version: v1.1.0 is below the version-skew policy"},
		{"selector matching nothing", agentRolloutYAML("v1.4.0", "south"), "spec.selector: matches no device"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			for _, req := range []struct{ method, path string }{{"POST", "/v1/agentrollouts"}, {"POST", "/v1/apply"}} {
				r := h.admin(t, req.method, req.path, tt.body)
				if r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), tt.want) {
					t.Errorf("%s %s: %d %s, want 400 with %q", req.method, req.path, r.Code, r.Body, tt.want)
				}
			}
			if objs, _, err := h.Store.List(t.Context(), schema.KindAgentRollout, nil); err != nil || len(objs) != 0 {
				t.Errorf("stored after a refusal: %d objects, %v", len(objs), err)
			}
		})
	}
	if r := h.admin(t, "POST", "/v1/agentrollouts", agentRolloutYAML("v1.3.0", "north")); r.Code != http.StatusCreated {
		t.Fatalf("good agentrollout: %d %s", r.Code, r.Body)
	}
	// An update is held to the same rules.
	if r := h.admin(t, "PUT", "/v1/agentrollouts/fleet", agentRolloutYAML("v1.0.0", "north")); r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), "version-skew policy") {
		t.Errorf("update below the policy: %d %s, want 400", r.Code, r.Body)
	}
	// A monitor credential may not read them.
	if r := h.do(t, "GET", "/v1/agentrollouts", h.Monitor, nil); r.Code != http.StatusForbidden {
		t.Errorf("monitor GET /v1/agentrollouts: %d, want 403", r.Code)
	}
	// Status is the hub's: what a client sends is not stored.
	withStatus := agentRolloutYAML("v1.3.0", "north") + "status:\n  lastGoodVersion: v1.0.0\n"
	if r := h.admin(t, "PUT", "/v1/agentrollouts/fleet", withStatus); r.Code != http.StatusOK || strings.Contains(string(r.Body), "v1.0.0") {
		t.Errorf("update with a status: %d %s, want 200 without the status", r.Code, r.Body)
	}
	// A device created by the same apply counts.
	both := deviceYAML("pi-2", "site", "south") + "---\n" + strings.Replace(agentRolloutYAML("v1.4.0", "south"), "name: fleet", "name: south", 1)
	if r := h.admin(t, "POST", "/v1/apply", both); r.Code != http.StatusOK {
		t.Errorf("apply of a device and its agentrollout: %d %s", r.Code, r.Body)
	}
}
