package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/scale/hollow"
)

// The floor (B1) is what the broker alone costs for the work of a
// convergence: N retained desired states out (QoS 1, the size the hub
// publishes, at most Inflight unacknowledged), N statuses back from N bare
// clients. It runs in a process of its own (the "floor" role):
//
//   - embedded: a broker.Broker started with the options the hub gives its
//     broker, published to through its in-process client (InlineConn),
//     exactly as the hub publishes. The hub's own broker cannot be used:
//     only the hub's in-process client may publish desired state there.
//   - external: a raw paho client with a hub-role account on the same
//     Mosquitto the hub uses, before the hub starts.

// floorConfig is the floor role's config file (it holds tokens).
type floorConfig struct {
	// Mode is "embedded" (start a broker on Addr) or "external" (connect
	// to Broker as Username/Password).
	Mode        string `json:"mode"`
	Addr        string `json:"addr,omitempty"`
	Broker      string `json:"broker,omitempty"`
	Username    string `json:"username,omitempty"`
	Password    string `json:"password,omitempty"`
	TopicPrefix string `json:"topicPrefix,omitempty"`
	// Devices are the floor clients' accounts (the embedded broker's
	// only accounts).
	Devices []hollow.Device `json:"devices"`
	// Desired is the DesiredState every device gets (Device filled in per
	// device): the hub's, for the converge phase's deployment.
	Desired schema.DesiredState `json:"desired"`
	// Inflight bounds the unacknowledged publishes (default 1000).
	Inflight int `json:"inflight,omitempty"`
}

// floorRun is the floor role's "run" command and floorResult its answer.
type floorRun struct {
	Op      string        `json:"op"`
	Timeout time.Duration `json:"timeout"`
}

type floorResult struct {
	Op string `json:"op"`
	// Wall is from the first publish to the last echo; Lat[i] from the
	// first publish to device i's echo (-1: none).
	Wall time.Duration   `json:"wall"`
	Lat  []time.Duration `json:"lat"`
	// Published is how many desired states the broker took.
	Published int    `json:"published"`
	Error     string `json:"error,omitempty"`
}

// floorConn is what the floor publishes and subscribes through.
type floorConn interface {
	publish(ctx context.Context, topic string, payload []byte) error
	subscribe(ctx context.Context, filter string, h func(topic string, payload []byte)) error
	close()
}

// runFloorRole: `floor -config FILE`. It answers {"op":"ready","addr":…}
// once it can be used, then serves "run" and "clear" until stdin ends.
func runFloorRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	config := fs.String("config", "", "floor config (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*config)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	var cfg floorConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("floor: config: %w", err)
	}
	if cfg.Inflight <= 0 {
		cfg.Inflight = 1000
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	topics := schema.Topics{Prefix: cfg.TopicPrefix}
	var conn floorConn
	addr := ""
	switch cfg.Mode {
	case "embedded":
		auth := floorAuth{}
		for _, d := range cfg.Devices {
			auth[d.Name] = d.Token
		}
		// The options fleet-hub gives its broker (hub.New): everything
		// else is broker's default, as there.
		b, err := broker.New(broker.Options{Addr: cfg.Addr, Auth: auth, Topics: topics, Logger: log})
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(bctx) }()
		defer func() { cancel(); <-done }()
		conn = inlineFloor{b.InlineConn()}
		addr = b.Addr().String()
	case "external":
		c, err := dialFloor(ctx, cfg)
		if err != nil {
			return err
		}
		conn = c
	default:
		return fmt.Errorf("floor: mode %q", cfg.Mode)
	}
	defer conn.close()

	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(map[string]string{"op": "ready", "addr": addr}); err != nil {
		return err
	}
	dec := json.NewDecoder(os.Stdin)
	for {
		var cmd floorRun
		if err := dec.Decode(&cmd); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("floor: command: %w", err)
		}
		switch cmd.Op {
		case "run":
			res := runFloor(ctx, conn, topics, cfg, cmd.Timeout)
			if err := enc.Encode(res); err != nil {
				return err
			}
		case "clear":
			// Leave nothing retained that the hub's agents or ingest
			// could see.
			err := publishAll(ctx, conn, cfg.Inflight, len(cfg.Devices), func(i int) (string, []byte) {
				return topics.Device(cfg.Devices[i/2].Name, []string{schema.TopicDesired, schema.TopicStatus}[i%2]), nil
			}, 2)
			reply := map[string]string{"op": "cleared"}
			if err != nil {
				reply = map[string]string{"op": "error", "error": err.Error()}
			}
			if err := enc.Encode(reply); err != nil {
				return err
			}
		default:
			if err := enc.Encode(map[string]string{"op": "error", "error": "unknown op " + cmd.Op}); err != nil {
				return err
			}
		}
	}
}

