package test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/schema"
)

// TestE2ECertRotationServerCertCAAndSigningKey: a hub whose server
// certificate lasts 2 minutes and three real agents on containerd,
// connected over MQTT-over-TLS and pinning the hub's CA by hash, running
// a Deployment.
//
//   - The server certificate is renewed before it expires, without a
//     restart: the listener presents a new certificate of the same CA
//     while the old one is still valid, and no agent disconnected (no
//     "offline" on any online topic, no new MQTT connection in any
//     agent's log).
//   - `fleet-hub signing-key rotate` on the running hub: every agent pins
//     the new key, endorsed by the old one.
//   - `fleet-hub ca rotate` with one agent stopped: the two online agents
//     report the new CA, the stopped one is listed as pending (offline,
//     not forgotten) and the old CA still signs; once it returns it picks
//     the new CA up and the hub completes the rotation by itself: its
//     certificate now chains to the new CA only, every agent reconnects
//     to it after a restart, a client certificate of the old CA is
//     refused while one of the new CA is accepted, and an agent offered a
//     server certificate of the old CA refuses it.
//   - No container was restarted throughout.
func TestE2ECertRotationServerCertCAAndSigningKey(t *testing.T) {
	t.Parallel() // mostly waits for a 2-minute certificate; devices rot-*
	f := StartFleet(t, FleetOptions{
		Agents: 3, DevicePrefix: "rot",
		Labels:  func(int) map[string]string { return map[string]string{"role": "rot"} },
		HubArgs: []string{"--tls-cert-lifetime", "2m", "--mqtt-client-certs", "optional"},
	})
	h := f.Hub
	devices := f.Devices()
	if h.CAHash == "" || !strings.HasPrefix(h.MQTTTLSURL, "ssl://") {
		t.Fatalf("the hub has no CA of its own or no MQTT over TLS: %+v", h)
	}
	tlsAddr := strings.TrimPrefix(h.MQTTTLSURL, "ssl://")
	oldCA, oldKey := readCAFiles(t, h.DataDir)

	// Every agent over TLS, verifying the hub by the pinned CA hash.
	for _, a := range f.Agents {
		a.opts.Args = append(a.opts.Args, "--ca-hash", h.CAHash)
		a.SetBroker(h.MQTTTLSURL)
		a.Restart(t)
	}
	f.AwaitDevices(t, time.Minute, "online over TLS", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, devices...)
	for _, a := range f.Agents {
		// Verified by the hash and kept; no bundle before any rotation.
		if _, err := os.Stat(filepath.Join(a.StateDir, "hub-ca.crt")); err != nil {
			t.Fatalf("%s did not keep the CA it verified by hash: %v", a.Device, err)
		}
		if _, err := os.Stat(filepath.Join(a.StateDir, "hub-ca-bundle.crt")); !os.IsNotExist(err) {
			t.Fatalf("%s has a CA bundle before any rotation: %v", a.Device, err)
		}
	}
	awaitf(t, 30*time.Second, func() bool {
		st := caStatus(t, h)
		return st.Pending == 0 && !st.Rotating
	}, "every device to report the hub's CA among the CAs it trusts")
	f.Apply(t, webYAML("web", f.Image, map[string]string{"role": "rot"}))
	for _, d := range devices {
		f.AwaitContainerRunning(t, d, "web")
	}
	f.AwaitConverged(t, time.Minute, devices...)
	pids := f.TaskPIDs(t, devices...)

	// 1. The server certificate, renewed with nobody disconnected.
	flips := watchOffline(t, h)
	connects := map[string]int{}
	for _, a := range f.Agents {
		connects[a.Device] = strings.Count(a.Logs(), "mqtt connected")
	}
	first := presentedLeaf(t, tlsAddr)
	if life := first.NotAfter.Sub(first.NotBefore); life > 2*time.Minute+2*time.Hour {
		t.Fatalf("the server certificate lasts %v, want 2 minutes (+1 h backdating)", life)
	}
	var renewed *x509.Certificate
	var renewedAt time.Time
	awaitf(t, first.NotAfter.Sub(time.Now())+30*time.Second, func() bool {
		renewed, renewedAt = presentedLeaf(t, tlsAddr), time.Now()
		return renewed.SerialNumber.Cmp(first.SerialNumber) != 0
	}, "the hub to present a renewed server certificate (the first expires at %s)", first.NotAfter.Format(time.RFC3339))
	if !renewedAt.Before(first.NotAfter) {
		t.Errorf("renewed at %s, after the old certificate's end %s", renewedAt.Format(time.RFC3339), first.NotAfter.Format(time.RFC3339))
	}
	if err := verifyLeaf(renewed, oldCA, "127.0.0.1"); err != nil {
		t.Errorf("the renewed certificate does not chain to the hub's CA: %v", err)
	}
	t.Logf("server certificate renewed %.0f s before the old one's end (lifetime %v)", first.NotAfter.Sub(renewedAt).Seconds(), first.NotAfter.Sub(first.NotBefore)-time.Hour)
	if v := metric(t, h, `fleet_hub_certificate_expiry_timestamp_seconds{certificate="server"}`); v != float64(renewed.NotAfter.Unix()) {
		t.Errorf("the server certificate's expiry metric is %v after the renewal, want %d", v, renewed.NotAfter.Unix())
	}
	if v := metric(t, h, "fleet_hub_server_certificate_renewals_total"); v < 1 {
		t.Errorf("fleet_hub_server_certificate_renewals_total = %v after a renewal", v)
	}
	if n := flips.count(); n != 0 {
		t.Errorf("%d offline message(s) on online topics while the certificate was renewed: %v", n, flips.list())
	}
	for _, a := range f.Agents {
		if n := strings.Count(a.Logs(), "mqtt connected"); n != connects[a.Device] {
			t.Errorf("%s connected %d more time(s) while the certificate was renewed", a.Device, n-connects[a.Device])
		}
	}

	// 2. The signing key, rotated on the running hub by one command.
	marks := map[string]int{}
	for _, a := range f.Agents {
		marks[a.Device] = a.LogMark()
	}
	out := runHubCLI(t, h, "signing-key", "rotate")
	if !strings.Contains(out, "signing key of the running hub rotated") {
		t.Fatalf("signing-key rotate: %q", out)
	}
	for _, a := range f.Agents {
		a.AwaitLog(t, marks[a.Device], "the hub rotated its signing key: pinned key", time.Minute)
	}

	// 3. The CA, rotated while one device is offline.
	offline := f.Agent(t, devices[2])
	if err := offline.Stop(); err != nil {
		t.Fatal(err)
	}
	f.AwaitDevices(t, time.Minute, "offline", func(d schema.Device) bool { return d.Status != nil && !d.Status.Online }, offline.Device)
	rotateAt := time.Now()
	if out := runHubCLI(t, h, "ca", "rotate"); !strings.Contains(out, "CA rotation started") {
		t.Fatalf("ca rotate: %q", out)
	}
	rot := caStatus(t, h)
	if !rot.Rotating || rot.Active != h.CAHash || rot.Next == "" {
		t.Fatalf("after ca rotate: %+v", rot)
	}
	awaitf(t, time.Minute, func() bool {
		st := caStatus(t, h)
		return st.Rotating && st.Pending == 1 && hasNext(st, devices[0]) && hasNext(st, devices[1])
	}, "the online devices to report the new CA")
	t.Logf("CA rotation reached the %d online devices in %v", 2, time.Since(rotateAt).Round(time.Millisecond))
	st := caStatus(t, h)
	if d := findCADevice(st, offline.Device); d == nil || d.Online || d.HasNext {
		t.Fatalf("the offline device in ca status: %+v", d)
	}
	if out := runHubCLI(t, h, "ca", "status", "-o", "wide"); !strings.Contains(out, offline.Device) || !strings.Contains(out, "no (pending)") || !strings.Contains(out, rot.Next) {
		t.Errorf("ca status -o wide does not list the pending offline device:\n%s", out)
	}
	if v := metric(t, h, "fleet_hub_ca_rotation_pending_devices"); v != 1 {
		t.Errorf("fleet_hub_ca_rotation_pending_devices = %v, want 1", v)
	}
	if r := runHubCLIResult(t, h, "ca", "retire"); r.err == nil || !strings.Contains(r.out, offline.Device) {
		t.Errorf("ca retire with a device pending: %v\n%s", r.err, r.out)
	}
	if err := verifyLeaf(presentedLeaf(t, tlsAddr), oldCA, "127.0.0.1"); err != nil {
		t.Errorf("during the overlap the server certificate is not the old CA's: %v", err)
	}
	for _, d := range devices[:2] {
		if got := readBundleHashes(t, f.Agent(t, d).StateDir); !slices.Contains(got, rot.Active) || !slices.Contains(got, rot.Next) {
			t.Errorf("%s trusts %v during the overlap, want both CAs", d, got)
		}
	}

	// The offline device returns, picks the new CA up, and the hub
	// completes the rotation by itself.
	returnAt := time.Now()
	offline.Start(t)
	awaitf(t, time.Minute, func() bool {
		st := caStatus(t, h)
		return !st.Rotating && st.Active == rot.Next && slices.Contains(st.Retired, rot.Active)
	}, "the hub to complete the CA rotation once every device has the new CA")
	t.Logf("the returning device picked up the new CA and the hub completed the rotation %v after its agent started", time.Since(returnAt).Round(time.Millisecond))
	newCA, _ := readCAFiles(t, h.DataDir)
	if schema.CAHash(newCA) != rot.Next {
		t.Fatalf("ca.crt is %s after the rotation, want %s", schema.CAHash(newCA), rot.Next)
	}
	if _, err := os.Stat(filepath.Join(h.DataDir, "ca-next.key")); !os.IsNotExist(err) {
		t.Errorf("ca-next.key after the rotation: %v", err)
	}
	var leaf *x509.Certificate
	awaitf(t, 30*time.Second, func() bool {
		leaf = presentedLeaf(t, tlsAddr)
		return verifyLeaf(leaf, newCA, "127.0.0.1") == nil
	}, "the server certificate to chain to the new CA")
	if err := verifyLeaf(leaf, oldCA, "127.0.0.1"); err == nil {
		t.Error("the server certificate after the rotation still chains to the retired CA")
	}
	var info schema.HubInfo
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/info", nil, http.StatusOK), &info); err != nil || info.CAHash != rot.Next {
		t.Errorf("GET /v1/info caHash %q after the rotation, want %s (%v)", info.CAHash, rot.Next, err)
	}
	// Every agent verifies the hub by the new CA on its next connection.
	for _, a := range f.Agents {
		var got []string
		awaitf(t, 30*time.Second, func() bool {
			got = readBundleHashes(t, a.StateDir)
			return len(got) == 1 && got[0] == rot.Next
		}, "%s to trust only the new CA %s (it trusts %v)", a.Device, rot.Next, got)
		a.Restart(t)
	}
	f.AwaitDevices(t, time.Minute, "online through the new CA", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, devices...)
	f.AwaitConverged(t, time.Minute, devices...)

	// The old CA is refused: a client certificate it signed, and a
	// server certificate it signed.
	probe := "rot-probe"
	tok := f.AddDevice(t, probe, nil)
	_, newKey := readCAFiles(t, h.DataDir)
	if err := dialMTLS(h.MQTTTLSURL, probe, tok, newCA, clientCertBy(t, newCA, newKey, probe)); err != nil {
		t.Fatalf("a client certificate of the new CA is refused: %v", err)
	}
	if err := dialMTLS(h.MQTTTLSURL, probe, tok, newCA, clientCertBy(t, oldCA, oldKey, probe)); err == nil || !strings.Contains(err.Error(), "tls") {
		t.Errorf("a client certificate of the retired CA: %v, want refused in the TLS handshake", err)
	}
	fake := startOldCABroker(t, oldCA, oldKey)
	victim := f.Agent(t, devices[0])
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	mark := victim.LogMark()
	victim.SetBroker(fake.url())
	victim.Start(t)
	victim.AwaitLog(t, mark, "hub CA bundle", time.Minute)
	if fake.handshakes.Load() == 0 || fake.accepted.Load() != 0 {
		t.Errorf("the broker with the retired CA's certificate: %d handshake(s), %d completed", fake.handshakes.Load(), fake.accepted.Load())
	}

	if got := f.TaskPIDs(t, devices...); !mapsEqual(got, pids) {
		t.Errorf("containers restarted during the rotations: before %v, after %v", pids, got)
	}
}

