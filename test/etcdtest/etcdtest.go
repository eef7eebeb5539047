// Package etcdtest starts a real etcd cluster for tests: n members of
// Debian's etcd-server, each its own process on loopback ports, with their
// data on disk, optionally with TLS and client-certificate authentication.
// Members can be killed with SIGKILL and restarted on the same data.
package etcdtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fleetmq/fleet/test/sysdeps"
)

// Options tune the cluster.
type Options struct {
	// Members: default 3.
	Members int
	// TLS: clients must present a certificate signed by the cluster's CA
	// (Cluster.ClientTLS); peers talk TLS too.
	TLS bool
}

// Cluster is a running etcd cluster.
type Cluster struct {
	Members []*Member
	// Dir holds every member's data and, with TLS, the certificates:
	// ca.crt, client.crt, client.key (PEM).
	Dir string
	tls bool
}

// Member is one etcd process.
type Member struct {
	Name string
	// ClientURL is http(s)://127.0.0.1:port.
	ClientURL string
	DataDir   string

	bin  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
	out  *syncBuffer
}

// Start starts the cluster and waits until every member serves a
// linearizable read. The processes are killed when the test ends. A missing
// etcd binary fails the test (skips it under -short).
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := sysdeps.Require(t, "etcd")
	c, err := start(bin, t.TempDir(), o, t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartCluster is Start for programs that are not tests (the scale
// suite): the cluster's data goes under dir, and Close kills it.
func StartCluster(dir string, o Options) (*Cluster, error) {
	bin, err := sysdeps.Path("etcd")
	if err != nil {
		return nil, err
	}
	var c *Cluster
	c, err = start(bin, dir, o, nil)
	return c, err
}

// Close kills every member (SIGKILL) and waits for them to go.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Kill()
	}
}

// start starts the members in dir; cleanup, if set, is given each member's
// Kill (otherwise the caller calls Close). On an error every member
// started is killed.
func start(bin, dir string, o Options, cleanup func(func())) (c *Cluster, err error) {
	if o.Members <= 0 {
		o.Members = 3
	}
	c = &Cluster{Dir: dir, tls: o.TLS}
	defer func() {
		if err != nil && cleanup == nil && c != nil {
			c.Close()
		}
	}()
	scheme := "http"
	if o.TLS {
		scheme = "https"
		if err := writeCerts(c.Dir); err != nil {
			return nil, fmt.Errorf("etcd certificates: %w", err)
		}
	}
	var peers []string
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		return nil, err
	}
	clientPorts, peerPorts := ports[:o.Members], ports[o.Members:]
	for i := range o.Members {
		peers = append(peers, fmt.Sprintf("m%d=%s://127.0.0.1:%d", i, scheme, peerPorts[i]))
	}
	for i := range o.Members {
		c.Members = append(c.Members, newMember(bin, c.Dir, i, scheme, clientPorts[i], peerPorts[i], peers, o.TLS))
	}
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			return c, fmt.Errorf("start etcd %s: %w", m.Name, err)
		}
		if cleanup != nil {
			cleanup(m.Kill)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, m := range c.Members {
		if err := c.waitReady(ctx, m); err != nil {
			return c, fmt.Errorf("etcd %s not ready: %w\n%s", m.Name, err, m.Output())
		}
	}
	return c, nil
}

// newMember is member i of a cluster whose data is under dir.
func newMember(bin, dir string, i int, scheme string, clientPort, peerPort int, peers []string, withTLS bool) *Member {
	m := &Member{
		Name:      fmt.Sprintf("m%d", i),
		ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, clientPort),
		DataDir:   filepath.Join(dir, fmt.Sprintf("m%d", i)),
		bin:       bin,
	}
	peerURL := fmt.Sprintf("%s://127.0.0.1:%d", scheme, peerPort)
	m.args = []string{
		"--name", m.Name, "--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
		"--initial-cluster-token", filepath.Base(dir),
		// Fleet's audit pruning deletes up to 1,000 keys at once.
		"--max-txn-ops", "10000",
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		"--logger", "zap", "--log-level", "warn",
	}
	if withTLS {
		ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
		m.args = append(m.args,
			"--cert-file", crt, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
			"--peer-cert-file", crt, "--peer-key-file", key, "--peer-trusted-ca-file", ca, "--peer-client-cert-auth")
	}
	return m
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// HostPorts are the members' host:port, as `--store etcd://…` takes them.
func (c *Cluster) HostPorts() []string {
	var hp []string
	for _, m := range c.Members {
		_, rest, _ := strings.Cut(m.ClientURL, "://")
		hp = append(hp, rest)
	}
	return hp
}

// CertFiles are the PEM files of the CA and of a client certificate the
// members accept (TLS clusters only).
func (c *Cluster) CertFiles() (ca, cert, key string) {
	return filepath.Join(c.Dir, "ca.crt"), filepath.Join(c.Dir, "client.crt"), filepath.Join(c.Dir, "client.key")
}

// ClientTLS is a TLS configuration with the client certificate (nil
// without TLS).
func (c *Cluster) ClientTLS() (*tls.Config, error) {
	if !c.tls {
		return nil, nil
	}
	ca, crt, key := c.CertFiles()
	pemCA, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Client is a client of the whole cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg, err := c.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, TLS: cfg, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the index of the member that leads the raft group.
func (c *Cluster) Leader(ctx context.Context, cli *clientv3.Client) (int, error) {
	for i, m := range c.Members {
		if !m.Running() {
			continue
		}
		st, err := cli.Status(ctx, m.ClientURL)
		if err != nil {
			continue
		}
		if st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, errors.New("no member says it leads")
}

func (c *Cluster) waitReady(ctx context.Context, m *Member) error {
	cfg, err := c.ClientTLS()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 2 * time.Second, TLS: cfg, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-m.exit:
			return errors.New("exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.out = &syncBuffer{}
	m.cmd = exec.Command(m.bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		return err
	}
	m.exit = make(chan struct{})
	cmd, exit := m.cmd, m.exit
	go func() {
		_ = cmd.Wait()
		close(exit)
	}()
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, exit := m.cmd, m.exit
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exit:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-exit
}

// Running reports whether the process is alive.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exit == nil {
		return false
	}
	select {
	case <-m.exit:
		return false
	default:
		return true
	}
}

// Restart starts a killed member again on its data directory (it rejoins
// the cluster) and waits until it serves reads.
func (c *Cluster) Restart(t testing.TB, m *Member) {
	t.Helper()
	m.Kill()
	if err := m.start(); err != nil {
		t.Fatalf("restart etcd %s: %v", m.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.waitReady(ctx, m); err != nil {
		t.Fatalf("etcd %s not ready after restart: %v\n%s", m.Name, err, m.Output())
	}
}

// Output is what the member printed.
func (m *Member) Output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		return ""
	}
	return m.out.String()
}

// freePorts returns n distinct free loopback ports: every listener stays
// open until all are chosen, so the kernel cannot hand the same port out
// twice (one port closed and chosen again gave two members one URL).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeCerts makes a CA, a server certificate for 127.0.0.1 (members and
// peers) and a client certificate, PEM, in dir.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	for i, name := range []string{"server", "client"} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "etcdtest " + name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", kb); err != nil {
			return err
		}
	}
	return nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
