package test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestVersionStamped: the version that `make build` stamps is what every
// binary reports: its version command, the hub's banner and GET /v1/info.
// (A hub that ignored the stamp said "dev" in all three.)
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"fleet", "fleet-hub", "fleet-agent"} {
		bin, err := BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), name+" "+BinaryVersion+" ") {
			t.Errorf("%s version = %q, %v; want it to start with %q", name, out, err, name+" "+BinaryVersion+" ")
		}
	}
	h := StartHub(t, HubOptions{})
	code, body := h.Do(t, http.MethodGet, "/v1/info", nil)
	var info schema.HubInfo
	if err := json.Unmarshal(body, &info); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/info: %d %s: %v", code, body, err)
	}
	if info.Version != BinaryVersion {
		t.Errorf("GET /v1/info version %q, want %q", info.Version, BinaryVersion)
	}
	if banner := "fleet-hub " + BinaryVersion + ": API on"; !strings.Contains(h.Logs(), banner) {
		t.Errorf("the hub's banner lacks %q:\n%s", banner, h.Logs())
	}
}