func mapsEqual(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// readCAFiles reads the hub's ca.crt and ca.key.
func readCAFiles(t *testing.T, dataDir string) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dataDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("ca.crt or ca.key: no PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert, k.(crypto.Signer)
}

// presentedLeaf is the certificate the TLS listener at addr presents.
// It is only read (the test verifies it itself with verifyLeaf).
func presentedLeaf(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // read, then verified by verifyLeaf
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// verifyLeaf verifies a server certificate against ca alone.
func verifyLeaf(leaf, ca *x509.Certificate, name string) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func caStatus(t *testing.T, h *Hub) schema.CARotationStatus {
	t.Helper()
	var st schema.CARotationStatus
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/ca", nil, http.StatusOK), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func findCADevice(st schema.CARotationStatus, name string) *schema.CADevice {
	for i := range st.Devices {
		if st.Devices[i].Name == name {
			return &st.Devices[i]
		}
	}
	return nil
}

func hasNext(st schema.CARotationStatus, name string) bool {
	d := findCADevice(st, name)
	return d != nil && d.HasNext
}

// readBundleHashes are the pins of the CA bundle an agent saved.
func readBundleHashes(t *testing.T, stateDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "hub-ca-bundle.crt"))
	if err != nil {
		t.Fatalf("the agent's CA bundle: %v", err)
	}
	var out []string
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, schema.CAHash(c))
	}
	return out
}

