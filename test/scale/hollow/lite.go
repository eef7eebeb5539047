package hollow

// ModeLite: a light agent per device, for fleets too large for the real
// agent's ~160 KB a device (100,000 devices on one 24 GiB machine beside
// the hub and its brokers). A lite agent is one goroutine and one TCP
// connection: it speaks MQTT 3.1.1 itself (paho's packet codec, no paho
// client and its five goroutines), with the real agent's wire behaviour:
// CONNECT with its own credentials and the retained "offline" will,
// SUBSCRIBE to its desired and requests topics (QoS 1), "online"
// retained, every desired state verified against the hub's signing key
// (pinned on first use, as the hollow agents do) and checked for
// generation and store, a container start after the runtime's latency,
// then one retained status and two events (Created, Started) per pod
// started, as the real agent sends; keepalive pings, and reconnects
// with the agent's jittered backoff. It keeps its state in memory (the
// suite never restarts the agents), reports no node facts but the
// hollow constants, and answers no requests.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/session"
	"github.com/fleetmq/fleet/schema"
)

// ModeLite runs lite agents (see lite.go).
const ModeLite = "lite"

// liteAgent is one lite device.
type liteAgent struct {
	s       *Simulator
	dev     Device
	host    string // broker host:port
	seed    uint64
	latency func() time.Duration // nil: instant starts
	topics  liteTopics

	up        atomic.Bool
	startedAt atomic.Int64

	accepted, duplicate, stale, invalid atomic.Int64
	starts, stops, connects             atomic.Int64

	mu      sync.Mutex // guards what follows and every write to conn
	conn    net.Conn
	msgID   uint16
	ping    *time.Timer
	key     ed25519.PublicKey // pinned on first use
	gen     int64
	store   string
	pods    []schema.PodStatus // what runs
	pending *time.Timer        // a start under way
	rng     *rand.Rand         // event IDs
}

type liteTopics struct{ desired, requests, status, online, events string }

