package broker

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// retainedPacer delivers the retained messages that match a new wildcard
// subscription at the pace the subscriber acknowledges them.
//
// mochi sends them all at once, from the loop that handles the SUBSCRIBE:
// each QoS 1 message takes a slot of the client's in-flight window
// (MaxInflight, 1,024 by default), and once the window is full the rest
// are dropped. A monitor that subscribed to fleet/v1/devices/+/status on a
// fleet of 5,000 devices received 1,024 statuses and learned of the other
// devices only from their next heartbeat, up to 30 s later.
//
// QoS 0 messages take no slot, but each waits in the client's outbound
// queue (MaxClientWritesPending, 128 by default), and mochi drops what
// does not fit: mosquitto_sub, Telegraf and Home Assistant subscribe at
// QoS 0 by default, and one subscribing to every status of a 2,000-device
// fleet missed 50–250 of them.
//
// The pacer takes over those subscriptions: it tells mochi not to send
// their retained messages (retain handling 2, as an MQTT 5 client may ask),
// and once the SUBACK has gone out it sends them itself from a goroutine,
// writing each to the connection (a slow reader slows the delivery, it
// does not lose messages) and keeping at most half the window in flight,
// so live messages still find room. A message whose topic got a newer
// retained message meanwhile is skipped: the subscriber received that one
// live. Exact filters match at most one retained message and stay with
// mochi.
type retainedPacer struct {
	mqtt.HookBase
	b    *Broker
	auth *hook

	mu sync.Mutex
	// taken: the indexes of the filters of a SUBSCRIBE being processed
	// whose retained messages the pacer sends, by client and packet ID.
	taken map[subscribeKey][]int
	// pending: those of them the ACL granted, until the SUBACK is sent.
	pending map[subscribeKey][]packets.Subscription
	// acks: per client with a delivery under way, woken by each PUBACK
	// and by the disconnect.
	acks map[*mqtt.Client]*pacerClient
	// active counts the deliveries under way.
	active atomic.Int32
}

type subscribeKey struct {
	cl *mqtt.Client
	id uint16
}

type pacerClient struct {
	wake  chan struct{} // capacity 1: a PUBACK came
	gone  chan struct{} // closed when the client disconnects
	users int           // deliveries under way
}

func newRetainedPacer(b *Broker, auth *hook) *retainedPacer {
	return &retainedPacer{
		b:       b,
		auth:    auth,
		taken:   map[subscribeKey][]int{},
		pending: map[subscribeKey][]packets.Subscription{},
		acks:    map[*mqtt.Client]*pacerClient{},
	}
}

func (p *retainedPacer) ID() string { return "fleet-retained-pacer" }

func (p *retainedPacer) Provides(b byte) bool {
	return bytes.Contains([]byte{
		mqtt.OnSubscribe,
		mqtt.OnSubscribed,
		mqtt.OnPacketSent,
		mqtt.OnQosComplete,
		mqtt.OnDisconnect,
	}, []byte{b})
}

// paced reports whether the pacer takes over sub's retained messages.
func paced(sub packets.Subscription) bool {
	return sub.RetainHandling != 2 &&
		strings.ContainsAny(sub.Filter, "+#") && !mqtt.IsSharedFilter(sub.Filter)
}

// OnSubscribe turns off mochi's retained burst for the paced filters and
// remembers them, by their index in the SUBSCRIBE.
func (p *retainedPacer) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	var filters []packets.Subscription
	var taken []int
	for i, sub := range pk.Filters {
		if !paced(sub) {
			continue
		}
		if _, existed := cl.State.Subscriptions.Get(sub.Filter); sub.RetainHandling == 1 && existed {
			continue // mochi sends nothing for these either
		}
		if filters == nil {
			filters = slices.Clone(pk.Filters) // the caller's packet stays as it was
		}
		filters[i].RetainHandling = 2
		taken = append(taken, i)
	}
	if taken == nil {
		return pk
	}
	pk.Filters = filters
	p.mu.Lock()
	p.taken[subscribeKey{cl, pk.PacketID}] = taken
	p.mu.Unlock()
	return pk
}

// OnSubscribed keeps, of the filters taken over, those the ACL granted,
// to deliver once the SUBACK is out.
func (p *retainedPacer) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	key := subscribeKey{cl, pk.PacketID}
	p.mu.Lock()
	defer p.mu.Unlock()
	taken, ok := p.taken[key]
	delete(p.taken, key)
	if !ok {
		return
	}
	var subs []packets.Subscription
	for _, i := range taken {
		if i < len(pk.Filters) && i < len(reasonCodes) && reasonCodes[i] < packets.ErrUnspecifiedError.Code {
			sub := pk.Filters[i]
			sub.Qos = min(sub.Qos, reasonCodes[i]) // the QoS granted
			subs = append(subs, sub)
		}
	}
	if len(subs) > 0 {
		p.pending[key] = subs
	}
}

