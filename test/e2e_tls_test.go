package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The CLI pins the hub's CA (fleet config set-context
// --certificate-authority, or admin.conf's certificate-authority-data)
// and refuses a hub whose certificate does not chain to it: here the
// context names hub B's address with hub A's CA, as when someone in the
// middle answers for the hub with a certificate of their own.
func TestE2ETLSCLIRefusesHubOfAnotherCA(t *testing.T) {
	t.Parallel()
	hubA, hubB := StartHub(t, HubOptions{}), StartHub(t, HubOptions{})
	if hubA.CAFile == "" || hubB.CAFile == "" || hubA.CAHash == hubB.CAHash || !strings.HasPrefix(hubA.HTTPSURL, "https://") {
		t.Fatalf("hubs without their own CAs: %+v %+v", hubA, hubB)
	}
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cli := &fleetCLI{t: t, bin: bin, dir: dir, env: []string{"FLEET_CONFIG=" + filepath.Join(dir, "config")}}
	tokA, tokB := cli.write("a.token", hubA.Token), cli.write("b.token", hubB.Token)

	cli.ok("config", "set-context", "a", "--hub", hubA.HTTPSURL, "--token-file", tokA, "--certificate-authority", hubA.CAFile)
	if out := cli.ok("--context", "a", "get", "devices"); !strings.Contains(out, "No resources") && !strings.Contains(out, "NAME") {
		t.Logf("get devices through HTTPS: %q", out)
	}
	cli.ok("--context", "a", "device", "add", "pi-a")

	cli.ok("config", "set-context", "b", "--hub", hubB.HTTPSURL, "--token-file", tokB, "--certificate-authority", hubA.CAFile)
	r := cli.run("", "--context", "b", "get", "devices")
	if r.code == 0 || !strings.Contains(r.stderr, "not signed by the pinned certificate authority") || !strings.Contains(r.stderr, "--certificate-authority") {
		t.Fatalf("a hub of another CA: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// With its own CA pinned, hub B is trusted.
	cli.ok("config", "set-context", "b", "--certificate-authority", hubB.CAFile)
	cli.ok("--context", "b", "get", "devices")

	// admin.conf carries the CA: imported as a context with the HTTPS
	// address, it is trusted without --certificate-authority.
	cli.ok("config", "import", "a2", "--from", hubA.AdminConfig(), "--hub", hubA.HTTPSURL)
	if out := cli.ok("--context", "a2", "get", "devices"); !strings.Contains(out, "pi-a") {
		t.Errorf("imported context: %q", out)
	}
}

// On a non-loopback address only HTTPS answers: plain HTTP is bound to
// loopback (connection refused elsewhere), a plain request to the HTTPS
// port gets no API, and a hub told to serve plain HTTP on every interface
// refuses to start without --insecure-plaintext.
func TestE2ETLSNoPlainHTTPOffLoopback(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	h := StartHub(t, HubOptions{Args: []string{"--https-addr", "0.0.0.0:0"}})
	httpsPort := portOf(t, h.HTTPSURL)
	plainPort := portOf(t, h.URL)

	// Plain HTTP on the machine's address: nothing listens.
	c := http.Client{Timeout: 10 * time.Second}
	_, err := c.Get("http://" + net.JoinHostPort(ip, plainPort) + "/healthz")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("plain HTTP to %s:%s: %v, want connection refused", ip, plainPort, err)
	}
	// Plain HTTP to the HTTPS port: no API, no token accepted.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+net.JoinHostPort(ip, httpsPort)+"/v1/info", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the HTTPS port: %d, want 400 (an HTTP request to an HTTPS server)", resp.StatusCode)
		}
	}

	// HTTPS with the hub's CA: the certificate names the address.
	caPEM, err := os.ReadFile(h.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt: no PEM")
	}
	hc := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err = http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+net.JoinHostPort(ip, httpsPort)+"/v1/info", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("https://%s:%s with the hub's CA: %v", ip, httpsPort, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https /v1/info: %d", resp.StatusCode)
	}

	// Plain listeners off loopback need --insecure-plaintext.
	bin, err := BuildBinary("fleet-hub")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--http-addr", "0.0.0.0:0", "--mqtt-addr", "127.0.0.1:0"},
		{"--http-addr", "127.0.0.1:0", "--mqtt-addr", ":0"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"--data-dir", t.TempDir(), "--https-addr", "", "--mqtts-addr", "127.0.0.1:0"}, args...)...)
		cmd.Env = cleanEnv(t.TempDir())
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "--insecure-plaintext") {
			t.Errorf("fleet-hub %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// nonLoopbackIP is an IPv4 address of one of the machine's interfaces.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("no non-loopback IPv4 address among %v: the test needs one", addrs)
	return ""
}

func portOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("URL %q: %v", raw, err)
	}
	return u.Port()
}
