package broker

import (
	"crypto/tls"
	"fmt"

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
// client certificates on it verifies any certificate a client presents
// against the CAs, and lets clients without one finish the handshake
// (tls.VerifyClientCertIfGiven, even when they are required): whether a
// client may go without is decided by its role, after its CONNECT
// (clientCertRefusal).
func clientTLSConfig(base *tls.Config, o Options) (*tls.Config, error) {
	if base == nil || o.ClientCerts == ClientCertsOff {
		return base, nil
	}
	if o.ClientCAs == nil && o.ClientCAsFunc == nil {
		return nil, fmt.Errorf("mqtt broker: client certificates %s: Options.ClientCAs is required", o.ClientCerts)
	}
	cfg := base.Clone()
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	cfg.ClientCAs = o.ClientCAs
	if pool := o.ClientCAsFunc; pool != nil {
		// Each handshake verifies against the pool of the moment.
		fixed := cfg.Clone()
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := fixed.Clone()
			c.ClientCAs = pool()
			return c, nil
		}
	}
	return cfg, nil
}

// clientCertRefusal says why an authenticated client may not connect for
// its client certificate, or "" when it may. A certificate is an extra
// factor, never a replacement for the token: the client was authenticated
// by its credentials before this check, so a certificate of a deleted
// device, or presented with a rotated token, opens nothing.
func (b *Broker) clientCertRefusal(cl *mqtt.Client, id Identity) string {
	if b.opts.ClientCerts == ClientCertsOff || id.Role == RoleHub {
		return ""
	}
	tc, ok := cl.Net.Conn.(*tls.Conn)
	if !ok {
		return "" // the plain listener
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		if b.opts.ClientCerts == ClientCertsRequired && id.Role == RoleDevice {
			return "no client certificate: the broker requires one of devices over TLS"
		}
		return ""
	}
	// The handshake verified the chain against ClientCAs, for client
	// authentication; what is left is whose certificate it is.
	if cn := certs[0].Subject.CommonName; cn != id.Name {
		return fmt.Sprintf("the client certificate is %q's, not %q's", cn, id.Name)
	}
	return ""
}
