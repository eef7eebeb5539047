package edgeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

// certRenewRetry is how long the agent waits for the hub's answer before
// it asks again for a certificate that is still due.
const certRenewRetry = 5 * time.Minute

// certRenewal renews the device's client certificate (mutual TLS) over
// its MQTT session: once two thirds of its lifetime have passed, or
// once it expired (the agent then presents it anyway and the broker
// admits it, on its token, in a renewal-only session), the agent
// publishes a CSR with its client key on its csr topic, at connect and
// at every resync; the hub answers on the certificate topic and the new
// certificate, checked against the key and the CAs the agent trusts, is
// used from the next connection on.
type certRenewal struct {
	a *Agent

	mu    sync.Mutex
	asked time.Time // last request sent
}

// clientCertDue reads the client certificate of stateDir and reports
// whether it is to be renewed at now (false without one: a device
// without mutual TLS asks for nothing).
func clientCertDue(stateDir string, now time.Time) (bool, *x509.Certificate) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(stateDir, enroll.ClientCertFile), filepath.Join(stateDir, enroll.ClientKeyFile))
	if err != nil || pair.Leaf == nil {
		return false, nil
	}
	leaf := pair.Leaf
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return !now.Before(leaf.NotAfter.Add(-life / 3)), leaf
}

// check asks for a new certificate when the current one is due and no
// request is waiting for its answer (force: a new connection, ask
// again).
func (r *certRenewal) check(ctx context.Context, force bool) {
	a := r.a
	now := a.o.Clock.Now()
	due, leaf := clientCertDue(a.o.StateDir, now)
	if !due || a.session == nil {
		return
	}
	r.mu.Lock()
	if !force && !r.asked.IsZero() && now.Sub(r.asked) < certRenewRetry {
		r.mu.Unlock()
		return
	}
	r.asked = now
	r.mu.Unlock()
	csr, err := enroll.ClientCSR(a.o.StateDir, a.o.Device)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(schema.DeviceCertificateRequest{CSR: string(csr)}); err == nil {
			err = a.session.PublishQoS0(ctx, a.o.Topics.Device(a.o.Device, schema.TopicCSR), b)
		}
	}
	if err != nil {
		a.log.Warn("could not ask the hub to renew the client certificate; asking again later", "err", err)
		return
	}
	a.log.Info("asked the hub to renew the client certificate", "expires", leaf.NotAfter.Format(time.RFC3339), "expired", now.After(leaf.NotAfter))
}

// certCheckInterval is how often a connected agent looks whether its
// client certificate is due.
const certCheckInterval = time.Minute

// run checks the certificate every certCheckInterval until ctx is done.
func (r *certRenewal) run(ctx context.Context) {
	t := time.NewTicker(certCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.a.session.Connected() || r.a.session.RenewalOnly() {
				r.check(ctx, false)
			}
		}
	}
}

// onCertificate saves the hub's answer.
func (r *certRenewal) onCertificate(payload []byte) {
	a := r.a
	var dc schema.DeviceCertificate
	err := json.Unmarshal(payload, &dc)
	if err == nil && dc.Device != a.o.Device {
		err = fmt.Errorf("the answer is for device %q", schema.Truncate(dc.Device, 64, "..."))
	}
	if err == nil {
		err = r.verify([]byte(dc.Certificate))
	}
	if err == nil {
		err = enroll.SaveClientCert(a.o.StateDir, []byte(dc.Certificate))
	}
	if err != nil {
		a.log.Warn("refused a client certificate from the hub; keeping the current one", "err", err)
		a.events.Record(schema.EventWarning, "ClientCertificateRefused", "", "", err.Error())
		return
	}
	r.mu.Lock()
	r.asked = time.Time{}
	r.mu.Unlock()
	msg := "renewed the client certificate: valid until " + dc.NotAfter.Format(time.RFC3339) + ", used from the next connection on"
	a.log.Info(msg)
	a.events.Record(schema.EventNormal, "ClientCertificateRenewed", "", "", msg)
	if a.session.RenewalOnly() {
		// The session was for renewing alone: the normal one now.
		a.log.Info("reconnecting with the renewed client certificate")
		a.session.Reconnect()
	}
}

// verify checks that certPEM is a client certificate of a CA the agent
// trusts (its CA bundle; without one, the hub it is connected to vouched
// for it over the verified TLS session).
func (r *certRenewal) verify(certPEM []byte) error {
	cert, err := tls.X509KeyPair(certPEM, mustRead(filepath.Join(r.a.o.StateDir, enroll.ClientKeyFile)))
	if err != nil || cert.Leaf == nil {
		return fmt.Errorf("client certificate: %w", errors.Join(err, errors.New("does not match client.key")))
	}
	b, err := os.ReadFile(filepath.Join(r.a.o.StateDir, enroll.CABundleFile))
	if err != nil {
		return nil
	}
	cas, err := enroll.ParseCABundle(b)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("client certificate: not of a CA the agent trusts: %w", err)
	}
	return nil
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}
