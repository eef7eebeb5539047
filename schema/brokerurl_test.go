package schema

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseBrokerURL(t *testing.T) {
	tests := []struct {
		in, host string
		tls      bool
		err      string // a part of the error; "" for none
	}{
		{"tcp://hub:1883", "hub:1883", false, ""},
		{"tcp://hub", "hub:1883", false, ""},
		{"mqtt://10.0.0.1", "10.0.0.1:1883", false, ""},
		{"ssl://hub", "hub:8883", true, ""},
		{"tls://hub:9999", "hub:9999", true, ""},
		{"mqtts://[::1]", "[::1]:8883", true, ""},
		{"MQTTS://hub", "hub:8883", true, ""},
		{"tcp://u:pw@hub", "hub:1883", false, ""},
		{"http://hub", "", false, `broker "http://hub": scheme must be tcp, mqtt, ssl, tls or mqtts`},
		{"hub:1883", "", false, "scheme must be tcp"},
		{"tcp://", "", false, `broker "tcp:": no host`},
		{"tcp://:1883", "", false, "no host"},
		{"ftp://u:secret@hub", "", false, `broker "ftp://u:xxxxx@hub"`},
		{"tcp://u:secret@hub:x", "", false, "broker URL: invalid port"},
	}
	for _, tt := range tests {
		u, err := ParseBrokerURL(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseBrokerURL(%q) err = %v, want it to contain %q", tt.in, err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseBrokerURL(%q) err = %v: shows the password", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBrokerURL(%q) err = %v", tt.in, err)
			continue
		}
		if u.Host != tt.host || IsTLSBroker(u) != tt.tls {
			t.Errorf("ParseBrokerURL(%q) = %s tls=%v, want %s tls=%v", tt.in, u.Host, IsTLSBroker(u), tt.host, tt.tls)
		}
	}
}

func TestIsTLSBroker(t *testing.T) {
	for scheme, want := range map[string]bool{"tcp": false, "mqtt": false, "ssl": true, "tls": true, "mqtts": true, "https": false, "": false} {
		if got := IsTLSBroker(&url.URL{Scheme: scheme}); got != want {
			t.Errorf("IsTLSBroker(%s://) = %v, want %v", scheme, got, want)
		}
	}
}

func TestBrokerHostPort(t *testing.T) {
	tests := []struct{ url, host, port string }{
		{"tcp://10.0.0.5:1883", "10.0.0.5", "1883"},
		{"tcp://hub.lan", "hub.lan", "1883"},
		{"ssl://hub.lan", "hub.lan", "8883"},
		{"mqtts://[fd00::5]", "fd00::5", "8883"},
		{"tls://hub.lan:9999", "hub.lan", "9999"},
		{"tcp://:1883", "", "1883"}, // a listen address, as a hub may report it
	}
	for _, tt := range tests {
		host, port, err := BrokerHostPort(tt.url)
		if err != nil || host != tt.host || port != tt.port {
			t.Errorf("BrokerHostPort(%q) = %q, %q, %v; want %q, %q", tt.url, host, port, err, tt.host, tt.port)
		}
	}
	if _, _, err := BrokerHostPort("tcp://h:x"); err == nil {
		t.Error("HostPort of a bad port succeeded")
	}
}
