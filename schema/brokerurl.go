package schema

import (
	"errors"
	"fmt"
	"net"
	"net/url"
)

// The default broker ports: MQTT over TCP, and over TLS.
const (
	DefaultBrokerPort    = "1883"
	DefaultBrokerTLSPort = "8883"
)

// ParseBrokerURL checks a broker URL and returns it with the scheme's
// default port filled in when it names none. The schemes are tcp:// and
// mqtt:// (plain, port 1883) and ssl://, tls:// and mqtts:// (TLS, port
// 8883); a host is required. Errors name the URL with its password
// redacted.
func ParseBrokerURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue would repeat the URL, password and all
		}
		return nil, fmt.Errorf("broker URL: %w", err)
	}
	switch u.Scheme {
	case "tcp", "mqtt", "ssl", "tls", "mqtts":
	default:
		return nil, fmt.Errorf("broker %q: scheme must be tcp, mqtt, ssl, tls or mqtts", u.Redacted())
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("broker %q: no host", u.Redacted())
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), BrokerDefaultPort(u.Scheme))
	}
	return u, nil
}

// IsTLS reports whether a broker URL's scheme is a TLS one: ssl, tls or
// mqtts.
func IsTLSBroker(u *url.URL) bool {
	switch u.Scheme {
	case "ssl", "tls", "mqtts":
		return true
	}
	return false
}

// DefaultPortFor returns the default port of a broker URL scheme: 8883
// for the TLS ones, else 1883.
func BrokerDefaultPort(scheme string) string {
	if IsTLSBroker(&url.URL{Scheme: scheme}) {
		return DefaultBrokerTLSPort
	}
	return DefaultBrokerPort
}

// HostPort splits a broker URL into host and port, with the scheme's
// default port when the URL names none. Unlike ParseBrokerURL it does not
// judge the scheme or require a host: it reads what a hub reported.
func BrokerHostPort(s string) (host, port string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", err
	}
	port = u.Port()
	if port == "" {
		port = BrokerDefaultPort(u.Scheme)
	}
	return u.Hostname(), port, nil
}
