package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// ClientCertMode says what the TLS listener asks of client certificates
// (Options.ClientCerts).
type ClientCertMode string

// Client certificate modes.
const (
	// ClientCertsOff: the TLS listener asks for none (the default).
	ClientCertsOff ClientCertMode = "off"
	// ClientCertsOptional: a client may present a certificate signed by
	// Options.ClientCAs; one that does must be the certificate of its
	// username (its CommonName equals the MQTT username).
	ClientCertsOptional ClientCertMode = "optional"
	// ClientCertsRequired: as optional, and a device connecting over TLS
	// without a certificate is refused. Bootstrap clients (which have no
	// certificate before they enroll) and monitors (which authenticate
	// with their token alone) may still connect without one; the plain
	// listener is not affected.
	ClientCertsRequired ClientCertMode = "required"
)

// ParseClientCertMode parses "off", "optional" or "required"; "" is off.
func ParseClientCertMode(s string) (ClientCertMode, error) {
	switch m := ClientCertMode(s); m {
	case "", ClientCertsOff:
		return ClientCertsOff, nil
	case ClientCertsOptional, ClientCertsRequired:
		return m, nil
	}
	return "", fmt.Errorf("client certificates %q: want off, optional or required", s)
}

// clientTLSConfig is the TLS listener's configuration for the mode: with
// client certificates on it asks for a certificate and verifies any a
// client presents against the CAs of the moment (verifyClientChain),
// and lets clients without one finish the handshake (even when they are
// required): whether a client may go without, and what a client whose
// certificate expired may do, is decided by its role, after its CONNECT
// (clientCertRefusal).
func clientTLSConfig(base *tls.Config, o Options) (*tls.Config, error) {
	if base == nil || o.ClientCerts == ClientCertsOff {
		return base, nil
	}
	if o.ClientCAs == nil && o.ClientCAsFunc == nil {
		return nil, fmt.Errorf("mqtt broker: client certificates %s: Options.ClientCAs is required", o.ClientCerts)
	}
	pool := o.ClientCAsFunc
	if pool == nil {
		pool = func() *x509.CertPool { return o.ClientCAs }
	}
	cfg := base.Clone()
	// The chain is verified by verifyClientChain, not by crypto/tls,
	// which would refuse an expired certificate in the handshake.
	cfg.ClientAuth = tls.RequestClientCert
	fixed := cfg.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		// Each handshake verifies against the pool of the moment (a
		// completed CA rotation drops the old CA).
		c := fixed.Clone()
		roots := pool()
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyClientChain(raw, roots, time.Now())
		}
		return c, nil
	}
	return cfg, nil
}

// verifyClientChain verifies the certificate chain a client presented
// (none is fine here) against roots, for client authentication, at now.
// A certificate whose only fault is that it expired is accepted: it
// chains to a CA of roots (current or next, never a retired one) and
// verifies at the last second of its life. Such a client is held to
// renewing it (Identity.RenewalOnly, clientCertRefusal).
func verifyClientChain(raw [][]byte, roots *x509.CertPool, now time.Time) error {
	if len(raw) == 0 {
		return nil
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if roots == nil {
		return errors.New("client certificate: no CA to verify it against")
	}
	opts := x509.VerifyOptions{
		Roots: roots, Intermediates: x509.NewCertPool(), CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	leaf := certs[0]
	_, err := leaf.Verify(opts)
	if err == nil {
		return nil
	}
	if now.After(leaf.NotAfter) {
		opts.CurrentTime = leaf.NotAfter.Add(-time.Second)
		if _, err2 := leaf.Verify(opts); err2 == nil {
			return nil // expired, and nothing else: renewal only
		}
	}
	return fmt.Errorf("client certificate of %q: %w", leaf.Subject.CommonName, err)
}

// clientCertRefusal says why an authenticated client may not connect for
// its client certificate, or "" when it may; renewal is true when the
// client is a device whose certificate expired: it may connect only to
// renew it (Identity.RenewalOnly). A certificate is an extra factor,
// never a replacement for the token: the client was authenticated by its
// credentials before this check, so a certificate of a deleted device,
// or presented with a rotated token, opens nothing.
func (b *Broker) clientCertRefusal(cl *mqtt.Client, id Identity) (why string, renewal bool) {
	if b.opts.ClientCerts == ClientCertsOff || id.Role == RoleHub {
		return "", false
	}
	tc, ok := cl.Net.Conn.(*tls.Conn)
	if !ok {
		return "", false // the plain listener
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		if b.opts.ClientCerts == ClientCertsRequired && id.Role == RoleDevice {
			return "no client certificate: the broker requires one of devices over TLS", false
		}
		return "", false
	}
	// The handshake verified the chain against the CAs, for client
	// authentication, maybe as expired (verifyClientChain); what is left
	// is whose certificate it is.
	if cn := certs[0].Subject.CommonName; cn != id.Name {
		return fmt.Sprintf("the client certificate is %q's, not %q's", cn, id.Name), false
	}
	if time.Now().After(certs[0].NotAfter) {
		if id.Role != RoleDevice {
			return "the client certificate expired " + certs[0].NotAfter.UTC().Format(time.RFC3339), false
		}
		return "", true
	}
	return "", false
}
