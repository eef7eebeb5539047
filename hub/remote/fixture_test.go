package remote

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/hub/metrics"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

const (
	adminToken   = "admin-token-0123456789abcdefghijklmnopqrstuvwxyz"
	monitorToken = "monitor-token-0123456789abcdefghijklmnopqrstuvwxyz"
	waitFor      = 10 * time.Second
)

// fixture is a hub's remote side on a real embedded broker: a store for
// the API's credentials, a fleet model with devices pi-1 and pi-2 (and
// pi-3, never connected), the Manager on the broker's inline connection,
// and the API on an httptest server.
type fixture struct {
	t      *testing.T
	b      *broker.Broker
	auth   *broker.StaticAuth
	hubC   broker.Conn
	model  *fleetmodel.Model
	met    *metrics.Metrics
	m      *Manager
	srv    *httptest.Server
	client *http.Client
	topics schema.Topics
	key    ed25519.PrivateKey // the hub's request signing key
}

// keySigner signs requests with a key, as pki.Signer does.
type keySigner struct{ key ed25519.PrivateKey }

func (k keySigner) SignRequest(canonical []byte) ([]byte, error) {
	return schema.SignRequest(canonical, k.key)
}

func newFixture(t *testing.T, tweak func(*Options)) *fixture {
	t.Helper()
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for name, tok := range map[string]string{"admin": adminToken, "watcher": monitorToken} {
		role := store.RoleAdmin
		if name == "watcher" {
			role = store.RoleMonitor
		}
		if err := st.PutCredential(t.Context(), name, role, tok); err != nil {
			t.Fatal(err)
		}
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, auth: broker.NewStaticAuth(), key: key}
	f.model = fleetmodel.New(fleetmodel.Options{})
	w := f.model.Writer()
	for _, d := range []string{"pi-1", "pi-2", "pi-3"} {
		w.PutDevice(d, fleetmodel.Device{UID: "uid-" + d})
		f.auth.Set(broker.Identity{Name: d, Role: broker.RoleDevice}, "pw-"+d)
	}
	log := slog.New(slog.DiscardHandler)
	f.b = brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: f.auth, Topics: f.topics, Logger: log})
	f.hubC = f.b.InlineConn()
	t.Cleanup(func() { _ = f.hubC.Close() })
	f.met = metrics.New(metrics.Gauges{TopReports: f.model.TopReports})
	opts := Options{
		Conn: f.hubC, Model: f.model, Topics: f.topics, Logger: log, Metrics: f.met,
		Signer:               keySigner{key},
		FirstResponseTimeout: 3 * time.Second, TopTimeout: 2 * time.Second,
	}
	if tweak != nil {
		tweak(&opts)
	}
	if f.m, err = New(opts); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Subscribe(t.Context()); err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Options{Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	f.m.Register(a)
	a.Handle("/metrics", api.Methods{http.MethodGet: f.met.Handler().ServeHTTP})
	a.Handle("/v1/devices/{name}/events", api.Methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, f.model.Events(r.PathValue("name"), ""))
	}})
	f.srv = httptest.NewServer(a)
	t.Cleanup(f.srv.Close)
	f.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	f.setOnline("pi-1", true)
	f.setOnline("pi-2", true)
	return f
}

// setOnline sets what the device's online topic last said.
func (f *fixture) setOnline(device string, online bool) {
	f.model.UpdateReport(device, "uid-"+device, func(r *fleetmodel.Report, _ bool) bool {
		r.Online = online
		r.LastSeen = time.Now().Add(-3 * time.Minute)
		if online {
			r.LastSeen = time.Now()
		}
		return true
	})
}

func (f *fixture) request(ctx context.Context, method, path, token string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// get returns the code and body of a GET.
func (f *fixture) get(path, token string) (*http.Response, string) {
	f.t.Helper()
	resp := f.request(f.t.Context(), http.MethodGet, path, token)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("GET %s: body: %v", path, err)
	}
	return resp, string(b)
}

func (f *fixture) dropped(reason string) float64 {
	return counterValue(f.t, f.met.RemoteResponsesDropped.WithLabelValues(reason))
}

