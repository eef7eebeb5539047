package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Execer runs a command in a running container: runtime.Runtime's Exec.
type Execer interface {
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (exitCode int, output []byte, err error)
}

// DefaultHost is where httpGet and tcpSocket probes connect when the probe
// names no host: pods use the device's network.
const DefaultHost = "127.0.0.1"

// maxBody is how much of an httpGet probe's answer is read (and thrown
// away): enough for any health page, and a bound on a hostile one.
const maxBody = 10 << 10

// checker runs one check of a probe.
type checker struct {
	exec      Execer
	transport *http.Transport
	dialer    net.Dialer
}

func newChecker(exec Execer) *checker {
	return &checker{
		exec: exec,
		transport: &http.Transport{
			// Never a proxy from the agent's environment: the target is
			// this device.
			Proxy:             nil,
			DisableKeepAlives: true,
			// As Kubernetes: an HTTPS probe does not verify the
			// certificate (the container's own, usually self-signed).
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		},
	}
}

// check runs probe p against container id (whose ports resolve named
// ports) once, within timeout. ok says whether it passed; msg says what
// happened, for events and status: it never carries a command's output
// or a header's value, which may be secret.
func (c *checker) check(ctx context.Context, id string, p *schema.Probe, ports []schema.ContainerPort, timeout time.Duration) (ok bool, msg string) {
	switch {
	case p.Exec != nil:
		return c.checkExec(ctx, id, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		return c.checkHTTP(ctx, p.HTTPGet, ports, timeout)
	case p.TCPSocket != nil:
		return c.checkTCP(ctx, p.TCPSocket, ports, timeout)
	}
	return false, "probe has no exec, httpGet or tcpSocket"
}

func (c *checker) checkExec(ctx context.Context, id string, cmd []string, timeout time.Duration) (bool, string) {
	what := fmt.Sprintf("exec %v", cmd)
	if c.exec == nil {
		return false, what + ": exec is not available"
	}
	code, _, err := c.exec.Exec(ctx, id, cmd, timeout)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return false, fmt.Sprintf("%s: timed out after %v", what, timeout)
	case err != nil:
		return false, fmt.Sprintf("%s: %v", what, err)
	case code != 0:
		return false, fmt.Sprintf("%s: exit code %d", what, code)
	}
	return true, what + ": exit code 0"
}

// hostPort resolves a probe's host and port.
func hostPort(host string, port schema.PortRef, ports []schema.ContainerPort) (string, error) {
	n, ok := port.Number(ports)
	if !ok {
		return "", fmt.Errorf("port %q names none of the container's ports", string(port))
	}
	if host == "" {
		host = DefaultHost
	}
	return net.JoinHostPort(host, strconv.Itoa(int(n))), nil
}

func (c *checker) checkHTTP(ctx context.Context, h *schema.HTTPGetAction, ports []schema.ContainerPort, timeout time.Duration) (bool, string) {
	addr, err := hostPort(h.Host, h.Port, ports)
	if err != nil {
		return false, "http GET: " + err.Error()
	}
	scheme := "http"
	if strings.EqualFold(h.Scheme, "HTTPS") {
		scheme = "https"
	}
	path := h.Path
	if path == "" {
		path = "/"
	}
	u := &url.URL{Scheme: scheme, Host: addr}
	// The path may carry a query: parse it as a request URI.
	ref, err := url.ParseRequestURI(path)
	if err != nil {
		return false, fmt.Sprintf("http GET %s://%s%s: bad path: %v", scheme, addr, path, err)
	}
	u.Path, u.RawPath, u.RawQuery = ref.Path, ref.RawPath, ref.RawQuery
	what := "http GET " + u.String()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, what + ": " + err.Error()
	}
	req.Header.Set("User-Agent", "fleet-probe/1")
	req.Header.Set("Accept", "*/*")
	for _, hd := range h.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	client := &http.Client{
		Transport: c.transport,
		// As Kubernetes: follow redirects on the same host; a redirect
		// elsewhere is an answer in itself (3xx: success).
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 || r.URL.Host != u.Host {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Sprintf("%s: timed out after %v", what, timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return false, what + ": " + err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return false, fmt.Sprintf("%s: status %d", what, resp.StatusCode)
	}
	return true, fmt.Sprintf("%s: status %d", what, resp.StatusCode)
}

func (c *checker) checkTCP(ctx context.Context, s *schema.TCPSocketAction, ports []schema.ContainerPort, timeout time.Duration) (bool, string) {
	addr, err := hostPort(s.Host, s.Port, ports)
	if err != nil {
		return false, "tcp: " + err.Error()
	}
	what := "tcp " + addr
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Sprintf("%s: timed out after %v", what, timeout)
		}
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			err = oe.Err
		}
		return false, what + ": " + err.Error()
	}
	_ = conn.Close()
	return true, what + ": connected"
}