// runFloor publishes every device's desired state and waits for every echo.
func runFloor(ctx context.Context, conn floorConn, topics schema.Topics, cfg floorConfig, timeout time.Duration) floorResult {
	res := floorResult{Op: "result"}
	e := newFloorEchoes(cfg, topics)
	res.Lat = e.lat
	topicsOut, payloads, err := floorDesired(cfg, topics)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := conn.subscribe(ctx, topics.DeviceFilter(schema.TopicStatus), e.handle); err != nil {
		res.Error = "subscribe: " + err.Error()
		return res
	}
	e.begin()
	err = publishAll(ctx, conn, cfg.Inflight, len(payloads), func(i int) (string, []byte) { return topicsOut[i], payloads[i] }, 1)
	res.Published = len(payloads)
	if err != nil {
		res.Error = "publish: " + err.Error()
		return res
	}
	res.Error = e.wait(ctx, timeout)
	res.Wall = e.wall()
	return res
}

// floorDesired returns the topic and payload of every device's desired
// state: cfg.Desired with the device's name.
func floorDesired(cfg floorConfig, topics schema.Topics) ([]string, [][]byte, error) {
	topicsOut := make([]string, len(cfg.Devices))
	payloads := make([][]byte, len(cfg.Devices))
	ds := cfg.Desired
	for i, d := range cfg.Devices {
		topicsOut[i] = topics.Device(d.Name, schema.TopicDesired)
		ds.Device = d.Name
		b, err := json.Marshal(ds)
		if err != nil {
			return nil, nil, err
		}
		payloads[i] = b
	}
	return topicsOut, payloads, nil
}

// floorEchoes collects the devices' echoes: the first status of each
// that reports the desired generation, timed from begin.
type floorEchoes struct {
	topics schema.Topics
	gen    int64
	idx    map[string]int // device name → index in lat

	mu sync.Mutex
	// lat[i] is from begin to device i's echo (-1: none yet).
	lat         []time.Duration
	got         int
	start, last time.Time
	all         chan struct{} // closed when every device has echoed
}

func newFloorEchoes(cfg floorConfig, topics schema.Topics) *floorEchoes {
	e := &floorEchoes{
		topics: topics, gen: cfg.Desired.Generation, idx: make(map[string]int, len(cfg.Devices)),
		lat: make([]time.Duration, len(cfg.Devices)), all: make(chan struct{}),
	}
	for i, d := range cfg.Devices {
		e.idx[d.Name] = i
		e.lat[i] = -1
	}
	return e
}

// begin starts the clock: echoes before it do not count.
func (e *floorEchoes) begin() {
	e.mu.Lock()
	e.start = time.Now()
	e.mu.Unlock()
}