// OnPacketSent starts the delivery when the SUBACK has been written.
func (p *retainedPacer) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type != packets.Suback {
		return
	}
	key := subscribeKey{cl, pk.PacketID}
	p.mu.Lock()
	subs, ok := p.pending[key]
	delete(p.pending, key)
	var pc *pacerClient
	if ok {
		pc = p.acks[cl]
		if pc == nil {
			pc = &pacerClient{wake: make(chan struct{}, 1), gone: make(chan struct{})}
			p.acks[cl] = pc
		}
		pc.users++
	}
	p.mu.Unlock()
	if ok {
		p.active.Add(1)
		go p.deliver(cl, pc, subs)
	}
}

// OnQosComplete wakes a delivery waiting for room in the window.
func (p *retainedPacer) OnQosComplete(cl *mqtt.Client, _ packets.Packet) {
	p.wake(cl)
}

// OnDisconnect ends the client's deliveries and forgets a SUBSCRIBE whose
// SUBACK never went out.
func (p *retainedPacer) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	p.mu.Lock()
	for k := range p.pending {
		if k.cl == cl {
			delete(p.pending, k)
		}
	}
	for k := range p.taken {
		if k.cl == cl {
			delete(p.taken, k)
		}
	}
	if pc := p.acks[cl]; pc != nil {
		close(pc.gone)
		delete(p.acks, cl)
	}
	p.mu.Unlock()
}

func (p *retainedPacer) wake(cl *mqtt.Client) {
	if p.active.Load() == 0 {
		return // every PUBACK of the fleet comes here
	}
	p.mu.Lock()
	pc := p.acks[cl]
	p.mu.Unlock()
	if pc != nil {
		select {
		case pc.wake <- struct{}{}:
		default:
		}
	}
}

// deliver sends the retained messages of subs to cl, holding at most half
// of the in-flight window, until they are all sent or cl goes away.
func (p *retainedPacer) deliver(cl *mqtt.Client, pc *pacerClient, subs []packets.Subscription) {
	defer func() {
		p.active.Add(-1)
		p.mu.Lock()
		if pc.users--; pc.users == 0 && p.acks[cl] == pc {
			delete(p.acks, cl)
		}
		p.mu.Unlock()
	}()
	// Half the window, or half what the client said it can take (an
	// MQTT 5 Receive Maximum; 0 for MQTT 3 clients, which set none).
	limit := p.b.opts.MaxInflight
	if rm := int(cl.Properties.Props.ReceiveMaximum); rm > 0 {
		limit = min(limit, rm)
	}
	window := max(limit/2, 1)
	// A PUBACK wakes the wait. mochi also empties slots without one (it
	// sends a message it held back for the client's quota and forgets
	// it), so the wait looks again once a second as well.
	recheck := time.NewTicker(time.Second)
	defer recheck.Stop()
	for _, sub := range subs {
		for _, m := range p.b.server.Topics.Messages(sub.Filter) {
			for min(m.FixedHeader.Qos, sub.Qos) > 0 && cl.State.Inflight.Len() >= window {
				select {
				case <-pc.wake:
				case <-recheck.C:
				case <-pc.gone:
					return
				}
			}
			select {
			case <-pc.gone:
				return
			default:
			}
			if !p.current(m) { // checked after the wait, which may be long
				continue
			}
			if err := p.send(cl, sub, m); err != nil {
				p.b.log.Debug("mqtt retained delivery stopped", "client", cl.ID, "filter", sub.Filter, "err", err)
				return
			}
		}
	}
}

// current reports whether m is still its topic's retained message. One
// that was replaced after the delivery began reached the subscriber live;
// sending the old one after it would leave the subscriber with a stale
// value.
func (p *retainedPacer) current(m packets.Packet) bool {
	cur, ok := p.b.server.Topics.Retained.Get(m.TopicName)
	return ok && cur.Created == m.Created && bytes.Equal(cur.Payload, m.Payload)
}

// send writes one retained message as mochi's own delivery would: the
// topic checked against the subscriber's ACL, the retain flag set, the
// QoS capped by the subscription's, a QoS 1 message tracked in flight
// until its PUBACK.
func (p *retainedPacer) send(cl *mqtt.Client, sub packets.Subscription, m packets.Packet) error {
	if !p.auth.OnACLCheck(cl, m.TopicName, false) {
		return nil
	}
	out := m.Copy(false)
	out.FixedHeader.Retain = true
	out.FixedHeader.Qos = min(out.FixedHeader.Qos, sub.Qos)
	if len(sub.Identifiers) > 0 { // MQTT 5 subscription identifiers
		out.Properties.SubscriptionIdentifier = slices.Sorted(maps.Values(sub.Identifiers))
	}
	if out.FixedHeader.Qos > 0 {
		id, err := cl.NextPacketID()
		if err != nil {
			return err
		}
		out.PacketID = uint16(id)
		if cl.State.Inflight.Set(out) {
			atomic.AddInt64(&p.b.server.Info.Inflight, 1)
			cl.State.Inflight.DecreaseSendQuota()
		}
	}
	if err := cl.WritePacket(out); err != nil {
		if out.FixedHeader.Qos > 0 && cl.State.Inflight.Delete(out.PacketID) {
			atomic.AddInt64(&p.b.server.Info.Inflight, -1)
			cl.State.Inflight.IncreaseSendQuota()
		}
		return err
	}
	return nil
}