func (s *Simulator) newLite(i int, d Device) (*liteAgent, error) {
	u, err := url.Parse(firstNonEmpty(d.Broker, s.cfg.Broker))
	if err != nil || u.Scheme != "tcp" || u.Host == "" {
		return nil, fmt.Errorf("hollow lite agent %s: broker %q: want tcp://HOST:PORT", d.Name, firstNonEmpty(d.Broker, s.cfg.Broker))
	}
	seed := s.cfg.Seed + uint64(i)
	a := &liteAgent{s: s, dev: d, host: u.Host, seed: seed, rng: rand.New(rand.NewPCG(seed, 7))}
	if s.cfg.StartLatency > 0 && !containsString(s.cfg.NoLatency, d.Name) {
		a.latency = runtime.LogNormalLatency(s.cfg.StartLatency, s.cfg.StartSigma, seed)
	}
	t := s.topics
	a.topics = liteTopics{
		desired: t.Device(d.Name, schema.TopicDesired), requests: t.Device(d.Name, schema.TopicRequests),
		status: t.Device(d.Name, schema.TopicStatus), online: t.Device(d.Name, schema.TopicOnline),
		events: t.Device(d.Name, schema.TopicEvents),
	}
	return a, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (a *liteAgent) connected() bool  { return a.up.Load() }
func (a *liteAgent) lastStart() int64 { return a.startedAt.Load() }

func (a *liteAgent) add(s *Stats) {
	n := int(a.starts.Load())
	s.Starts += n
	s.Creates += n
	s.Stops += int(a.stops.Load())
	s.Removes += int(a.stops.Load())
	s.Accepted += a.accepted.Load()
	s.Duplicate += a.duplicate.Load()
	s.Stale += a.stale.Load()
	s.Invalid += a.invalid.Load()
	s.Connects += a.connects.Load()
}

// keepAlive is the agent's MQTT keepalive.
func (a *liteAgent) keepAlive() time.Duration {
	if k := a.s.cfg.KeepAlive; k > 0 {
		return k
	}
	return session.DefaultKeepAlive
}

// run connects, serves the session and reconnects with the agent's
// backoff until ctx ends.
func (a *liteAgent) run(ctx context.Context) {
	p := a.s.cfg.ReconnectBackoff()
	if p == (backoff.Policy{}) {
		p = session.DefaultBackoff
	}
	bo := backoff.New(p, a.seed)
	for ctx.Err() == nil {
		began := time.Now()
		err := a.session(ctx)
		if ctx.Err() != nil {
			return
		}
		a.s.log.Debug("lite agent disconnected", "device", a.dev.Name, "err", err)
		if time.Since(began) > 10*time.Second {
			bo.Reset()
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session runs one connection until it fails or ctx ends.
func (a *liteAgent) session(ctx context.Context) error {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", a.host)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { a.hangUp(conn) })
	defer stop()
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 1024)
	if err := a.handshake(conn, r); err != nil {
		return err
	}
	a.mu.Lock()
	a.conn = conn
	err = a.subscribeLocked()
	if err == nil {
		err = a.publishLocked(a.topics.online, true, []byte(schema.Online))
	}
	if err == nil && a.gen > 0 {
		// A fresh status on every connect, as the real agent sends.
		err = a.publishStatusLocked()
	}
	a.ping = time.AfterFunc(a.keepAlive(), a.pingNow)
	a.mu.Unlock()
	if err != nil {
		a.drop(conn)
		return err
	}
	a.up.Store(true)
	a.connects.Add(1)
	defer a.drop(conn)
	idle := a.keepAlive() + 15*time.Second
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		cp, err := packets.ReadPacket(r)
		if err != nil {
			return err
		}
		p, ok := cp.(*packets.PublishPacket)
		if !ok {
			continue // SUBACK, PUBACK, PINGRESP
		}
		if p.Qos == 1 {
			ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			ack.MessageID = p.MessageID
			a.mu.Lock()
			err = a.writeLocked(ack)
			a.mu.Unlock()
			if err != nil {
				return err
			}
		}
		if p.TopicName == a.topics.desired {
			a.onDesired(p.Payload)
		}
	}
}

// handshake sends CONNECT (with the offline will) and reads CONNACK.
func (a *liteAgent) handshake(conn net.Conn, r *bufio.Reader) error {
	c := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	c.ProtocolName, c.ProtocolVersion = "MQTT", 4
	c.CleanSession = true
	c.ClientIdentifier = a.dev.Name
	c.UsernameFlag, c.Username = true, a.dev.Name
	c.PasswordFlag, c.Password = true, []byte(a.dev.Token)
	c.WillFlag, c.WillQos, c.WillRetain = true, 1, true
	c.WillTopic, c.WillMessage = a.topics.online, []byte(schema.Offline)
	c.Keepalive = uint16(a.keepAlive() / time.Second)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if err := writePacket(conn, c); err != nil {
		return err
	}
	return ReadConnack(r)
}

// ReadConnack reads a CONNACK from r and returns an error unless it
// accepts the connection.
func ReadConnack(r *bufio.Reader) error {
	cp, err := packets.ReadPacket(r)
	if err != nil {
		return fmt.Errorf("connack: %w", err)
	}
	ack, ok := cp.(*packets.ConnackPacket)
	if !ok {
		return fmt.Errorf("want CONNACK, got %s", cp.String())
	}
	if ack.ReturnCode != packets.Accepted {
		return fmt.Errorf("connect refused: %s", packets.ConnackReturnCodes[ack.ReturnCode])
	}
	return nil
}

func (a *liteAgent) subscribeLocked() error {
	sub := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	sub.MessageID = a.nextIDLocked()
	sub.Topics = []string{a.topics.desired, a.topics.requests}
	sub.Qoss = []byte{1, 1}
	return a.writeLocked(sub)
}

// pingNow sends PINGREQ (the keepalive) and arms the next one.
func (a *liteAgent) pingNow() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		return
	}
	_ = a.writeLocked(packets.NewControlPacket(packets.Pingreq))
	a.ping.Reset(a.keepAlive())
}

// drop forgets conn (once).
func (a *liteAgent) drop(conn net.Conn) {
	a.mu.Lock()
	if a.conn == conn {
		a.conn = nil
		if a.ping != nil {
			a.ping.Stop()
		}
	}
	a.mu.Unlock()
	a.up.Store(false)
	conn.Close()
}

// hangUp is a clean disconnect: "offline" (a clean disconnect fires no
// will), DISCONNECT, close.
func (a *liteAgent) hangUp(conn net.Conn) {
	a.mu.Lock()
	if a.conn == conn {
		_ = a.publishLocked(a.topics.online, true, []byte(schema.Offline))
		_ = a.writeLocked(packets.NewControlPacket(packets.Disconnect))
	}
	a.mu.Unlock()
	conn.Close()
}

func (a *liteAgent) nextIDLocked() uint16 {
	a.msgID++
	if a.msgID == 0 {
		a.msgID = 1
	}
	return a.msgID
}

// publishLocked sends a QoS 1 publish. It does not wait for the PUBACK:
// what a reconnect loses, the status sent on connect makes good.
func (a *liteAgent) publishLocked(topic string, retain bool, payload []byte) error {
	if a.conn == nil {
		return errNotConnected
	}
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Payload, p.Qos, p.Retain = topic, payload, 1, retain
	p.MessageID = a.nextIDLocked()
	return a.writeLocked(p)
}

var errNotConnected = errors.New("not connected")

func (a *liteAgent) writeLocked(p packets.ControlPacket) error {
	if a.conn == nil {
		return errNotConnected
	}
	_ = a.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return writePacket(a.conn, p)
}

var packetBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writePacket writes p in one write (paho's codec writes a packet in
// pieces: with TCP_NODELAY each would be a segment).
func writePacket(conn net.Conn, p packets.ControlPacket) error {
	b := packetBufs.Get().(*bytes.Buffer)
	b.Reset()
	defer packetBufs.Put(b)
	if err := p.Write(b); err != nil {
		return err
	}
	_, err := conn.Write(b.Bytes())
	return err
}

// onDesired verifies and applies one desired state.
func (a *liteAgent) onDesired(payload []byte) {
	if len(payload) == 0 {
		return
	}
	canonical, sig, err := schema.SplitSignedDesiredState(payload)
	if err != nil {
		a.invalid.Add(1)
		return
	}
	a.mu.Lock()
	key := a.key
	a.mu.Unlock()
	if key == nil {
		// Pinned on first use, as the hollow agents' InsecureTrustFirstKey.
		if key, err = sig.SignerKey(); err != nil {
			a.invalid.Add(1)
			return
		}
	}
	if err := sig.Verify(canonical, key); err != nil {
		a.invalid.Add(1)
		return
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(canonical, &ds); err != nil || ds.Device != a.dev.Name || schema.ValidateDesiredState(&ds) != nil {
		a.invalid.Add(1)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.key = key
	if ds.Store == a.store && ds.Generation <= a.gen {
		if ds.Generation == a.gen {
			a.duplicate.Add(1)
		} else {
			a.stale.Add(1)
		}
		return
	}
	a.accepted.Add(1)
	a.gen, a.store = ds.Generation, ds.Store
	a.apply(ds)
}

// apply starts the pods of ds that do not run at their hash (after the
// runtime's latency), stops the others, and reports.
func (a *liteAgent) apply(ds schema.DesiredState) {
	if a.pending != nil {
		a.pending.Stop()
		a.pending = nil
	}
	running := map[string]string{}
	for _, p := range a.pods {
		running[p.Name] = p.Hash
	}
	var keep []schema.PodStatus
	var start []schema.Pod
	for _, p := range ds.Pods {
		if h, ok := running[p.Name]; ok && h == p.Hash {
			for _, r := range a.pods {
				if r.Name == p.Name {
					keep = append(keep, r)
				}
			}
			continue
		}
		start = append(start, p)
	}
	for _, p := range a.pods {
		if !containsPod(keep, p.Name) {
			a.stops.Add(1) // removed, or replaced by its new spec
		}
	}
	if len(start) == 0 {
		a.pods = keep
		_ = a.publishStatusLocked()
		return
	}
	var wait time.Duration
	if a.latency != nil {
		for range start {
			wait += a.latency()
		}
	}
	gen := a.gen
	a.pending = time.AfterFunc(wait, func() { a.started(gen, keep, start) })
}

func containsPod(list []schema.PodStatus, name string) bool {
	for _, p := range list {
		if p.Name == name {
			return true
		}
	}
	return false
}

// started records the pods of generation gen as running and reports them.
func (a *liteAgent) started(gen int64, keep []schema.PodStatus, start []schema.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return // superseded
	}
	a.pending = nil
	now := time.Now().UTC()
	pods := append([]schema.PodStatus(nil), keep...)
	for _, p := range start {
		ps := schema.PodStatus{Name: p.Name, Hash: p.Hash, Phase: schema.PhaseRunning, Ready: true}
		for _, c := range p.Spec.Containers {
			ps.Containers = append(ps.Containers, schema.ContainerStatus{Name: c.Name, Image: c.Image, State: schema.ContainerRunning, StartedAt: &now})
		}
		pods = append(pods, ps)
		a.starts.Add(1)
		for _, reason := range []string{"Created", "Started"} {
			a.eventLocked(now, reason, p.Name)
		}
	}
	a.pods = pods
	a.startedAt.Store(now.UnixNano())
	_ = a.publishStatusLocked()
}

func (a *liteAgent) eventLocked(now time.Time, reason, pod string) {
	ev := schema.Event{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
		ID:       strconv.FormatUint(a.rng.Uint64(), 36) + strconv.FormatUint(a.rng.Uint64(), 36),
		Device:   a.dev.Name, Time: now, Type: schema.EventNormal, Reason: reason, Pod: pod,
	}
	b, err := json.Marshal(ev)
	if err == nil {
		_ = a.publishLocked(a.topics.events, false, b)
	}
}

// publishStatusLocked sends the retained status.
func (a *liteAgent) publishStatusLocked() error {
	st := schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   a.dev.Name, ObservedGeneration: a.gen, Store: a.store, Time: time.Now().UTC(),
		Agent: schema.AgentInfo{Version: "hollow-lite", OS: goruntime.GOOS, Arch: goruntime.GOARCH},
		Node:  nodeInfo, Pods: a.pods,
	}
	if st.Pods == nil {
		st.Pods = []schema.PodStatus{}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return a.publishLocked(a.topics.status, true, b)
}