type hubCLIResult struct {
	out string
	err error
}

// runHubCLIResult runs fleet-hub with the hub's data directory.
func runHubCLIResult(t *testing.T, h *Hub, args ...string) hubCLIResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), h.bin, append(args, "--data-dir", h.DataDir)...)
	cmd.Env = cleanEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	return hubCLIResult{out: string(out), err: err}
}

func runHubCLI(t *testing.T, h *Hub, args ...string) string {
	t.Helper()
	r := runHubCLIResult(t, h, args...)
	if r.err != nil {
		t.Fatalf("fleet-hub %s: %v\n%s", strings.Join(args, " "), r.err, r.out)
	}
	return r.out
}

// offlineWatch records every "offline" published on a device's online
// topic, as a monitor sees them.
type offlineWatch struct {
	mu  sync.Mutex
	got []string
}

func (w *offlineWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

func (w *offlineWatch) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

func watchOffline(t *testing.T, h *Hub) *offlineWatch {
	t.Helper()
	w := &offlineWatch{}
	mon := mustDialMQTT(t, h.MQTTURL, "rot-monitor", addMonitor(t, h, "rot-monitor"), dialOpts{})
	mon.subscribe("fleet/v1/devices/+/online")
	mon.mu.Lock()
	defer mon.mu.Unlock()
	mon.onMsg = func(m mqttMsg) {
		if strings.HasSuffix(m.Topic, "/online") && string(m.Payload) == "offline" && !m.Retained {
			w.mu.Lock()
			w.got = append(w.got, m.Topic)
			w.mu.Unlock()
		}
	}
	return w
}

// clientCertBy is a client certificate for name signed by ca.
func clientCertBy(t *testing.T, ca *x509.Certificate, caKey crypto.Signer, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialMTLS connects to the TLS broker as a device with a client
// certificate, verifying the broker by ca.
func dialMTLS(url, user, pass string, ca *x509.Certificate, cert tls.Certificate) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	po := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("%s-%016x", user, time.Now().UnixNano())).
		SetUsername(user).SetPassword(pass).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).
		SetTLSConfig(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
			// Always presented, whatever CAs the broker says it accepts
			// (Go's client would otherwise send none).
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
	c := paho.NewClient(po)
	tok := c.Connect()
	if !tok.WaitTimeout(mqttWait) {
		return errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return err
	}
	c.Disconnect(0)
	return nil
}

