package containerd

import (
	"fmt"
	"testing"

	"github.com/containerd/containerd/remotes/docker"
)

func TestRegistryHosts(t *testing.T) {
	hosts, err := registryHosts(RegistryConfig{
		Mirrors: map[string][]string{
			"docker.io": {"mirror.local:5000", "https://cache.example.com/proxy/"},
			"ghcr.io":   {"http://10.0.0.9:5000"},
		},
		PlainHTTP: []string{"mirror.local:5000", "registry.lan:5000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		want []string // scheme://host+path, in order
	}{
		{"docker.io", []string{"http://mirror.local:5000/v2", "https://cache.example.com/proxy/v2", "https://registry-1.docker.io/v2"}},
		{"ghcr.io", []string{"http://10.0.0.9:5000/v2", "https://ghcr.io/v2"}},
		{"registry.lan:5000", []string{"http://registry.lan:5000/v2"}},
		{"localhost:5000", []string{"http://localhost:5000/v2"}},
		{"127.0.0.1:1", []string{"http://127.0.0.1:1/v2"}},
		{"quay.io", []string{"https://quay.io/v2"}},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			got, err := hosts(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			var urls []string
			for i, h := range got {
				urls = append(urls, h.Scheme+"://"+h.Host+h.Path)
				if h.Client == nil || h.Authorizer == nil {
					t.Errorf("host %d has no client or authorizer", i)
				}
				mirror := i < len(got)-1
				if mirror && h.Capabilities.Has(docker.HostCapabilityPush) {
					t.Errorf("mirror %s may be pushed to", h.Host)
				}
				if !h.Capabilities.Has(docker.HostCapabilityPull | docker.HostCapabilityResolve) {
					t.Errorf("host %s cannot pull", h.Host)
				}
			}
			if fmt.Sprint(urls) != fmt.Sprint(tc.want) {
				t.Errorf("hosts %v, want %v", urls, tc.want)
			}
		})
	}
}

func TestRegistryHostsBadMirror(t *testing.T) {
	for _, m := range []string{"", "ftp://x", "http://", "host/path"} {
		if _, err := registryHosts(RegistryConfig{Mirrors: map[string][]string{"docker.io": {m}}}); err == nil {
			t.Errorf("mirror %q accepted", m)
		}
	}
}
