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
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/schema"
)

// issueAt signs a client certificate of cn valid from notBefore to
// notAfter.
func (ca *testCA) issueAt(cn string, notBefore, notAfter time.Time) tls.Certificate {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// renewalClient connects over TLS as username with password, presenting
// cert; it returns the client or the connect error.
func renewalClient(t *testing.T, addr string, roots *x509.CertPool, username, password string, cert tls.Certificate) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().
		AddBroker("ssl://" + addr).
		SetClientID(fmt.Sprintf("%s-%016x", username, time.Now().UnixNano())).
		SetUsername(username).SetPassword(password).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetTLSConfig(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(waitTimeout) {
		t.Fatalf("connect as %s: timed out", username)
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, nil
}

// TestClientCertsExpiredRenewalOnly: under required (and optional), a
// device whose client certificate of a trusted CA expired, and nothing
// else, connects with its token in a renewal-only session; another CA,
// a retired CA, a certificate not yet valid, another device's
// certificate, a wrong token and a monitor's expired certificate are
// refused.
func TestClientCertsExpiredRenewalOnly(t *testing.T) {
	for _, mode := range []broker.ClientCertMode{broker.ClientCertsRequired, broker.ClientCertsOptional} {
		t.Run(string(mode), func(t *testing.T) { testExpiredRenewalOnly(t, mode) })
	}
}

func testExpiredRenewalOnly(t *testing.T, mode broker.ClientCertMode) {
	current, next, foreign := newTestCA(t), newTestCA(t), newTestCA(t)
	server := current.issue("127.0.0.1", x509.ExtKeyUsageServerAuth)
	roots := x509.NewCertPool()
	roots.AddCert(current.cert)
	devA, devB := broker.Identity{Name: "dev-a", Role: broker.RoleDevice}, broker.Identity{Name: "dev-b", Role: broker.RoleDevice}
	mon := broker.Identity{Name: "mon", Role: broker.RoleMonitor}
	auth := broker.NewStaticAuth()
	for _, id := range []broker.Identity{devA, devB, mon} {
		auth.Set(id, "pw-"+id.Name)
	}
	// The hub's pool: current and next; after "retire", next alone.
	var retired atomic.Bool
	pool := func() *x509.CertPool {
		p := x509.NewCertPool()
		if !retired.Load() {
			p.AddCert(current.cert)
		}
		p.AddCert(next.cert)
		return p
	}
	var mu sync.Mutex
	var refused []string
	b := brokertest.Start(t, broker.Options{
		Addr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0",
		TLSConfig:   &tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12},
		ClientCerts: mode, ClientCAsFunc: pool,
		Auth: auth, Topics: topics, Logger: slog.New(slog.DiscardHandler),
		OnLoginRefused: func(r broker.LoginRefusal) {
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, r.Username+": "+r.Reason)
		},
	})
	addr := b.TLSAddr().String()
	now := time.Now()
	expired := func(ca *testCA, cn string) tls.Certificate {
		return ca.issueAt(cn, now.Add(-2*time.Hour), now.Add(-time.Minute))
	}
	for _, tr := range []struct {
		name, user, password string
		cert                 tls.Certificate
	}{
		{"another CA's expired certificate", "dev-a", "pw-dev-a", expired(foreign, "dev-a")},
		{"a certificate not yet valid", "dev-a", "pw-dev-a", current.issueAt("dev-a", now.Add(time.Hour), now.Add(2*time.Hour))},
		{"dev-a's expired certificate used by dev-b", "dev-b", "pw-dev-b", expired(current, "dev-a")},
		{"an expired certificate with a wrong token", "dev-a", "wrong", expired(current, "dev-a")},
		{"a monitor's expired certificate", "mon", "pw-mon", expired(current, "mon")},
	} {
		if _, err := renewalClient(t, addr, roots, tr.user, tr.password, tr.cert); err == nil {
			t.Errorf("%s: accepted, want refused", tr.name)
		}
	}
	mu.Lock()
	got := strings.Join(refused, "\n")
	mu.Unlock()
	for _, want := range []string{`dev-b: the client certificate is "dev-a"'s, not "dev-b"'s`, "dev-a: bad credentials", "mon: the client certificate expired"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusals:\n%s\nwant one with %q", got, want)
		}
	}

	// The expired certificates of the current and of the next CA, with
	// the device's token: renewal only.
	for _, ca := range []*testCA{current, next} {
		c, err := renewalClient(t, addr, roots, "dev-a", "pw-dev-a", expired(ca, "dev-a"))
		if err != nil {
			t.Fatalf("expired certificate of a trusted CA with a valid token: %v", err)
		}
		checkRenewalOnlySession(t, c)
	}
	// A retired CA's expired certificate no longer verifies.
	retired.Store(true)
	if _, err := renewalClient(t, addr, roots, "dev-a", "pw-dev-a", expired(current, "dev-a")); err == nil {
		t.Error("a retired CA's expired certificate: accepted, want refused")
	}
	// A valid certificate still gets the normal session.
	c, err := renewalClient(t, addr, roots, "dev-a", "pw-dev-a", next.issue("dev-a", x509.ExtKeyUsageClientAuth))
	if err != nil {
		t.Fatalf("valid certificate: %v", err)
	}
	if code := subscribeCode(t, c, topics.Device("dev-a", schema.TopicDesired)); code >= 0x80 {
		t.Errorf("valid certificate: subscribe desired refused (%#x)", code)
	}
}

