package broker

import (
	"errors"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker/ratelimit"
	"github.com/fleetmq/fleet/schema"
)

// Reasons a client is cut off, the values Options.OnClientCutOff receives.
const (
	// CutOffPublishRate: the client published faster than
	// Options.PublishRate.
	CutOffPublishRate = "publish_rate"
	// CutOffResponseRate: a device answered requests faster than
	// Options.ResponseRate.
	CutOffResponseRate = "response_rate"
	// CutOffPacketTooLarge: the client sent a packet larger than
	// Options.MaxPacketSize (mochi refuses it from its header, before
	// reading it).
	CutOffPacketTooLarge = "packet_too_large"
)

// Defaults of the publish limits (Options.PublishRate, ResponseRate).
var (
	// DefaultPublishRate: an agent publishes a status every 30 s, an
	// online flag per connection and an event per container change; a
	// rollout of a few pods is a few dozen messages. The burst is the
	// largest: after a reconnect an agent sends the events it queued while
	// offline (up to 256, status.DefaultEventQueueSize) back to back with
	// its status, and must not be cut off for it (TestPublishBurstCoversOfflineQueue).
	DefaultPublishRate = ratelimit.Rate{Burst: 600, PerSecond: 20}
	// DefaultResponseRate: the answers to logs, exec and top requests
	// are flow-controlled by the hub (at most schema.MaxRequestWindow
	// unacknowledged chunks of schema.MaxChunkBytes per request, at most
	// schema.MaxConcurrentRequests requests), so a device may send every
	// window at once; 512 chunks a second is 8 MiB/s.
	DefaultResponseRate = ratelimit.Rate{
		Burst:     schema.MaxRequestWindow * schema.MaxConcurrentRequests * 2,
		PerSecond: 512,
	}
)

// What the hub's messages to a device earn its buckets back. A device
// answers each desired state with a status and an event message (twice
// that when the status settle grace splits them, or a probe flaps in
// between) and each request with at least one response; without the
// credit, a burst of legitimate changes (a rollout and its undo, a
// ConfigMap edited in a loop) cut a device off for answering its own hub.
// Only the hub earns a device credit, so a device flooding on its own is
// still cut off at its rate.
const (
	desiredCredit = 4
	requestCredit = 1
)

// maxPublishBuckets bounds the per-client publish buckets kept; the least
// recently used (full again by then) goes first.
const maxPublishBuckets = 1 << 16

// publishLimits are the broker's per-client publish buckets.
type publishLimits struct {
	publish, responses *ratelimit.Keyed // nil: no limit
}

func newPublishLimits(o Options) publishLimits {
	var l publishLimits
	if o.PublishRate.PerSecond >= 0 {
		l.publish = ratelimit.NewKeyed(o.PublishRate, maxPublishBuckets, nil)
	}
	if o.ResponseRate.PerSecond >= 0 {
		l.responses = ratelimit.NewKeyed(o.ResponseRate, maxPublishBuckets, nil)
	}
	return l
}

// credit gives a device back, up to its burst, the publishes a message of
// the hub's on topic will make it send: desiredCredit for a desired
// state, requestCredit (in the responses bucket) for a request.
func (l publishLimits) credit(t schema.Topics, topic string) {
	device, kind, err := t.ParseDevice(topic)
	if err != nil {
		return
	}
	switch {
	case kind == schema.TopicDesired && l.publish != nil:
		l.publish.Credit("n/"+device, desiredCredit)
	case kind == schema.TopicRequests && l.responses != nil:
		l.responses.Credit("n/"+device, requestCredit)
	}
}