func counterValue(t *testing.T, c prometheusCounter) float64 {
	t.Helper()
	var m dtoMetric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// awaitNoOps waits until the manager has no open operation.
func (f *fixture) awaitNoOps() {
	f.t.Helper()
	eventually(f.t, "no open operations", func() bool { return f.m.openOps() == 0 })
	if v := counterValue(f.t, f.met.RemoteOpenStreams); v != 0 {
		f.t.Errorf("fleet_remote_open_streams %v after every stream ended", v)
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// managerGoroutines counts the goroutines running this package's own
// (non-test) code: the ones an operation starts and must end. Goroutines
// of the test's HTTP clients, paho and the broker come and go on their own
// schedule, more slowly on a loaded machine, and are not what a leak of
// the manager's would be.
func managerGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if ownGoroutine(g) {
			n++
			found = append(found, g)
		}
	}
	return n, strings.Join(found, "\n\n")
}

// ownGoroutine reports whether a goroutine's stack has a frame in this
// package's non-test files.
func ownGoroutine(stack string) bool {
	lines := strings.Split(stack, "\n")
	for i := 1; i+1 < len(lines); i += 2 {
		if strings.Contains(lines[i], "fleetmq/fleet/hub/remote.") && !strings.Contains(lines[i+1], "_test.go:") {
			return true
		}
	}
	return false
}

// awaitGoroutines waits until at most base of the manager's goroutines
// run (managerGoroutines; base from the same count).
func awaitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		n, stacks := managerGoroutines()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the manager's goroutines, %d before:\n%s", n, base, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutineBase is the count awaitGoroutines compares with.
func goroutineBase() int {
	n, _ := managerGoroutines()
	return n
}

// ---- fakeDevice: a scripted agent -----------------------------------------------

// fakeDevice is an MQTT client logged in as a device: it receives the
// hub's requests on its requests topic and answers what the test says.
type fakeDevice struct {
	t    *testing.T
	name string
	c    paho.Client
	reqs chan *schema.Request
	top  schema.Topics
	wg   sync.WaitGroup // scripts
}

// script runs a part of the device's behaviour on a goroutine of its own;
// close waits for it.
func (d *fakeDevice) script(f func()) { d.wg.Go(f) }

// close waits for the scripts and disconnects.
func (d *fakeDevice) close() {
	d.wg.Wait()
	d.c.Disconnect(0)
}

func (f *fixture) device(name string) *fakeDevice {
	f.t.Helper()
	d := &fakeDevice{t: f.t, name: name, reqs: make(chan *schema.Request, 4096), top: f.topics}
	po := paho.NewClientOptions().
		AddBroker("tcp://" + f.b.Addr().String()).
		SetClientID(name).
		SetUsername(name).SetPassword("pw-" + name).
		SetProtocolVersion(4).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).
		SetOrderMatters(true).SetConnectTimeout(5 * time.Second)
	d.c = paho.NewClient(po)
	if tok := d.c.Connect(); !tok.WaitTimeout(waitFor) || tok.Error() != nil {
		f.t.Fatalf("device %s: connect: %v", name, tok.Error())
	}
	f.t.Cleanup(d.close)
	tok := d.c.Subscribe(f.topics.Device(name, schema.TopicRequests), 1, func(_ paho.Client, m paho.Message) {
		// As the agent does: every request must verify with the hub's key.
		r, err := schema.VerifyRequest(m.Payload(), schema.RequestCheck{
			Key: f.key.Public().(ed25519.PublicKey), Kind: schema.KindRequest, Device: name, Now: time.Now(),
		}, schema.DecodeRequest)
		if err != nil {
			f.t.Errorf("device %s: request does not verify: %v", name, err)
			return
		}
		select {
		case d.reqs <- r:
		default:
			f.t.Errorf("device %s: request buffer full", name)
		}
	})
	if !tok.WaitTimeout(waitFor) || tok.Error() != nil {
		f.t.Fatalf("device %s: subscribe: %v", name, tok.Error())
	}
	return d
}

