package homeassistant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// DefaultInterval is how often a Publisher compares the device set with
// what it published.
const DefaultInterval = 2 * time.Second

// Conn is the MQTT connection a Publisher needs (broker.Conn has it).
type Conn interface {
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
	Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error
}

// PublisherOptions configure a Publisher. Conn and Devices are required.
type PublisherOptions struct {
	// Conn publishes the configs (retained, QoS 1) and watches the
	// discovery topics.
	Conn Conn
	// Devices returns the hub's device set as it is now.
	Devices func() []Device
	// Configs are the options of Configs (topics, prefix, version).
	Configs Options
	// Interval between passes; default DefaultInterval.
	Interval time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// Publisher keeps the broker's retained discovery configs equal to
// Configs over the device set.
type Publisher struct {
	opts PublisherOptions
	log  *slog.Logger
	wake chan struct{}

	mu sync.Mutex
	// held is what the broker holds, as far as the publisher knows, by
	// node_id and topic: what it published, and what it saw on the
	// discovery topics.
	held map[string]map[string][]byte
	// nodes are the devices of the last pass, by node_id.
	nodes map[string]*node
}

// node is one device's configs and whether the broker holds them.
type node struct {
	dev     Device
	configs []Config
	// clean: the broker holds exactly configs (checked by a pass that
	// saw no change of held meanwhile); a pass skips clean nodes.
	clean bool
	// changes counts what observe saw of this node on the broker.
	changes int
}

// NewPublisher checks the options and returns a Publisher; Run runs it.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if opts.Conn == nil || opts.Devices == nil {
		return nil, errors.New("home assistant publisher: Conn and Devices are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{
		opts: opts, log: opts.Logger, wake: make(chan struct{}, 1),
		held: map[string]map[string][]byte{}, nodes: map[string]*node{},
	}, nil
}

// Subscribe watches the discovery topics of Fleet devices, so that
// configs the broker kept from an earlier run (a device deleted while the
// hub was down) are cleared by the next pass.
func (p *Publisher) Subscribe(ctx context.Context) error {
	filter := p.opts.Configs.prefix() + "/+/+/+/config"
	if err := p.opts.Conn.Subscribe(ctx, filter, p.observe); err != nil {
		return fmt.Errorf("home assistant discovery: subscribe %s: %w", filter, err)
	}
	return nil
}

// observe records a retained config seen on the broker, if it is one of
// this hub's: a Fleet node_id and an availability topic under the hub's
// topic prefix.
func (p *Publisher) observe(topic string, payload []byte) {
	levels := strings.Split(topic, "/")
	if len(levels) < 4 || !strings.HasPrefix(levels[len(levels)-3], NodeIDPrefix) {
		return
	}
	if len(payload) > 0 && !p.ours(payload) {
		return
	}
	id := levels[len(levels)-3]
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.nodes[id]; n != nil {
		n.changes++
		n.clean = false
	}
	p.hold(id, topic, payload)
}

// hold records what the broker holds on topic (nil: nothing). p.mu held.
func (p *Publisher) hold(id, topic string, payload []byte) {
	if len(payload) == 0 {
		delete(p.held[id], topic)
		if len(p.held[id]) == 0 {
			delete(p.held, id)
		}
		return
	}
	if p.held[id] == nil {
		p.held[id] = map[string][]byte{}
	}
	p.held[id][topic] = bytes.Clone(payload)
}

func (p *Publisher) ours(payload []byte) bool {
	var c struct {
		Availability []Availability `json:"availability"`
	}
	if json.Unmarshal(payload, &c) != nil || len(c.Availability) == 0 {
		return false
	}
	// Device("", "") is {prefix}/devices//: keep {prefix}/devices/.
	return strings.HasPrefix(c.Availability[0].Topic, strings.TrimSuffix(p.opts.Configs.Topics.Device("", ""), "/"))
}

