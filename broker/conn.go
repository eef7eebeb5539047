package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Conn is how the hub talks MQTT, whether to the embedded broker
// ((*Broker).InlineConn) or to an external one (DialExternal).
type Conn interface {
	// Publish publishes payload to topic with QoS 1 and waits, at most until
	// ctx is done, for the broker to take it.
	Publish(ctx context.Context, topic string, payload []byte, retained bool) error
	// Subscribe subscribes to filter with QoS 1. The subscription is kept:
	// it is made again after every reconnect. handler runs on a goroutine of
	// the Conn, one message at a time, never on the MQTT client's own
	// goroutines; it must be idempotent, since a retained message can
	// arrive more than once. It must not call Close. The handler may keep
	// payload but must never change it: it can be shared with the broker's
	// retained copy or with the other handlers of the same message.
	Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error
	// OnConnect registers f to run, on its own goroutine, after every
	// (re)connect once subscriptions are restored; if the Conn is already
	// connected, f also runs at once. The hub republishes all desired state
	// from it.
	OnConnect(f func())
	// Close ends the connection; no handler runs after it returns.
	Close() error
}

// InlineConn returns a Conn over the broker's in-process client: no network,
// no ACLs. It is connected for as long as the broker is open, so OnConnect
// callbacks run once. Each call returns a new Conn.
func (b *Broker) InlineConn() Conn {
	return &inlineConn{b: b, d: newDispatcher(b.log)}
}

type inlineConn struct {
	b *Broker
	d *dispatcher

	mu     sync.Mutex
	subs   []inlineSub
	closed bool
}

type inlineSub struct {
	filter string
	id     int
}

var _ Conn = (*inlineConn)(nil)

func (c *inlineConn) Publish(ctx context.Context, topic string, payload []byte, retained bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mqtt publish %q: %w", topic, err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return c.b.Publish(topic, payload, retained)
}

func (c *inlineConn) Subscribe(ctx context.Context, filter string, handler func(topic string, payload []byte)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mqtt subscribe %q: %w", filter, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	id, err := c.b.subscribe(filter, c.d, handler)
	if err != nil {
		return err
	}
	c.subs = append(c.subs, inlineSub{filter: filter, id: id})
	return nil
}

func (c *inlineConn) OnConnect(f func()) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if !closed && !c.b.closed.Load() {
		go f()
	}
}

func (c *inlineConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	for _, s := range subs {
		c.b.unsubscribe(s.filter, s.id)
	}
	c.d.close()
	return nil
}

// dispatcher runs queued functions one at a time on its own goroutine, so
// that MQTT message handlers never block the broker or the client's router.
// The queue is unbounded: a bounded one could deadlock when a handler
// publishes a message that one of the same Conn's subscriptions matches. It
// logs a warning each time the backlog doubles past 1024.
type dispatcher struct {
	log *slog.Logger

	mu     sync.Mutex
	queue  []func()
	warnAt int
	closed bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newDispatcher(log *slog.Logger) *dispatcher {
	d := &dispatcher{
		log:    log,
		warnAt: 1024,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go d.run()
	return d
}

// enqueue adds f to the queue; it never blocks. It reports false once the
// dispatcher is closed.
func (d *dispatcher) enqueue(f func()) bool {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false
	}
	d.queue = append(d.queue, f)
	n := len(d.queue)
	warn := n >= d.warnAt
	if warn {
		d.warnAt *= 2
	}
	d.mu.Unlock()
	if warn {
		d.log.Warn("mqtt message handler falling behind", "queued", n)
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return true
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		if len(d.queue) == 0 {
			d.queue = nil
			if d.warnAt > 1024 {
				d.warnAt = 1024
			}
			d.mu.Unlock()
			select {
			case <-d.wake:
			case <-d.stop:
			}
			continue
		}
		f := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		d.mu.Unlock()
		f()
	}
}

// close drops what is still queued and waits for the running function, if
// any, to return. It must not be called from a queued function.
func (d *dispatcher) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		<-d.done
		return
	}
	d.closed = true
	d.queue = nil
	d.mu.Unlock()
	close(d.stop)
	<-d.done
}