// oldCABroker is a TLS listener presenting a certificate the retired CA
// signed, for 127.0.0.1: someone who kept the old CA's key.
type oldCABroker struct {
	ln                   net.Listener
	handshakes, accepted atomic.Int64
}

func (b *oldCABroker) url() string { return "ssl://" + b.ln.Addr().String() }

func startOldCABroker(t *testing.T, ca *x509.Certificate, caKey crypto.Signer) *oldCABroker {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	b := &oldCABroker{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				b.handshakes.Add(1)
				if err := tc.Handshake(); err != nil {
					return
				}
				// TLS 1.3: the client's verdict arrives with its first
				// record; a client that refused sends an alert.
				buf := make([]byte, 1)
				if _, err := tc.Read(buf); err == nil {
					b.accepted.Add(1)
				}
			})
		}
	})
	return b
}

// TestE2ECertRotationClientCertRenewal: a device's client certificate
// (mutual TLS) is renewed over its MQTT session. With the hub's
// --mqtt-client-certs=optional, an agent whose certificate expired while
// it was offline presents none, connects on its token, asks, and gets a
// new one from the hub's CA. With --mqtt-client-certs=required, an agent
// whose certificate is past two thirds of its life (still valid) renews
// it before it expires, and its next connection presents the new one.
func TestE2ECertRotationClientCertRenewal(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "renew", HubArgs: []string{"--mqtt-client-certs", "optional"}})
	h := f.Hub
	a := f.Agents[0]
	a.opts.Args = append(a.opts.Args, "--ca-hash", h.CAHash)
	a.SetBroker(h.MQTTTLSURL)
	a.Restart(t)
	f.AwaitDevices(t, time.Minute, "online over TLS", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, a.Device)
	ca, caKey := readCAFiles(t, h.DataDir)
	clientKey := readClientKey(t, a.StateDir) // written with client.csr by the agent

	// Expired while offline: the expired certificate and the token let it
	// in to renew, and it renews.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	expired := writeClientCert(t, a.StateDir, ca, caKey, clientKey, a.Device, ca.NotBefore, time.Now().Add(-time.Second))
	a.Start(t)
	renewed := awaitClientCert(t, a.StateDir, expired)
	if err := renewed.CheckSignatureFrom(ca); err != nil || time.Until(renewed.NotAfter) < 300*24*time.Hour {
		t.Fatalf("renewed certificate: until %s, %v", renewed.NotAfter, err)
	}
	if !strings.Contains(h.Logs(), "renewed a device's client certificate over MQTT") {
		t.Error("the hub did not log the renewal")
	}

	// Inside the renewal window, with certificates required.
	h.opts.Args = append(h.opts.Args, "--mqtt-client-certs", "required")
	f.RestartHub(t)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	aging := writeClientCert(t, a.StateDir, ca, caKey, clientKey, a.Device, time.Now().Add(-10*time.Hour), time.Now().Add(2*time.Hour))
	a.SetBroker(h.MQTTTLSURL) // the restarted hub's TLS port
	a.Start(t)
	f.AwaitDevices(t, time.Minute, "online with the aging certificate", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, a.Device)
	next := awaitClientCert(t, a.StateDir, aging)
	if time.Until(next.NotAfter) < 300*24*time.Hour {
		t.Fatalf("renewed in the window: until %s", next.NotAfter)
	}
	a.Restart(t)
	f.AwaitDevices(t, time.Minute, "online with the renewed certificate, certificates required", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, a.Device)
	if !strings.Contains(a.Logs(), "renewed the client certificate") {
		t.Error("the agent did not log the renewal")
	}
}

