package hub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mqttio/mqttiotest"
	"github.com/fleetmq/fleet/schema"
)

// testHub is an in-process hub on loopback ports.
type testHub struct {
	*Hub
	token string
	logs  *lockedBuffer
	stop  func() error // ends Run, once; the test's cleanup calls it
}

// stopForTest stops the hub before the test ends.
func (h *testHub) stopForTest(t testing.TB) {
	t.Helper()
	if err := h.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func startHub(t testing.TB, opts Options) *testHub {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	if opts.HTTPAddr == "" {
		opts.HTTPAddr = "127.0.0.1:0"
	}
	if opts.MQTTAddr == "" {
		opts.MQTTAddr = "127.0.0.1:0"
	}
	logs := &lockedBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ready := make(chan struct{})
	opts.Ready = func(Info) { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	h, err := New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("hub logs:\n%s", logs.String())
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("hub not ready")
	}
	conf, err := readAdminConfig(h.Info().AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{Hub: h, token: conf.Token, logs: logs, stop: stop}
}

func (h *testHub) do(t testing.TB, token, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.Info().URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestHubAccessRoutes(t *testing.T) {
	h := startHub(t, Options{Version: "v9.9.9"})
	admin := h.token
	tests := []struct {
		name, method, path, body string
		admin                    bool
		want                     int
		contains                 string
	}{
		{"info", "GET", "/v1/info", "", true, 200, `"version":"v9.9.9"`},
		{"info POST", "POST", "/v1/info", "", true, 405, "MethodNotAllowed"},
		{"info without token", "GET", "/v1/info", "", false, 401, "Unauthorized"},
		{"credential", "POST", "/v1/credentials", `{"name":"grafana","role":"monitor"}`, true, 201, `"token":`},
		{"again", "POST", "/v1/credentials", `{"name":"grafana","role":"monitor"}`, true, 409, "AlreadyExists"},
		{"unknown role", "POST", "/v1/credentials", `{"name":"boss","role":"root"}`, true, 400, `"field":"role"`},
		{"bad name", "POST", "/v1/credentials", `{"name":"Not Valid","role":"monitor"}`, true, 400, `"field":"name"`},
		{"token given", "POST", "/v1/credentials", `{"name":"x","role":"monitor","token":"mine"}`, true, 400, `"field":"token"`},
		{"unknown field", "POST", "/v1/credentials", `{"name":"x","role":"monitor","colour":"red"}`, true, 400, "colour"},
		{"not JSON", "POST", "/v1/credentials", `{{`, true, 400, "BadRequest"},
		{"hub's username", "POST", "/v1/credentials", `{"name":"fleet-hub","role":"monitor"}`, true, 400, "reserved"},
		{"list", "GET", "/v1/credentials", "", true, 200, `{"name":"grafana","role":"monitor"}`},
		{"delete admin", "DELETE", "/v1/credentials/admin", "", true, 403, "admin-token"},
		{"delete missing", "DELETE", "/v1/credentials/nobody", "", true, 404, "NotFound"},
		{"acl", "GET", "/v1/mosquitto/acl", "", true, 200, "user fleet-hub\ntopic readwrite fleet/v1/#"},
		{"passwd", "GET", "/v1/mosquitto/passwd", "", true, 200, "\nfleet-hub:$7$101$"},
		{"metrics", "GET", "/metrics", "", true, 200, "fleet_devices 0"},
		{"events of a missing device", "GET", "/v1/devices/nope/events", "", true, 404, "NotFound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := ""
			if tt.admin {
				tok = admin
			}
			code, body := h.do(t, tok, tt.method, tt.path, tt.body)
			if code != tt.want || !strings.Contains(string(body), tt.contains) {
				t.Errorf("%s %s: %d %s, want %d containing %q", tt.method, tt.path, code, body, tt.want, tt.contains)
			}
		})
	}

	// A monitor reads metrics, but neither the mosquitto files nor the
	// credentials (least privilege, hub/API.md "Roles"), and writes
	// nothing.
	_, body := h.do(t, admin, "POST", "/v1/credentials", `{"name":"mon","role":"monitor"}`)
	var cred schema.Credential
	if err := json.Unmarshal(body, &cred); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/metrics", "", 200},
		{"GET", "/v1/mosquitto/acl", "", 403},
		{"GET", "/v1/mosquitto/passwd", "", 403},
		{"GET", "/v1/credentials", "", 403},
		{"POST", "/v1/credentials", `{"name":"x","role":"monitor"}`, 403},
		{"DELETE", "/v1/credentials/grafana", "", 403},
	} {
		if code, b := h.do(t, cred.Token, c.method, c.path, c.body); code != c.want {
			t.Errorf("monitor %s %s: %d %s, want %d", c.method, c.path, code, b, c.want)
		}
	}
	// A credential may not take a device's name (they share the MQTT
	// username space).
	if code, b := h.do(t, admin, "POST", "/v1/apply", "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: pi\n"); code != 200 {
		t.Fatalf("apply: %d %s", code, b)
	}
	if code, b := h.do(t, admin, "POST", "/v1/credentials", `{"name":"pi","role":"monitor"}`); code != 409 {
		t.Errorf("credential named after a device: %d %s", code, b)
	}
	if code, b := h.do(t, admin, "GET", "/v1/devices/pi/events", ""); code != 200 || !strings.Contains(string(b), `"items":[]`) {
		t.Errorf("events: %d %s", code, b)
	}
	// Tokens never reach the logs.
	if strings.Contains(h.logs.String(), cred.Token) || strings.Contains(h.logs.String(), admin) {
		t.Error("a token was logged")
	}
	if code, b := h.do(t, admin, "GET", "/metrics", ""); code != 200 || !strings.Contains(string(b), `fleet_api_request_duration_seconds_count{code="201",route="/v1/credentials"}`) {
		t.Errorf("metrics: %d", code)
	}
}

func TestHubMQTTOverTLS(t *testing.T) {
	cert := mqttiotest.SelfSigned(t)
	certFile, keyFile := cert.WriteFiles(t, t.TempDir(), "hub")
	h := startHub(t, Options{TLSCertFile: certFile, TLSKeyFile: keyFile, MQTTTLSAddr: "127.0.0.1:0"})
	info := h.Info()
	if !strings.HasPrefix(info.MQTTURL, "ssl://127.0.0.1:") || info.MQTTTLSAddr == "" {
		t.Fatalf("info %+v", info)
	}
	if code, b := h.do(t, h.token, "POST", "/v1/apply", "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: pi\n"); code != 200 {
		t.Fatalf("apply: %d %s", code, b)
	}
	_, b := h.do(t, h.token, "POST", "/v1/devices/pi/token", "")
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(b, &cred); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(info.MQTTURL).SetClientID("pi").SetUsername("pi").SetPassword(cred.Token).
		SetTLSConfig(&tls.Config{RootCAs: cert.Pool, MinVersion: tls.VersionTLS12}).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect over TLS: %v", tok.Error())
	}
	defer c.Disconnect(0)
	tok := c.Subscribe(schema.Topics{}.Device("pi", schema.TopicDesired), 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- m.Payload():
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	select {
	case p := <-got:
		var ds schema.DesiredState
		if err := json.Unmarshal(p, &ds); err != nil || ds.Device != "pi" || ds.Generation != 1 {
			t.Errorf("desired over TLS: %s %v", p, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no desired state over TLS")
	}
}

func TestHubRefusesBadMQTTOptions(t *testing.T) {
	for _, o := range []Options{
		{TLSCertFile: "x.crt"},
		{Broker: "http://example.com"},
		{AdvertiseMQTTURL: "tcp://"},
		{Topics: schema.Topics{Prefix: "fleet/+/v1"}},
	} {
		o.DataDir, o.HTTPAddr, o.MQTTAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
		if _, err := New(t.Context(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// BenchmarkListDevices10kWithStatus is GET /v1/devices of 10,000 devices
// that have all reported, each with its merged status.
//
//	go test -run XXX -bench ListDevices10kWithStatus -benchtime 20x ./hub/
func BenchmarkListDevices10kWithStatus(b *testing.B) {
	h := startHub(b, Options{})
	const n = 10000
	for start := 0; start < n; start += 1000 {
		var docs []string
		for i := start; i < start+1000; i++ {
			docs = append(docs, fmt.Sprintf("apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: d%05d\n  labels: {site: s%d}\n", i, i%10))
		}
		if code, body := h.do(b, h.token, "POST", "/v1/apply", strings.Join(docs, "---\n")); code != 200 {
			b.Fatalf("apply: %d %s", code, body)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.model.Desired(fmt.Sprintf("d%05d", n-1)) == nil {
		if time.Now().After(deadline) {
			b.Fatal("desired states not computed")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	for i := range n {
		name := fmt.Sprintf("d%05d", i)
		p, _ := json.Marshal(schema.DeviceStatus{Device: name, ObservedGeneration: 1, Time: time.Now(),
			Agent: schema.AgentInfo{Version: "v1", OS: "linux", Arch: "arm64"},
			Pods:  []schema.PodStatus{{Name: "web", Hash: "0123456789abcdef", Phase: schema.PhaseRunning, Ready: true, Containers: []schema.ContainerStatus{{Name: "app", Image: "nginx:1", State: "running"}}}}})
		h.ingest.Handle("fleet/v1/devices/"+name+"/status", p)
		h.ingest.Handle("fleet/v1/devices/"+name+"/online", []byte("online"))
	}
	var size int
	b.ResetTimer()
	for range b.N {
		code, body := h.do(b, h.token, "GET", "/v1/devices", "")
		if code != 200 {
			b.Fatalf("list: %d", code)
		}
		size = len(body)
	}
	b.StopTimer()
	b.ReportMetric(float64(size)/(1<<20), "MiB/list")
}

func TestMQTTURLFor(t *testing.T) {
	for _, tt := range []struct {
		addr   string
		secure bool
		want   string
	}{
		{"127.0.0.1:1883", false, "tcp://127.0.0.1:1883"},
		{"[::]:1883", false, "tcp://0.0.0.0:1883"},
		{"0.0.0.0:8883", true, "ssl://0.0.0.0:8883"},
		{"[::1]:1883", false, "tcp://[::1]:1883"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := mqttURLFor(a, tt.secure); got != tt.want {
			t.Errorf("mqttURLFor(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
}

// handOverConn is a broker.Conn whose subscriptions the test feeds by hand.
type handOverConn struct {
	broker.Conn
	handlers []func(string, []byte)
}

func (c *handOverConn) Subscribe(_ context.Context, _ string, h func(string, []byte)) error {
	c.handlers = append(c.handlers, h)
	return nil
}

// The hub subscribes, and devices connect, before the store is loaded:
// what arrives meanwhile waits for release, and none of it is lost.
func TestDeferredConnHoldsMessagesUntilReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDeferredConn()
		inner := &handOverConn{}
		d.set(inner)
		var got []string
		if err := d.Subscribe(t.Context(), "fleet/v1/devices/+/status", func(topic string, _ []byte) { got = append(got, topic) }); err != nil {
			t.Fatal(err)
		}
		delivered := false
		go func() {
			inner.handlers[0]("early", nil)
			delivered = true
		}()
		synctest.Wait() // the delivering goroutine is blocked
		if len(got) > 0 || delivered {
			t.Fatalf("before release: handled %q, delivery returned %v", got, delivered)
		}
		d.release()
		synctest.Wait()
		inner.handlers[0]("late", nil)
		if !delivered || !slices.Equal(got, []string{"early", "late"}) {
			t.Fatalf("after release: handled %q, delivery returned %v", got, delivered)
		}

		// A hub shutting down before it was loaded drops what is held.
		d2 := newDeferredConn()
		inner2 := &handOverConn{}
		d2.set(inner2)
		ctx, cancel := context.WithCancel(t.Context())
		if err := d2.Subscribe(ctx, "x", func(string, []byte) { t.Error("handled after shutdown") }); err != nil {
			t.Fatal(err)
		}
		cancel()
		inner2.handlers[0]("held", nil)
	})
}
