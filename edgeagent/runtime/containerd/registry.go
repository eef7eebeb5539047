package containerd

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/remotes/docker"

	"github.com/fleetmq/fleet/edgeagent/runtime"
)

// RegistryConfig says how pulls reach registries. Hosts are written as in
// image references: "docker.io", "registry.local:5000".
type RegistryConfig struct {
	// Mirrors lists, per registry host, mirrors tried in order before the
	// registry itself. A mirror is "host[:port]" (HTTPS unless listed in
	// PlainHTTP) or a URL "http://host:port" or "https://host/prefix".
	Mirrors map[string][]string `json:"mirrors,omitempty"`
	// PlainHTTP lists hosts spoken to over plain HTTP. Localhost
	// registries (localhost, 127.0.0.1, ::1) always are.
	PlainHTTP []string `json:"plainHTTP,omitempty"`
	// Auth holds credentials per host (registry or mirror). For Docker Hub
	// use "docker.io".
	Auth map[string]RegistryAuth `json:"auth,omitempty"`
}

// RegistryAuth is a username and password (or token) for one host.
type RegistryAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// registryHosts turns cfg into the host lookup used by the docker resolver.
func registryHosts(cfg RegistryConfig) (docker.RegistryHosts, error) {
	return registryHostsWith(cfg, newRegistryClient())
}

// withPullCredentials returns cfg with creds (runtime.WithPullCredentials)
// put before its own credentials for the same hosts.
func withPullCredentials(cfg RegistryConfig, creds map[string]runtime.Credential) RegistryConfig {
	auth := make(map[string]RegistryAuth, len(cfg.Auth)+len(creds))
	for h, a := range cfg.Auth {
		auth[h] = a
	}
	for h, c := range creds {
		auth[h] = RegistryAuth{Username: c.Username, Password: c.Password}
	}
	cfg.Auth = auth
	return cfg
}

func newRegistryClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          10,
		ExpectContinueTimeout: 5 * time.Second,
	}}
}

// registryHostsWith is registryHosts over an HTTP client of the caller's.
func registryHostsWith(cfg RegistryConfig, client *http.Client) (docker.RegistryHosts, error) {
	plainHTTP := func(host string) (bool, error) {
		if slices.Contains(cfg.PlainHTTP, host) {
			return true, nil
		}
		return docker.MatchLocalhost(host)
	}
	creds := func(host string) (string, string, error) {
		a, ok := cfg.Auth[host]
		if !ok && host == "registry-1.docker.io" {
			a = cfg.Auth["docker.io"]
		}
		return a.Username, a.Password, nil
	}
	authorizer := docker.NewDockerAuthorizer(
		docker.WithAuthClient(client),
		docker.WithAuthCreds(creds))
	base := docker.ConfigureDefaultRegistries(
		docker.WithClient(client),
		docker.WithAuthorizer(authorizer),
		docker.WithPlainHTTP(plainHTTP))

	mirrors := map[string][]docker.RegistryHost{}
	for registry, list := range cfg.Mirrors {
		for _, m := range list {
			h, err := mirrorHost(m, plainHTTP)
			if err != nil {
				return nil, fmt.Errorf("registry config: mirror %q of %s: %w", m, registry, err)
			}
			h.Client = client
			h.Authorizer = authorizer
			mirrors[registry] = append(mirrors[registry], h)
		}
	}

	return func(host string) ([]docker.RegistryHost, error) {
		own, err := base(host)
		if err != nil {
			return nil, err
		}
		return append(slices.Clone(mirrors[host]), own...), nil
	}, nil
}

// mirrorHost parses one mirror entry into a pull-only registry host.
func mirrorHost(m string, plainHTTP func(string) (bool, error)) (docker.RegistryHost, error) {
	h := docker.RegistryHost{
		Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve,
		Scheme:       "https",
		Path:         "/v2",
	}
	if strings.Contains(m, "://") {
		u, err := url.Parse(m)
		if err != nil {
			return h, err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return h, fmt.Errorf("scheme %q not http or https", u.Scheme)
		}
		if u.Host == "" {
			return h, fmt.Errorf("no host")
		}
		h.Scheme, h.Host = u.Scheme, u.Host
		if p := strings.TrimSuffix(u.Path, "/"); p != "" {
			h.Path = p
			if !strings.HasSuffix(p, "/v2") {
				h.Path = p + "/v2"
			}
		}
		return h, nil
	}
	if m == "" || strings.ContainsAny(m, "/?#") {
		return h, fmt.Errorf("want host[:port] or a URL")
	}
	h.Host = m
	plain, err := plainHTTP(m)
	if err != nil {
		return h, err
	}
	if plain {
		h.Scheme = "http"
	}
	return h, nil
}
