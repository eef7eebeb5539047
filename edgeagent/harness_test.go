package edgeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// testAuth is a tiny auth hook local to these tests: devices log in with
// username = device name and password = token; every topic is allowed.
// (The real per-device ACL lives in the broker package.)
type testAuth struct {
	mqtt.HookBase
	b *testBroker
}

func (h *testAuth) ID() string { return "edgeagent-test-auth" }

func (h *testAuth) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}

func (h *testAuth) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	user, pass := string(pk.Connect.Username), string(pk.Connect.Password)
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	want, ok := h.b.tokens[user]
	h.b.logins = append(h.b.logins, user)
	return ok && want == pass
}

func (h *testAuth) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

// testBroker is an embedded mochi-mqtt broker on 127.0.0.1:0 that records
// what devices publish.
type testBroker struct {
	t      testing.TB
	srv    *mqtt.Server
	addr   string
	notify chan struct{}

	mu       sync.Mutex
	tokens   map[string]string
	logins   []string
	status   map[string]schema.DeviceStatus
	nstatus  map[string]int
	online   map[string]string
	events   map[string][]schema.Event
	badTopic []string
}

// startBroker starts a bare mochi server with this package's auth hook on
// tlsConfig's TLS (nil: plain TCP).
func startBroker(t testing.TB, tlsConfig *tls.Config) *testBroker {
	t.Helper()
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumMessageExpiryInterval = 0 // retained desired state must not expire
	caps.MaximumClientWritesPending = 256
	b := &testBroker{
		t: t, notify: make(chan struct{}, 1),
		tokens: map[string]string{}, status: map[string]schema.DeviceStatus{}, nstatus: map[string]int{},
		online: map[string]string{}, events: map[string][]schema.Event{},
	}
	b.srv = mqtt.New(&mqtt.Options{InlineClient: true, Capabilities: caps, Logger: slog.New(slog.DiscardHandler)})
	if err := b.srv.AddHook(&testAuth{b: b}, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener := broker.NewListener("mqtt", ln, tlsConfig, 10*time.Second)
	if err := b.srv.AddListener(listener); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.Serve(); err != nil {
		t.Fatal(err)
	}
	b.addr = listener.Address()
	t.Cleanup(func() { _ = b.srv.Close() })
	topics := schema.Topics{}
	for i, kind := range []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents} {
		if err := b.srv.Subscribe(topics.DeviceFilter(kind), i+1, b.onMessage); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *testBroker) onMessage(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
	dev, kind, err := schema.Topics{}.ParseDevice(pk.TopicName)
	b.mu.Lock()
	defer func() {
		b.mu.Unlock()
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}()
	if err != nil {
		b.badTopic = append(b.badTopic, pk.TopicName)
		return
	}
	switch kind {
	case schema.TopicStatus:
		var st schema.DeviceStatus
		if err := json.Unmarshal(pk.Payload, &st); err != nil || st.Device != dev {
			b.badTopic = append(b.badTopic, pk.TopicName)
			return
		}
		b.status[dev] = st
		b.nstatus[dev]++
	case schema.TopicOnline:
		b.online[dev] = string(pk.Payload)
	case schema.TopicEvents:
		var ev schema.Event
		if err := json.Unmarshal(pk.Payload, &ev); err != nil {
			b.badTopic = append(b.badTopic, pk.TopicName)
			return
		}
		// A message may carry a batch (Event.More): each event on its own.
		more := ev.More
		ev.More = nil
		b.events[dev] = append(append(b.events[dev], ev), more...)
	}
}

func (b *testBroker) addDevice(name, token string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens[name] = token
}

// publishDesired publishes retained on the device's desired topic, as the
// hub does.
func (b *testBroker) publishDesired(device string, payload []byte) {
	b.t.Helper()
	if err := b.srv.Publish(schema.Topics{}.Device(device, schema.TopicDesired), payload, true, 1); err != nil {
		b.t.Fatal(err)
	}
}

func (b *testBroker) lastStatus(device string) (schema.DeviceStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.status[device]
	return st, ok
}

func (b *testBroker) onlineOf(device string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.online[device]
}

func (b *testBroker) eventReasons(device string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.events[device] {
		out = append(out, e.Reason)
	}
	return out
}

// await waits until cond holds, re-checking whenever the broker receives
// a message and every few milliseconds (the Fake runtime does not notify).
func (b *testBroker) await(what string, cond func() bool) {
	b.t.Helper()
	timeout := time.NewTimer(15 * time.Second)
	defer timeout.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-b.notify:
		case <-tick.C:
		case <-timeout.C:
			b.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// awaitApplied waits for a status reporting generation gen applied with
// every pod in phase.
func (b *testBroker) awaitApplied(device string, gen int64, npods int, phase schema.PodPhase) schema.DeviceStatus {
	b.t.Helper()
	var st schema.DeviceStatus
	b.await("status of "+device+" at the generation", func() bool {
		var ok bool
		st, ok = b.lastStatus(device)
		if !ok || st.ObservedGeneration != gen || len(st.Pods) != npods {
			return false
		}
		for _, p := range st.Pods {
			if p.Phase != phase {
				return false
			}
		}
		return true
	})
	return st
}

// proxy is a TCP proxy that can cut the link: cut closes every connection
// and refuses new ones (accepting and closing them) until restore.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				wg.Go(func() {
					_, _ = io.Copy(pair[0], pair[1])
					_ = pair[0].Close()
					_ = pair[1].Close()
				})
			}
		}
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// fastOptions are agent options with test-sized intervals.
func fastOptions(t testing.TB, device, broker string, rt runtime.Runtime, stateDir string) Options {
	return Options{
		Device:            device,
		Broker:            broker,
		Token:             "token-" + device,
		StateDir:          stateDir,
		Runtime:           rt,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Version:           "test",
		ResyncInterval:    time.Second,
		StatusInterval:    20 * time.Millisecond,
		HeartbeatInterval: time.Second,
		CrashLoop:         reconcile.CrashLoop{Initial: 50 * time.Millisecond, Max: 400 * time.Millisecond, ResetAfter: 10 * time.Minute},
		RetryBackoff:      backoff.Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5},
		ReconnectBackoff:  backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.5},
		NodeInfo:          func() *schema.NodeInfo { return &schema.NodeInfo{Hostname: device} },
		// These brokers speak for unsigned test hubs; the tests of
		// signing turn it off (signed_test.go).
		InsecureTrustFirstKey: true,
	}
}

// runAgent runs an Agent until the returned stop is called (or the test
// ends). stop fails the test if Run returns an error or hangs.
func runAgent(t testing.TB, o Options) (*Agent, func()) {
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("agent %s: Run: %v", o.Device, err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("agent %s did not stop", o.Device)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

func desiredJSON(t testing.TB, device, store string, gen int64, pods ...schema.Pod) []byte {
	t.Helper()
	if pods == nil {
		pods = []schema.Pod{}
	}
	b, err := json.Marshal(schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   device, Generation: gen, Store: store, Pods: pods,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func podOf(name string, policy schema.RestartPolicy, images ...string) schema.Pod {
	p := schema.Pod{Name: name, Spec: schema.PodSpec{RestartPolicy: policy}}
	for i, img := range images {
		p.Spec.Containers = append(p.Spec.Containers, schema.Container{
			Name: "c" + string(rune('0'+i)), Image: img,
			Env: []schema.EnvVar{{Name: "POD", Value: name}},
		})
	}
	return p
}

func containerID(p schema.Pod, i int) string {
	hash := schema.PodSpecHash(p.Spec)
	return reconcile.ContainerID(p.Name, p.Spec.Containers[i].Name, hash)
}
