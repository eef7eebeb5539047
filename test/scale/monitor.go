package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker/mqttio"
	"github.com/fleetmq/fleet/schema"
)

// monitor watches every device's status topic with a monitor credential:
// it sees each report when the hub's ingest does (both are subscribers of
// the same broker), so per-device convergence times need no polling.
//
// It uses one connection per monitorShard devices, each subscribed to its
// devices' topics: a broker drops messages for a client whose outbound
// queue is full (mochi: MaximumClientWritesPending, 128 in Fleet's
// broker), and one wildcard subscriber receiving every device's statuses
// in a burst would lose some. A shard never has more than 2 × 32 reports
// queued in a phase.
type monitor struct {
	topics  schema.Topics
	idx     map[string]int
	clients []mqtt.Client
	// subscribed[i] is closed once clients[i] first subscribed.
	subscribed []chan struct{}

	mu  sync.Mutex
	cur *watch
	// tap, when set, sees every status the monitor decodes (see setTap).
	tap func(device int, st *statusLite, at time.Time)

	received atomic.Int64
	connects atomic.Int64
}

const monitorShard = 32

// statusLite is the part of a DeviceStatus the monitor reads.
type statusLite struct {
	ObservedGeneration int64     `json:"observedGeneration"`
	Time               time.Time `json:"time"`
	Pods               []podLite `json:"pods"`
}

// podLite is the part of a PodStatus the monitor reads.
type podLite struct {
	Name       string          `json:"name"`
	Hash       string          `json:"hash"`
	Ready      bool            `json:"ready"`
	Containers []containerLite `json:"containers"`
}

// containerLite is the part of a ContainerStatus the monitor reads.
type containerLite struct {
	Reason string `json:"reason"`
}

