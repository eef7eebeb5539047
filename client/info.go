package client

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Info reads what the hub says about itself (GET /v1/info): its version,
// its store id and the MQTT URL devices connect to.
func (c *Client) Info(ctx context.Context) (*schema.HubInfo, error) {
	var out schema.HubInfo
	if err := c.do(ctx, http.MethodGet, "/v1/info", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BrokerURL is the MQTT URL to give devices and monitors: the one the hub
// reports in info, else tcp://<hub host>:1883. guessed is true when info
// (nil when GET /v1/info failed) did not name one. A reported URL whose host
// is empty or a wildcard address (a listen address such as tcp://:1883 or
// tcp://0.0.0.0:1883) gets the hub's host instead, the one address the
// caller knows reaches the hub's machine.
func (c *Client) BrokerURL(info *schema.HubInfo) (brokerURL string, guessed bool) {
	host := c.base.Hostname()
	if info == nil || info.MQTTURL == "" {
		return "tcp://" + net.JoinHostPort(host, schema.DefaultBrokerPort), true
	}
	u, err := url.Parse(info.MQTTURL)
	if err != nil || u.Scheme == "" {
		return info.MQTTURL, false
	}
	if h := u.Hostname(); h == "" || isWildcard(h) {
		port := u.Port()
		if port == "" {
			port = schema.BrokerDefaultPort(u.Scheme)
		}
		u.Host = net.JoinHostPort(host, port)
	}
	return u.String(), false
}

func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// IsTLSBrokerURL reports whether an MQTT URL's scheme is a TLS one (ssl,
// tls, mqtts), as the agent understands them (schema.IsTLSBroker).
func IsTLSBrokerURL(brokerURL string) bool {
	scheme, _, _ := strings.Cut(brokerURL, "://")
	return schema.IsTLSBroker(&url.URL{Scheme: strings.ToLower(scheme)})
}

// BrokerHostPort splits an MQTT URL into host and port, with the scheme's
// default port when the URL names none (schema.BrokerHostPort).
func BrokerHostPort(brokerURL string) (host, port string, err error) {
	return schema.BrokerHostPort(brokerURL)
}