// OnConnect refuses, before any credential is checked, a client whose
// source address has failed to authenticate too often (see
// ratelimit.AuthLimiter): CONNACK "quota exceeded" to an MQTT 5 client,
// "not authorized" to an MQTT 3.1.1 one (which has no better code). An
// attempt it admits is handed to OnConnectAuthenticate, which records how
// it ended.
func (h *hook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	if cl.Net.Inline {
		return nil
	}
	if err := h.b.refuseOnStandby(cl); err != nil { // standby.go
		return err
	}
	source := ratelimit.Source(cl.Net.Remote)
	a, wait, ok := h.b.opts.AuthLimiter.Admit(source, pk.Connect.Username, pk.Connect.Password)
	if ok {
		h.b.attempts.Store(cl, a)
		return nil
	}
	h.b.log.Debug("mqtt connection refused: too many failed logins from this address",
		"client", cl.ID, "remote", cl.Net.Remote, "retry_after", wait)
	h.b.loginRefused(string(pk.Connect.Username), cl.Net.Remote, LoginThrottled, "too many failed logins from this address: refused unchecked")
	code := packets.ErrQuotaExceeded
	if cl.Properties.ProtocolVersion < 5 {
		code = packets.ErrBadUsernameOrPassword // CONNACK 0x05, not authorized
	}
	if err := h.b.server.SendConnack(cl, code, false, nil); err != nil {
		return errors.Join(code, err)
	}
	return code
}

// attempt returns the attempt OnConnect admitted for cl.
func (h *hook) attempt(cl *mqtt.Client) ratelimit.Attempt {
	v, ok := h.b.attempts.LoadAndDelete(cl)
	if !ok {
		return ratelimit.Attempt{}
	}
	return v.(ratelimit.Attempt)
}

// OnPacketRead cuts off a network client that publishes faster than its
// limit: it is disconnected (MQTT 5: DISCONNECT "quota exceeded") before
// the publish is processed, and its will is published. Its bucket outlives
// the connection, so a client that reconnects and goes on is cut off
// again at once. Clients with the hub's role are exempt, as is the
// in-process client (whose publishes are never read from a connection).
func (h *hook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline {
		return pk, nil
	}
	var id Identity
	if v, ok := h.b.idents.Load(cl.ID); ok && v.(identEntry).cl == cl {
		id = v.(identEntry).id
	}
	if id.Role == RoleHub {
		return pk, nil
	}
	limit, reason := h.b.limits.publish, CutOffPublishRate
	if id.Role == RoleDevice && pk.TopicName == h.b.opts.Topics.Device(id.Name, schema.TopicResponses) {
		limit, reason = h.b.limits.responses, CutOffResponseRate
	}
	if limit == nil {
		return pk, nil
	}
	// Devices and monitors by name (a bucket per identity survives
	// reconnects); bootstrap clients by client ID: many devices may
	// enroll at once with one bootstrap token.
	key := "c/" + cl.ID
	if id.Role == RoleDevice || id.Role == RoleMonitor {
		key = "n/" + id.Name
	}
	if ok, _ := limit.Take(key, 1); ok {
		return pk, nil
	}
	r := limit.Rate()
	h.b.log.Warn("mqtt client cut off: publishing too fast", "client", cl.ID, "remote", cl.Net.Remote,
		"identity", id.Name, "role", id.Role.String(), "reason", reason, "burst", r.Burst, "per_second", r.PerSecond)
	h.b.cutOff(reason)
	_ = h.b.server.DisconnectClient(cl, packets.ErrQuotaExceeded)
	// Only ErrRejectPacket makes mochi drop the packet and end the read
	// loop (with the will); it ignores other errors of this hook.
	return pk, errors.Join(packets.ErrRejectPacket, packets.ErrQuotaExceeded)
}

// noteDisconnect counts a client that mochi disconnected for an oversize
// packet.
func (h *hook) noteDisconnect(cl *mqtt.Client, err error) {
	if err == nil || cl.Net.Inline || !errors.Is(err, packets.ErrPacketTooLarge) {
		return
	}
	h.b.log.Warn("mqtt client cut off: packet too large", "client", cl.ID, "remote", cl.Net.Remote,
		"username", string(cl.Properties.Username), "max_packet_size", h.b.opts.MaxPacketSize)
	h.b.cutOff(CutOffPacketTooLarge)
}

func (b *Broker) cutOff(reason string) {
	if b.opts.OnClientCutOff != nil {
		b.opts.OnClientCutOff(reason)
	}
}