// pod returns the report of the named pod, or nil.
func (s *statusLite) pod(name string) *podLite {
	for i := range s.Pods {
		if s.Pods[i].Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

// ready reports whether pod runs spec hash and is ready.
func (s *statusLite) ready(pod, hash string) bool {
	p := s.pod(pod)
	return p != nil && p.Hash == hash && p.Ready
}

// watch records, per device, the first report that satisfies match.
type watch struct {
	// origin of the latencies; with byStatusTime the report's own time
	// stamp is used instead of its arrival (the monitor may itself be
	// reconnecting, as in the storm).
	origin       time.Time
	byStatusTime bool
	only         int // ≥0: watch this device only
	match        func(*statusLite) bool

	lat       []time.Duration // -1 until seen
	remaining int
	last      time.Time
	done      chan struct{}
}

func dialMonitor(ctx context.Context, url, user, password string, topics schema.Topics, devices []string) (*monitor, error) {
	m := &monitor{topics: topics, idx: make(map[string]int, len(devices))}
	for i, d := range devices {
		m.idx[d] = i
	}
	handler := func(_ mqtt.Client, msg mqtt.Message) { m.handle(msg.Topic(), msg.Payload()) }
	for start := 0; start < len(devices); start += monitorShard {
		subscribed := make(chan struct{})
		var once sync.Once
		filters := map[string]byte{}
		for _, d := range devices[start:min(len(devices), start+monitorShard)] {
			filters[topics.Device(d, schema.TopicStatus)] = 1
		}
		opts := mqtt.NewClientOptions().
			AddBroker(url).
			SetClientID(fmt.Sprintf("%s-%d", user, start/monitorShard)).
			SetUsername(user).
			SetPassword(password).
			SetProtocolVersion(4).
			SetCleanSession(true).
			SetOrderMatters(false).
			SetAutoReconnect(true).
			SetConnectRetry(true).
			SetConnectRetryInterval(100 * time.Millisecond).
			SetMaxReconnectInterval(250 * time.Millisecond).
			SetKeepAlive(30 * time.Second).
			// Buffered reads: a shard receives its devices' statuses in
			// bursts, which paho alone would read in three or more
			// system calls each, CPU taken from the hub and the agents.
			SetCustomOpenConnectionFn(func(u *neturl.URL, _ mqtt.ClientOptions) (net.Conn, error) {
				c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
				if err != nil {
					return nil, err
				}
				return mqttio.BufferedConn(c, 64<<10), nil
			}).
			// One handler for everything the client receives: a handler
			// per subscription would make paho's router split and match
			// every message's topic against each of the shard's filters.
			SetDefaultPublishHandler(handler).
			SetOnConnectHandler(func(c mqtt.Client) {
				m.connects.Add(1)
				// On every (re)connect: the session is clean.
				t := c.SubscribeMultiple(filters, nil)
				go func() {
					if t.Wait() && t.Error() == nil {
						once.Do(func() { close(subscribed) })
					}
				}()
			})
		m.clients = append(m.clients, mqtt.NewClient(opts))
		m.subscribed = append(m.subscribed, subscribed)
	}
	err := parallel(ctx, 32, len(m.clients), func(ctx context.Context, i int) error {
		t := m.clients[i].Connect()
		select {
		case <-t.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := t.Error(); err != nil {
			return fmt.Errorf("monitor: connect %s: %w", url, err)
		}
		select {
		case <-m.subscribed[i]:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("monitor: subscribe: %w", ctx.Err())
		}
	})
	if err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *monitor) close() {
	for _, c := range m.clients {
		c.Disconnect(100)
	}
}

func (m *monitor) handle(topic string, payload []byte) {
	now := time.Now()
	m.received.Add(1)
	dev, kind, err := m.topics.ParseDevice(topic)
	if err != nil || kind != schema.TopicStatus || len(payload) == 0 {
		return
	}
	i, ok := m.idx[dev]
	if !ok {
		return
	}
	m.mu.Lock()
	w, tap := m.cur, m.tap
	m.mu.Unlock()
	if w != nil && w.only >= 0 && w.only != i {
		w = nil
	}
	if w == nil && tap == nil {
		return
	}
	var st statusLite
	if json.Unmarshal(payload, &st) != nil {
		return
	}
	if tap != nil {
		tap(i, &st, now)
	}
	if w == nil || !w.match(&st) {
		return
	}
	at := now
	if w.byStatusTime {
		at = st.Time
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != w || w.lat[i] >= 0 {
		return
	}
	w.lat[i] = max(at.Sub(w.origin), 0)
	if at.After(w.last) {
		w.last = at
	}
	if w.remaining--; w.remaining == 0 {
		close(w.done)
	}
}

// setTap makes f see every status report from now on, with the device's
// index and the report's arrival, until setTap(nil). f is called from the
// monitor's clients' goroutines, concurrently and not necessarily in the
// order a device sent its reports (order them by statusLite.Time).
func (m *monitor) setTap(f func(device int, st *statusLite, at time.Time)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tap = f
}

// start begins a watch over every device (only < 0) or one device; the
// origin is set later (setOrigin), reports seen before count from it.
func (m *monitor) start(only int, byStatusTime bool, match func(*statusLite) bool) *watch {
	w := &watch{only: only, byStatusTime: byStatusTime, match: match, done: make(chan struct{})}
	w.lat = make([]time.Duration, len(m.idx))
	for i := range w.lat {
		w.lat[i] = -1
	}
	w.remaining = len(w.lat)
	if only >= 0 {
		w.remaining = 1
	}
	m.mu.Lock()
	m.cur = w
	m.mu.Unlock()
	return w
}

func (m *monitor) setOrigin(w *watch, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.origin = t
	for i, l := range w.lat {
		if l >= 0 {
			w.lat[i] = 0 // seen before the origin
		}
	}
}

// wait waits until every watched device matched or ctx ends, then stops
// the watch; it returns the latencies (-1: never) and the last match.
func (m *monitor) wait(ctx context.Context, w *watch) ([]time.Duration, time.Time, error) {
	var err error
	select {
	case <-w.done:
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", errDeadline, context.Cause(ctx))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == w {
		m.cur = nil
	}
	return w.lat, w.last, err
}