// Wake asks for a pass now (a device was added or deleted).
func (p *Publisher) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// RepublishAll forgets what the broker holds and wakes a pass, which then
// publishes every config: after a reconnect to a broker that may have
// lost its retained messages.
func (p *Publisher) RepublishAll() {
	p.mu.Lock()
	p.held = map[string]map[string][]byte{}
	for _, n := range p.nodes {
		n.clean = false
	}
	p.mu.Unlock()
	p.Wake()
}

// Run makes a pass at once, then every Interval and on Wake, until ctx
// is done. A failed publish is logged and retried by the next pass.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		if err := p.Sync(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("home assistant discovery: pass incomplete; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.wake:
		}
	}
}

// Sync makes one pass: for every device whose configs changed or whose
// topics changed on the broker, it publishes the configs the broker does
// not hold as wanted and clears the ones no longer wanted; it clears every
// config of a device that is gone.
func (p *Publisher) Sync(ctx context.Context) error {
	devices := p.opts.Devices()
	var work []put
	checked := map[string]int{} // node_id -> changes when checked
	p.mu.Lock()
	seen := make(map[string]bool, len(devices))
	for _, d := range devices {
		id := NodeID(d.Name)
		seen[id] = true
		n := p.nodes[id]
		if n == nil || !sameDevice(n.dev, d) {
			configs, err := Configs(p.opts.Configs, d)
			if err != nil {
				p.log.Warn("home assistant discovery: device skipped", "device", d.Name, "err", err)
				seen[id] = false
				continue
			}
			if n == nil {
				n = &node{}
				p.nodes[id] = n
			}
			n.dev, n.configs, n.clean = d, configs, false
		}
		if n.clean {
			continue
		}
		checked[id] = n.changes
		work = append(work, p.diffLocked(id, n.configs)...)
	}
	for id := range p.held {
		if !seen[id] {
			work = append(work, p.diffLocked(id, nil)...) // a device gone
		}
	}
	for id := range p.nodes {
		if !seen[id] {
			delete(p.nodes, id)
		}
	}
	p.mu.Unlock()

	var errs []error
	failed := map[string]bool{}
	for _, w := range work {
		if err := p.put(ctx, w); err != nil {
			errs = append(errs, err)
			failed[w.node] = true
		}
	}
	p.mu.Lock()
	for id, changes := range checked {
		if n := p.nodes[id]; n != nil && !failed[id] && n.changes == changes {
			n.clean = true
		}
	}
	p.mu.Unlock()
	if len(work) > 0 {
		p.log.Debug("home assistant discovery published", "messages", len(work), "failed", len(errs))
	}
	return errors.Join(errs...)
}

// put is one retained message to publish: a config, or nil to clear one.
type put struct {
	node, topic string
	payload     []byte
}

// diffLocked returns what makes the broker hold exactly configs for the
// node. p.mu held.
func (p *Publisher) diffLocked(id string, configs []Config) []put {
	var out []put
	want := make(map[string]bool, len(configs))
	for _, c := range configs {
		want[c.Topic] = true
		if !bytes.Equal(p.held[id][c.Topic], c.Payload) {
			out = append(out, put{node: id, topic: c.Topic, payload: c.Payload})
		}
	}
	for topic := range p.held[id] {
		if !want[topic] {
			out = append(out, put{node: id, topic: topic})
		}
	}
	return out
}

// put publishes one retained message and records it.
func (p *Publisher) put(ctx context.Context, w put) error {
	if err := p.opts.Conn.Publish(ctx, w.topic, w.payload, true); err != nil {
		return fmt.Errorf("publish %s: %w", w.topic, err)
	}
	p.mu.Lock()
	p.hold(w.node, w.topic, w.payload)
	p.mu.Unlock()
	return nil
}

func sameDevice(a, b Device) bool {
	if a.Name != b.Name || a.UID != b.UID || a.AgentVersion != b.AgentVersion || a.OS != b.OS || a.Arch != b.Arch || len(a.Node) != len(b.Node) {
		return false
	}
	for k := range a.Node {
		if !b.Node[k] {
			return false
		}
	}
	return true
}
