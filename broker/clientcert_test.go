package broker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/schema"
)

// testCA is a CA that signs a server certificate for 127.0.0.1 and
// client certificates by name.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{t: t, cert: cert, key: key, pool: pool}
}

var serial int64 = 1

// issue signs a certificate of cn for usage.
func (ca *testCA) issue(cn string, usage x509.ExtKeyUsage) tls.Certificate {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialTLS connects over TLS as username, presenting certs, and returns
// the connect error.
func dialTLS(t *testing.T, addr string, roots *x509.CertPool, username string, certs []tls.Certificate) error {
	t.Helper()
	o := paho.NewClientOptions().
		AddBroker("ssl://" + addr).
		SetClientID(fmt.Sprintf("%s-%016x", username, time.Now().UnixNano())).
		SetUsername(username).SetPassword("pw-" + username).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetTLSConfig(&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(waitTimeout) {
		t.Fatalf("connect as %s: timed out", username)
	}
	if err := tok.Error(); err != nil {
		return err
	}
	c.Disconnect(0)
	return nil
}

// TestClientCerts: the TLS listener's client certificate modes. A
// certificate must be its user's; with required, a device over TLS
// needs one, a monitor does not, and the plain listener is unaffected.
func TestClientCerts(t *testing.T) {
	ca := newTestCA(t)
	server := ca.issue("127.0.0.1", x509.ExtKeyUsageServerAuth)
	devA, devB := broker.Identity{Name: "dev-a", Role: broker.RoleDevice}, broker.Identity{Name: "dev-b", Role: broker.RoleDevice}
	mon := broker.Identity{Name: "mon", Role: broker.RoleMonitor}
	auth := broker.NewStaticAuth()
	for _, id := range []broker.Identity{devA, devB, mon} {
		auth.Set(id, "pw-"+id.Name)
	}
	certA := []tls.Certificate{ca.issue("dev-a", x509.ExtKeyUsageClientAuth)}
	serverUsage := []tls.Certificate{ca.issue("dev-a", x509.ExtKeyUsageServerAuth)}
	other := newTestCA(t)
	foreign := []tls.Certificate{other.issue("dev-a", x509.ExtKeyUsageClientAuth)}

	type try struct {
		name     string
		user     string
		certs    []tls.Certificate
		accepted bool
	}
	for _, tc := range []struct {
		mode  broker.ClientCertMode
		tries []try
	}{
		{broker.ClientCertsRequired, []try{
			{"device without a certificate", "dev-a", nil, false},
			{"dev-a's certificate used by dev-b", "dev-b", certA, false},
			{"device with its own certificate", "dev-a", certA, true},
			{"a certificate of another CA", "dev-a", foreign, false},
			{"a server certificate", "dev-a", serverUsage, false},
			{"monitor without a certificate", "mon", nil, true},
			{"dev-a's certificate used by a monitor", "mon", certA, false},
		}},
		{broker.ClientCertsOptional, []try{
			{"device without a certificate", "dev-a", nil, true},
			{"dev-a's certificate used by dev-b", "dev-b", certA, false},
			{"device with its own certificate", "dev-a", certA, true},
		}},
		{broker.ClientCertsOff, []try{
			{"device without a certificate", "dev-a", nil, true},
			// Not asked for: the certificate is never sent.
			{"dev-a's certificate used by dev-b", "dev-b", certA, true},
		}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			logs := &logBuffer{}
			var mu sync.Mutex
			var refused []string
			b := brokertest.Start(t, broker.Options{
				Addr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0",
				TLSConfig:   &tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12},
				ClientCerts: tc.mode, ClientCAs: ca.pool,
				Auth: auth, Topics: schema.Topics{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
				OnLoginRefused: func(r broker.LoginRefusal) {
					mu.Lock()
					defer mu.Unlock()
					refused = append(refused, r.Username+": "+r.Reason)
				},
			})
			for _, tr := range tc.tries {
				err := dialTLS(t, b.TLSAddr().String(), ca.pool, tr.user, tr.certs)
				if (err == nil) != tr.accepted {
					t.Errorf("%s: connect error %v, want accepted=%v", tr.name, err, tr.accepted)
				}
			}
			// The plain listener asks for no certificate.
			if _, err := dial(t, "tcp://"+b.Addr().String(), "dev-a", "pw-dev-a", clientOpts{}); err != nil {
				t.Errorf("plain listener, device without a certificate: %v", err)
			}
			if tc.mode == broker.ClientCertsRequired {
				mu.Lock()
				got := strings.Join(refused, "\n")
				mu.Unlock()
				// Refusals by the TLS handshake (another CA, a server
				// certificate) never reach the CONNECT.
				want := strings.Join([]string{
					"dev-a: no client certificate: the broker requires one of devices over TLS",
					`dev-b: the client certificate is "dev-a"'s, not "dev-b"'s`,
					`mon: the client certificate is "dev-a"'s, not "mon"'s`,
				}, "\n")
				if got != want {
					t.Errorf("refusals:\n%s\nwant:\n%s\nlogs:\n%s", got, want, logs.String())
				}
			}
		})
	}
}

func TestParseClientCertMode(t *testing.T) {
	for in, want := range map[string]broker.ClientCertMode{"": broker.ClientCertsOff, "off": broker.ClientCertsOff, "optional": broker.ClientCertsOptional, "required": broker.ClientCertsRequired} {
		if got, err := broker.ParseClientCertMode(in); err != nil || got != want {
			t.Errorf("ParseClientCertMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := broker.ParseClientCertMode("on"); err == nil {
		t.Error("ParseClientCertMode(on): no error")
	}
	if _, err := broker.New(broker.Options{
		Addr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0", TLSConfig: &tls.Config{},
		ClientCerts: broker.ClientCertsRequired, Auth: broker.NewStaticAuth(),
	}); err == nil || !strings.Contains(err.Error(), "ClientCAs") {
		t.Errorf("New without ClientCAs: %v", err)
	}
}
