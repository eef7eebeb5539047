package enroll

import (
	"crypto/tls"
	"net/url"

	"github.com/fleetmq/fleet/schema"
)

// ForBroker returns the TLS configuration of a connection to the broker
// at u, made from cfg, the agent's broker trust (BrokerTLS, WithCABundle,
// WithClientCert): a device with a list of brokers verifies every one of
// them by the same trust (the same CA file, saved CA or pinned CA hash),
// each for its own name. The copy's ServerName is u's host, and the name
// a handshake without SNI (an IP address) verifies is u's host too, not
// the one cfg was made for. nil stays nil, and a plain broker gets cfg
// as it is (it is not used).
func ForBroker(cfg *tls.Config, u *url.URL) *tls.Config {
	if cfg == nil || u == nil || !schema.IsTLSBroker(u) {
		return cfg
	}
	host := u.Hostname()
	out := cfg.Clone()
	out.ServerName = host
	if verify := cfg.VerifyConnection; verify != nil {
		out.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.ServerName == "" {
				// No SNI (an IP address): verify the host dialled, which
				// the configuration's own fallback does not know.
				cs.ServerName = host
			}
			return verify(cs)
		}
	}
	return out
}