// checkRenewalOnlySession checks that c may read its certificate topic
// and nothing else.
func checkRenewalOnlySession(t *testing.T, c paho.Client) {
	t.Helper()
	if code := subscribeCode(t, c, topics.Device("dev-a", schema.TopicCertificate)); code >= 0x80 {
		t.Errorf("renewal-only session: subscribe certificate refused (%#x)", code)
	}
	for _, topic := range []string{
		topics.Device("dev-a", schema.TopicDesired), topics.Device("dev-a", schema.TopicRequests),
		topics.Device("dev-b", schema.TopicCertificate),
	} {
		if code := subscribeCode(t, c, topic); code < 0x80 {
			t.Errorf("renewal-only session: subscribe %s granted (%#x), want refused", topic, code)
		}
	}
	tok := c.Publish(topics.Device("dev-a", schema.TopicCSR), 0, false, []byte(`{}`))
	if !tok.WaitTimeout(waitTimeout) || tok.Error() != nil {
		t.Errorf("renewal-only session: publish csr: %v", tok.Error())
	}
}

func subscribeCode(t *testing.T, c paho.Client, topic string) byte {
	t.Helper()
	tok := c.Subscribe(topic, 1, func(paho.Client, paho.Message) {})
	if !tok.WaitTimeout(waitTimeout) {
		t.Fatalf("subscribe %s: timed out", topic)
	}
	if err := tok.Error(); err != nil {
		return 0x80
	}
	return tok.(*paho.SubscribeToken).Result()[topic]
}

// TestAllowedRenewalOnly: a renewal-only device session may publish only
// its csr topic and read only its certificate topic.
func TestAllowedRenewalOnly(t *testing.T) {
	id := broker.Identity{Name: "dev-a", Role: broker.RoleDevice, RenewalOnly: true}
	allowed := map[string]bool{
		topics.Device("dev-a", schema.TopicCSR) + " w":         true,
		topics.Device("dev-a", schema.TopicCertificate) + " r": true,
	}
	for _, dev := range []string{"dev-a", "dev-b"} {
		for _, kind := range []string{schema.TopicDesired, schema.TopicRequests, schema.TopicCertificate, schema.TopicStatus,
			schema.TopicOnline, schema.TopicEvents, schema.TopicCrashReports, schema.TopicResponses, schema.TopicCSR} {
			topic := topics.Device(dev, kind)
			for _, write := range []bool{false, true} {
				key := topic + map[bool]string{false: " r", true: " w"}[write]
				if got := broker.Allowed(topics, id, topic, write); got != allowed[key] {
					t.Errorf("Allowed(renewal-only dev-a, %s) = %v, want %v", key, got, allowed[key])
				}
			}
		}
	}
	for _, f := range []string{"#", topics.DeviceFilter(schema.TopicCertificate)} {
		if broker.Allowed(topics, id, f, false) {
			t.Errorf("Allowed(renewal-only dev-a, subscribe %s) = true", f)
		}
	}
}