func readClientKey(t *testing.T, stateDir string) crypto.Signer {
	t.Helper()
	var b []byte
	awaitf(t, 30*time.Second, func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(stateDir, "client.key"))
		return err == nil
	}, "the agent to make its client key")
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("client.key: no PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(crypto.Signer)
}

// writeClientCert writes client.crt for the agent's key, signed by ca,
// valid from notBefore to notAfter.
func writeClientCert(t *testing.T, stateDir string, ca *x509.Certificate, caKey, key crypto.Signer, device string, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: device},
		NotBefore:    notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "client.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// awaitClientCert waits until client.crt is another certificate than old.
func awaitClientCert(t *testing.T, stateDir string, old *x509.Certificate) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	awaitf(t, time.Minute, func() bool {
		b, err := os.ReadFile(filepath.Join(stateDir, "client.crt"))
		if err != nil {
			return false
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return false
		}
		got, err = x509.ParseCertificate(blk.Bytes)
		return err == nil && got.SerialNumber.Cmp(old.SerialNumber) != 0
	}, "the agent to save a renewed client certificate")
	return got
}

// TestE2ECertRotationExpiredRequired: with --mqtt-client-certs=required,
// a device offline past the end of its client certificate returns,
// presents the expired certificate with its token, is admitted only to
// renew it, renews, reconnects in its normal session and converges.
// The same expired certificate with a wrong token is refused, and the
// renewal-only session it opens with the right token cannot read the
// device's desired state nor publish its status.
func TestE2ECertRotationExpiredRequired(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "expreq", HubArgs: []string{"--mqtt-client-certs", "optional"},
		Labels: func(int) map[string]string { return e2eAgents }})
	h := f.Hub
	a := f.Agents[0]
	a.opts.Args = append(a.opts.Args, "--ca-hash", h.CAHash)
	a.SetBroker(h.MQTTTLSURL)
	a.Restart(t)
	f.AwaitDevices(t, time.Minute, "online over TLS", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, a.Device)
	ca, caKey := readCAFiles(t, h.DataDir)
	clientKey := readClientKey(t, a.StateDir)

	// Offline past the end of its certificate, while the hub comes to
	// require client certificates.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	h.opts.Args = append(h.opts.Args, "--mqtt-client-certs", "required")
	f.RestartHub(t)
	// Its whole life lies within the CA's (a certificate older than its
	// CA never verifies, expired or not).
	expired := writeClientCert(t, a.StateDir, ca, caKey, clientKey, a.Device, ca.NotBefore, time.Now().Add(-time.Second))
	cert := tls.Certificate{Certificate: [][]byte{expired.Raw}, PrivateKey: clientKey}

	if err := dialMTLS(h.MQTTTLSURL, a.Device, "not-the-token", ca, cert); err == nil {
		t.Error("the expired certificate with a wrong token was admitted")
	}
	renewalOnlyAttack(t, h.MQTTTLSURL, a.Device, f.Token(a.Device), ca, cert)

	a.SetBroker(h.MQTTTLSURL) // the restarted hub's TLS port
	start := time.Now()
	a.Start(t)
	renewed := awaitClientCert(t, a.StateDir, expired)
	tRenewed := time.Since(start)
	if err := renewed.CheckSignatureFrom(ca); err != nil || time.Until(renewed.NotAfter) < 300*24*time.Hour {
		t.Fatalf("renewed certificate: until %s, %v", renewed.NotAfter, err)
	}
	f.AwaitDevices(t, time.Minute, "online with the renewed certificate, certificates required", func(d schema.Device) bool { return d.Status != nil && d.Status.Online }, a.Device)
	t.Logf("measured: agent start to renewed certificate %s, to its normal session online %s", tRenewed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	f.deleteOnCleanup(t, "e2e-expreq")
	f.applyDeps(t, e2eDep{Name: "e2e-expreq"})
	f.AwaitRollout(t, "e2e-expreq", 1, e2eConverge)
	f.AwaitConverged(t, e2eConverge, a.Device)
	for _, want := range []string{"mqtt connected with an expired client certificate", "reconnecting with the renewed client certificate"} {
		if !strings.Contains(a.Logs(), want) {
			t.Errorf("agent logs lack %q", want)
		}
	}
	if !strings.Contains(h.Logs(), "renewed a device's client certificate over MQTT") {
		t.Error("the hub did not log the renewal")
	}
}