// next returns the next request (of any op) within waitFor.
func (d *fakeDevice) next() *schema.Request {
	d.t.Helper()
	select {
	case r := <-d.reqs:
		return r
	case <-time.After(waitFor):
		d.t.Fatalf("device %s: no request within %v", d.name, waitFor)
		return nil
	}
}

// expect returns the next request of op, skipping acks (unless op is ack).
func (d *fakeDevice) expect(op string) *schema.Request {
	d.t.Helper()
	for {
		r := d.next()
		if r.Op == op {
			return r
		}
		if r.Op != schema.OpAck {
			d.t.Fatalf("device %s: got a %s request, want %s", d.name, r.Op, op)
		}
	}
}

// respond publishes a response to request id.
func (d *fakeDevice) respond(id string, seq int64, set func(*schema.Response)) {
	d.t.Helper()
	r := schema.Response{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse}, ID: id, Device: d.name, Seq: seq}
	if set != nil {
		set(&r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		d.t.Fatal(err)
	}
	tok := d.c.Publish(d.top.Device(d.name, schema.TopicResponses), 1, false, b)
	if !tok.WaitTimeout(waitFor) || tok.Error() != nil {
		d.t.Errorf("device %s: publish response: %v", d.name, tok.Error())
	}
}

func data(stream, s string) func(*schema.Response) {
	return func(r *schema.Response) { r.Stream, r.Data = stream, []byte(s) }
}

func done(r *schema.Response) { r.Done = true }

func failed(code, msg string) func(*schema.Response) {
	return func(r *schema.Response) { r.Done, r.Code, r.Error = true, code, msg }
}

// ---- exec client ---------------------------------------------------------------------

// execClient is a raw exec connection: the upgrade request, then frames.
type execClient struct {
	conn net.Conn
	br   *bufio.Reader
}

// dialExec sends the exec request and returns the answer; on 101 the
// connection carries frames.
func (f *fixture) dialExec(device, pod, query, token string, upgrade bool) (*http.Response, *execClient) {
	f.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	hdr := ""
	if upgrade {
		hdr = "Connection: Upgrade\r\nUpgrade: " + schema.ExecUpgradeProtocol + "\r\n"
	}
	fmt.Fprintf(conn, "POST /v1/devices/%s/pods/%s/exec?%s HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer %s\r\n%sContent-Length: 0\r\n\r\n",
		device, pod, query, token, hdr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		f.t.Fatalf("exec: read answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		return resp, nil
	}
	return resp, &execClient{conn: conn, br: br}
}

func (c *execClient) frame(t *testing.T) (byte, []byte) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(waitFor))
	typ, p, err := schema.ReadFrame(c.br, nil)
	if err != nil {
		t.Fatalf("exec: read frame: %v", err)
	}
	return typ, append([]byte(nil), p...)
}

// TestOwnGoroutine: the leak check counts a goroutine with a frame in the
// package's code, not one only in its tests or in other packages.
func TestOwnGoroutine(t *testing.T) {
	own := "goroutine 7 [select]:\ngithub.com/fleetmq/fleet/hub/remote.(*Manager).run(0xc0)\n\t/src/hub/remote/manager.go:120 +0x1\ncreated by github.com/fleetmq/fleet/hub/remote.New in goroutine 1\n\t/src/hub/remote/manager.go:80 +0x2"
	test := "goroutine 8 [chan receive]:\ngithub.com/fleetmq/fleet/hub/remote.(*fakeDevice).loop(0xc0)\n\t/src/hub/remote/fixture_test.go:250 +0x1"
	other := "goroutine 9 [IO wait]:\nnet/http.(*persistConn).readLoop(0xc0)\n\t/go/src/net/http/transport.go:2200 +0x1"
	if !ownGoroutine(own) || ownGoroutine(test) || ownGoroutine(other) {
		t.Errorf("ownGoroutine: own %v, test %v, other %v; want true, false, false", ownGoroutine(own), ownGoroutine(test), ownGoroutine(other))
	}
}