// handle takes one status message (conn.subscribe).
func (e *floorEchoes) handle(topic string, payload []byte) {
	now := time.Now()
	dev, kind, err := e.topics.ParseDevice(topic)
	if err != nil || kind != schema.TopicStatus || len(payload) == 0 {
		return
	}
	var st struct {
		ObservedGeneration int64 `json:"observedGeneration"`
	}
	if json.Unmarshal(payload, &st) != nil || st.ObservedGeneration != e.gen {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	i, ok := e.idx[dev]
	if !ok || e.lat[i] >= 0 || e.start.IsZero() {
		return
	}
	e.lat[i] = now.Sub(e.start)
	if now.After(e.last) {
		e.last = now // handlers run concurrently: keep the latest
	}
	if e.got++; e.got == len(e.lat) {
		close(e.all)
	}
}

// wait waits for every echo and returns "" or what went wrong: ctx ended
// (after timeout), or the echoes stopped coming. A broker that dropped
// some never sends them, so ten seconds without progress end the wait
// early.
func (e *floorEchoes) wait(ctx context.Context, timeout time.Duration) string {
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	seen, idle := -1, 0
	for {
		select {
		case <-e.all:
			return ""
		case <-ctx.Done():
			e.mu.Lock()
			defer e.mu.Unlock()
			return fmt.Sprintf("%d of %d echoes within %v", e.got, len(e.lat), timeout)
		case <-progress.C:
			e.mu.Lock()
			n := e.got
			e.mu.Unlock()
			if n != seen {
				seen, idle = n, 0
				continue
			}
			if idle++; idle >= 10 {
				return fmt.Sprintf("%d of %d echoes; none for 10s (did the broker drop some?)", n, len(e.lat))
			}
		}
	}
}

// wall is from begin to the last echo (0: none).
func (e *floorEchoes) wall() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last.IsZero() {
		return 0
	}
	return e.last.Sub(e.start)
}

// publishAll publishes n×per messages with at most inflight awaiting the
// broker; msg(i) gives the i-th.
func publishAll(ctx context.Context, conn floorConn, inflight, n int, msg func(i int) (string, []byte), per int) error {
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range n * per {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		if failed.Load() != nil {
			break
		}
		topic, payload := msg(i)
		wg.Go(func() {
			defer func() { <-sem }()
			if err := conn.publish(ctx, topic, payload); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// floorAuth authenticates the floor clients on the floor's embedded broker.
type floorAuth map[string]string

func (a floorAuth) Authenticate(_ context.Context, username string, password []byte) (broker.Identity, bool) {
	tok, ok := a[username]
	if !ok || subtle.ConstantTimeCompare([]byte(tok), password) != 1 {
		return broker.Identity{}, false
	}
	return broker.Identity{Name: username, Role: broker.RoleDevice}, true
}

// inlineFloor publishes through the embedded broker's in-process client.
type inlineFloor struct{ c broker.Conn }

func (f inlineFloor) publish(ctx context.Context, topic string, payload []byte) error {
	return f.c.Publish(ctx, topic, payload, true)
}

func (f inlineFloor) subscribe(ctx context.Context, filter string, h func(string, []byte)) error {
	return f.c.Subscribe(ctx, filter, h)
}

func (f inlineFloor) close() { _ = f.c.Close() }

// pahoFloor is a raw paho client with a hub-role account.
type pahoFloor struct{ c mqtt.Client }

func dialFloor(ctx context.Context, cfg floorConfig) (*pahoFloor, error) {
	opts := mqtt.NewClientOptions().
		AddBroker(cfg.Broker).
		SetClientID(cfg.Username).
		SetUsername(cfg.Username).
		SetPassword(cfg.Password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetOrderMatters(false).
		SetAutoReconnect(false).
		SetKeepAlive(60 * time.Second).
		SetMessageChannelDepth(10000).
		SetConnectTimeout(10 * time.Second)
	c := mqtt.NewClient(opts)
	t := c.Connect()
	select {
	case <-t.Done():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := t.Error(); err != nil {
		return nil, fmt.Errorf("floor: connect %s: %w", cfg.Broker, err)
	}
	return &pahoFloor{c: c}, nil
}

func (f *pahoFloor) publish(ctx context.Context, topic string, payload []byte) error {
	t := f.c.Publish(topic, 1, true, payload)
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *pahoFloor) subscribe(ctx context.Context, filter string, h func(string, []byte)) error {
	t := f.c.Subscribe(filter, 1, func(_ mqtt.Client, m mqtt.Message) { h(m.Topic(), m.Payload()) })
	select {
	case <-t.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := t.Error(); err != nil {
		return err
	}
	if st, ok := t.(*mqtt.SubscribeToken); ok {
		for topic, code := range st.Result() {
			if code >= 0x80 {
				return fmt.Errorf("subscribe %s: refused (%#x)", topic, code)
			}
		}
	}
	return nil
}

func (f *pahoFloor) close() { f.c.Disconnect(250) }