// renewalOnlyAttack connects with the device's expired certificate and
// valid token, and checks that the session it gets may read the
// certificate topic, but not the desired state or requests, and that a
// status it publishes ends the session.
func renewalOnlyAttack(t *testing.T, url, device, token string, ca *x509.Certificate, cert tls.Certificate) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	var lost atomic.Bool
	po := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("%s-%016x", device, time.Now().UnixNano())).
		SetUsername(device).SetPassword(token).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).
		SetConnectionLostHandler(func(paho.Client, error) { lost.Store(true) }).
		SetTLSConfig(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
	c := paho.NewClient(po)
	if tok := c.Connect(); !tok.WaitTimeout(mqttWait) || tok.Error() != nil {
		t.Fatalf("the expired certificate with the device's token: not admitted to renew: %v", tok.Error())
	}
	defer c.Disconnect(0)
	topics := schema.Topics{}
	suback := func(topic string) byte {
		tok := c.Subscribe(topic, 1, func(paho.Client, paho.Message) {})
		if !tok.WaitTimeout(mqttWait) || tok.Error() != nil {
			t.Fatalf("subscribe %s: %v", topic, tok.Error())
		}
		return tok.(*paho.SubscribeToken).Result()[topic]
	}
	if code := suback(topics.Device(device, schema.TopicCertificate)); code >= 0x80 {
		t.Errorf("renewal-only session: certificate topic refused (%#x)", code)
	}
	for _, kind := range []string{schema.TopicDesired, schema.TopicRequests} {
		if code := suback(topics.Device(device, kind)); code < 0x80 {
			t.Errorf("renewal-only session: subscribed to its %s topic (%#x)", kind, code)
		}
	}
	c.Publish(topics.Device(device, schema.TopicStatus), 1, false, []byte(`{}`))
	awaitf(t, mqttWait, lost.Load, "the broker to end a renewal-only session that published a status")
}
