package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPlainListenersOnlyOnLoopback(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // in the error; "" for none
	}{
		{"defaults", Options{}, ""},
		{"loopback", Options{HTTPAddr: "127.0.0.1:0", MQTTAddr: "[::1]:0"}, ""},
		{"localhost", Options{HTTPAddr: "localhost:0", MQTTAddr: "localhost:0"}, ""},
		{"http on every interface", Options{HTTPAddr: ":8080"}, "--insecure-plaintext"},
		{"http on an address", Options{HTTPAddr: "10.0.0.1:8080"}, "--http-addr 10.0.0.1:8080"},
		{"mqtt on every interface", Options{MQTTAddr: ":1883"}, "--mqtt-addr :1883"},
		{"mqtt unspecified", Options{MQTTAddr: "0.0.0.0:1883"}, "MQTT over TLS"},
		{"insecure", Options{HTTPAddr: ":8080", MQTTAddr: ":1883", InsecurePlaintext: true}, ""},
		{"external broker", Options{MQTTAddr: ":1883", Broker: "tcp://mq:1883"}, ""},
		{"https only", Options{HTTPAddr: Off, HTTPSAddr: ":8443"}, ""},
		{"no api", Options{HTTPAddr: Off}, "no API listener"},
		{"no mqtt", Options{MQTTAddr: Off}, "no MQTT listener"},
		{"mqtts only", Options{MQTTAddr: Off, MQTTTLSAddr: ":8883"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.setDefaults()
			err := o.check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
	// New refuses before binding anything or creating the store.
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := New(t.Context(), Options{DataDir: dir, HTTPAddr: ":0"}); err == nil || !strings.Contains(err.Error(), "--insecure-plaintext") {
		t.Errorf("New with plain HTTP on every interface: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused hub left %s: %v", dir, err)
	}
}

// TestHistoryInterval: --history-interval defaults to 5 min and refuses
// what would not make a sample.
func TestHistoryInterval(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string // in the error; "" for none
	}{
		{0, ""}, {time.Second, ""}, {time.Hour, ""},
		{-time.Second, "--history-interval -1s"}, {500 * time.Millisecond, "--history-interval 500ms"},
	} {
		o := Options{HistoryInterval: tc.in}
		o.setDefaults()
		err := o.check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v refused: %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one with %q", tc.in, err, tc.want)
		}
		if tc.in == 0 && o.HistoryInterval != DefaultHistoryInterval {
			t.Errorf("default history interval %v, want %v", o.HistoryInterval, DefaultHistoryInterval)
		}
	}
}
