package containerd

import (
	"testing"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// TestWithPullCredentials: a pod's credentials go before the runtime's
// own for the same host, the others are kept, and the configuration is
// not modified.
func TestWithPullCredentials(t *testing.T) {
	cfg := RegistryConfig{Auth: map[string]RegistryAuth{
		"docker.io":      {Username: "agent", Password: "a"},
		"registry.local": {Username: "agent", Password: "b"},
	}}
	got := withPullCredentials(cfg, map[string]runtime.Credential{"registry.local": {Username: "pod", Password: "p"}, "ghcr.io": {Username: "g", Password: "h"}})
	if got.Auth["registry.local"] != (RegistryAuth{Username: "pod", Password: "p"}) || got.Auth["docker.io"].Username != "agent" || got.Auth["ghcr.io"].Username != "g" {
		t.Errorf("merged %v", got.Auth)
	}
	if cfg.Auth["registry.local"].Username != "agent" || len(cfg.Auth) != 2 {
		t.Errorf("the runtime's configuration changed: %v", cfg.Auth)
	}
	if _, err := registryHostsWith(got, newRegistryClient()); err != nil {
		t.Fatal(err)
	}
}
