package test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/test/testimage"
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

// TestE2ETLSAgentPinsHubCA: a device enrolling with a bootstrap token
// and the CA hash `fleet token create` gave with it refuses someone in
// the middle (a TLS-terminating proxy with a CA of its own, forwarding
// to the real broker's TLS port): the log names the pinned hash, and it
// neither enrolls nor saves a CA. The same agent pointed at the hub's
// TLS port enrolls, keeps the hub's CA as <state-dir>/hub-ca.crt,
// trusts only that CA from then on and converges.
func TestE2ETLSAgentPinsHubCA(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "tlspin"})
	h := f.Hub
	if h.CAHash == "" || !strings.HasPrefix(h.MQTTTLSURL, "ssl://") {
		t.Fatalf("the hub has no CA or no MQTT over TLS: %+v", h)
	}
	bt := createBootstrap(t, h, "--label", "site=pinned", "--uses", "1")
	if bt.CAHash != h.CAHash {
		t.Fatalf("the bootstrap token carries CA hash %q, the hub's is %q", bt.CAHash, h.CAHash)
	}
	mitm := startTLSMITM(t, strings.TrimPrefix(h.MQTTTLSURL, "ssl://"), h.CAFile)

	const dev = "pinned-pi"
	tarPath, _ := testimage.Build(t, testimage.Options{})
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(t.Context(), AgentNamespace(dev)), 2*time.Minute)
	_, err := testimage.Import(ctx, f.Containerd.Client(), tarPath, "")
	cancel()
	if err != nil {
		t.Fatalf("import the test image for %s: %v", dev, err)
	}
	a := StartAgent(t, AgentOptions{
		Device: dev, Broker: mitm.URL(), BootstrapToken: bt.Token,
		ContainerdSocket: f.Containerd.Socket(), Args: []string{"--ca-hash", bt.CAHash},
	})
	refused := a.AwaitLog(t, 0, "pinned CA "+bt.CAHash, time.Minute)
	if !strings.Contains(refused, enroll.ErrCAMismatch.Error()) {
		t.Errorf("the refusal does not say why: %s", refused)
	}
	t.Logf("man in the middle refused: %s", refused)
	if err := a.Stop(); err != nil {
		t.Errorf("stop the agent: %v", err)
	}
	if mitm.Handshakes() == 0 {
		t.Fatal("the agent never reached the man in the middle")
	}
	if mitm.Forwarded() != 0 {
		t.Fatalf("the man in the middle forwarded %d bytes of the agent's", mitm.Forwarded())
	}
	for _, name := range []string{enroll.TokenFile, enroll.CAFile} {
		if _, err := os.Stat(filepath.Join(a.StateDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after refusing the man in the middle, the state dir has %s: %v", name, err)
		}
	}
	if code, _ := h.Do(t, http.MethodGet, "/v1/devices/"+dev, nil); code != http.StatusNotFound {
		t.Fatalf("GET device %s after the refused enrollment: %d, want 404", dev, code)
	}

	// The real hub: enrolls, saves the CA it verified by the hash, and
	// from then on trusts it alone.
	a.SetBroker(h.MQTTTLSURL)
	mark := a.LogMark()
	a.Start(t)
	a.AwaitLog(t, mark, "enrolled; device token saved", time.Minute)
	a.AwaitLog(t, mark, "trust="+enroll.TrustSavedCA, time.Minute)
	saved, err := os.ReadFile(filepath.Join(a.StateDir, enroll.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	hubCA, err := os.ReadFile(h.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(saved), bytes.TrimSpace(hubCA)) {
		t.Fatalf("saved CA is not the hub's:\n%s\nwant:\n%s", saved, hubCA)
	}
	f.applyDeps(t, e2eDep{Name: "e2e-pinned", Selector: map[string]string{"site": "pinned"}})
	f.AwaitContainerRunning(t, dev, "e2e-pinned", f.PodHash(t, "e2e-pinned"))
	f.AwaitConverged(t, e2eConverge, dev)

	// Restarted against the man in the middle, the enrolled agent
	// refuses it by the saved CA: it never gets the device token.
	a.SetBroker(mitm.URL())
	mark = a.LogMark()
	before := mitm.Handshakes()
	a.Restart(t)
	awaitf(t, time.Minute, func() bool { return mitm.Handshakes() > before }, "the restarted agent dials the man in the middle")
	t.Logf("enrolled agent refused the man in the middle: %s", a.AwaitLog(t, mark, "certificate signed by unknown authority", time.Minute))
	if mitm.Forwarded() != 0 {
		t.Fatalf("the man in the middle forwarded %d bytes of the agent's", mitm.Forwarded())
	}
	if strings.Contains(a.Logs(), bt.Token) {
		t.Error("the agent logged its bootstrap token")
	}
}

// tlsMITM terminates TLS with a certificate of its own CA (for
// 127.0.0.1, with that CA in the chain, as the hub's) and forwards what
// it decrypts to target over TLS that trusts the real CA: a man in the
// middle that a client trusting the system roots or skipping
// verification would not notice.
type tlsMITM struct {
	ln         net.Listener
	handshakes atomic.Int64
	forwarded  atomic.Int64
}

func startTLSMITM(t *testing.T, target, realCAFile string) *tlsMITM {
	t.Helper()
	cert := selfCAServerCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(realCAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	m := &tlsMITM{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tc := c.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				m.handshakes.Add(1)
				if err := tc.Handshake(); err != nil {
					return // the client refused the certificate
				}
				_ = tc.SetDeadline(time.Time{})
				up, err := tls.Dial("tcp", target, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(c, up)
					close(done)
				}()
				n, _ := io.Copy(up, c)
				m.forwarded.Add(n)
				up.Close()
				<-done
			}()
		}
	}()
	return m
}

func (m *tlsMITM) URL() string       { return "ssl://" + m.ln.Addr().String() }
func (m *tlsMITM) Handshakes() int64 { return m.handshakes.Load() }
func (m *tlsMITM) Forwarded() int64  { return m.forwarded.Load() }

// selfCAServerCert is a server certificate for 127.0.0.1 signed by a
// fresh CA, with the CA in the chain.
func selfCAServerCert(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet-hub CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fleet-hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
}

// TestE2ETLSClientCertsRequired: a hub with --mqtt-client-certs=required.
// An agent enrolling with a bootstrap token gets its client certificate
// (a CSR in the request; its key never leaves the device), presents it on
// the TLS listener and converges; a client with the device's token but no
// certificate is refused, and so is the certificate with a wrong token.
// The fleet's other agent, on the plain loopback listener, is unaffected.
func TestE2ETLSClientCertsRequired(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "mtls", HubArgs: []string{"--mqtt-client-certs=required"}})
	h := f.Hub
	bt := createBootstrap(t, h, "--label", "site=mtls", "--uses", "1")

	const dev = "mtls-pi"
	tarPath, _ := testimage.Build(t, testimage.Options{})
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(t.Context(), AgentNamespace(dev)), 2*time.Minute)
	_, err := testimage.Import(ctx, f.Containerd.Client(), tarPath, "")
	cancel()
	if err != nil {
		t.Fatalf("import the test image for %s: %v", dev, err)
	}
	a := StartAgent(t, AgentOptions{
		Device: dev, Broker: h.MQTTTLSURL, BootstrapToken: bt.Token,
		ContainerdSocket: f.Containerd.Socket(), Args: []string{"--ca-hash", bt.CAHash},
	})
	a.AwaitLog(t, 0, "saved the client certificate the hub signed", time.Minute)
	certPEM, err := os.ReadFile(filepath.Join(a.StateDir, enroll.ClientCertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, mustRead(t, filepath.Join(a.StateDir, enroll.ClientKeyFile)))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != dev || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("client certificate: CN %q, usage %v", leaf.Subject.CommonName, leaf.ExtKeyUsage)
	}
	if st, err := os.Stat(filepath.Join(a.StateDir, enroll.ClientKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("client key: %v %v", st, err)
	}
	f.applyDeps(t, e2eDep{Name: "e2e-mtls", Selector: map[string]string{"site": "mtls"}})
	f.AwaitContainerRunning(t, dev, "e2e-mtls", f.PodHash(t, "e2e-mtls"))
	f.AwaitConverged(t, e2eConverge, dev)
	f.AwaitConverged(t, e2eConverge, f.Agents[0].Device)

	// The device's token without its certificate, then the certificate
	// with another token: both refused over TLS.
	token := strings.TrimSpace(string(mustRead(t, filepath.Join(a.StateDir, enroll.TokenFile))))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mustRead(t, h.CAFile)) {
		t.Fatal("no CA in " + h.CAFile)
	}
	connect := func(certs []tls.Certificate, password string) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(h.MQTTTLSURL).SetClientID(dev).
			SetUsername(dev).SetPassword(password).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).
			SetTLSConfig(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "localhost", MinVersion: tls.VersionTLS12}))
		tok := c.Connect()
		if !tok.WaitTimeout(15 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(0)
		}
		return tok.Error()
	}
	if err := connect(nil, token); err == nil {
		t.Error("the device's token without its certificate was accepted over TLS")
	} else {
		t.Logf("token without certificate refused: %v", err)
	}
	if err := connect([]tls.Certificate{cert}, "not-the-token"); err == nil {
		t.Error("the device's certificate with a wrong token was accepted")
	}
	if err := connect([]tls.Certificate{cert}, token); err != nil {
		t.Errorf("the device's certificate and token: %v", err)
	}
	if strings.Contains(a.Logs(), bt.Token) || strings.Contains(a.Logs(), token) {
		t.Error("the agent logged a token")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
