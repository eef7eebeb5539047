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
	// held is what the broker holds, as far as the publisher knows: what
	// it published, and what it saw on the discovery topics.
	held map[string][]byte
	// cache: the configs last computed for a device, by name.
	cache map[string]cached
}

type cached struct {
	dev     Device
	configs []Config
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
		held: map[string][]byte{}, cache: map[string]cached{},
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(payload) == 0 {
		delete(p.held, topic)
		return
	}
	p.held[topic] = bytes.Clone(payload)
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
	p.held = map[string][]byte{}
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

// Sync makes one pass: it publishes every wanted config the broker does
// not hold as wanted, and clears every held config no device wants.
func (p *Publisher) Sync(ctx context.Context) error {
	want := p.wanted()
	p.mu.Lock()
	var publish, clear []string
	for topic, payload := range want {
		if !bytes.Equal(p.held[topic], payload) {
			publish = append(publish, topic)
		}
	}
	for topic := range p.held {
		if _, ok := want[topic]; !ok {
			clear = append(clear, topic)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, topic := range publish {
		errs = append(errs, p.put(ctx, topic, want[topic]))
	}
	for _, topic := range clear {
		errs = append(errs, p.put(ctx, topic, nil))
	}
	if len(publish)+len(clear) > 0 {
		p.log.Debug("home assistant discovery published", "configs", len(publish), "cleared", len(clear))
	}
	return errors.Join(errs...)
}

// put publishes one retained config (nil: clears it) and records it.
func (p *Publisher) put(ctx context.Context, topic string, payload []byte) error {
	if err := p.opts.Conn.Publish(ctx, topic, payload, true); err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if payload == nil {
		delete(p.held, topic)
	} else {
		p.held[topic] = payload
	}
	return nil
}

// wanted returns every config of the device set, by topic, reusing the
// configs of a device that did not change.
func (p *Publisher) wanted() map[string][]byte {
	devices := p.opts.Devices()
	want := make(map[string][]byte, len(devices)*len(entities))
	seen := make(map[string]bool, len(devices))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range devices {
		seen[d.Name] = true
		c, ok := p.cache[d.Name]
		if !ok || !sameDevice(c.dev, d) {
			configs, err := Configs(p.opts.Configs, d)
			if err != nil {
				p.log.Warn("home assistant discovery: device skipped", "device", d.Name, "err", err)
				continue
			}
			c = cached{dev: d, configs: configs}
			p.cache[d.Name] = c
		}
		for _, cfg := range c.configs {
			want[cfg.Topic] = cfg.Payload
		}
	}
	for name := range p.cache {
		if !seen[name] {
			delete(p.cache, name)
		}
	}
	return want
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
