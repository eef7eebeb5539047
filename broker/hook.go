package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/schema"
)

// hook is the broker's only auth hook: mochi ORs the results of several
// hooks, so no other hook that answers OnConnectAuthenticate or OnACLCheck
// (AllowHook, auth.Ledger) may ever be added beside it.
type hook struct {
	mqtt.HookBase
	b *Broker
}

func (h *hook) ID() string { return "fleet-auth" }

func (h *hook) Provides(b byte) bool {
	return bytes.Contains([]byte{
		mqtt.OnConnect,
		mqtt.OnConnectAuthenticate,
		mqtt.OnACLCheck,
		mqtt.OnPacketRead,
		mqtt.OnDisconnect,
		mqtt.OnClientExpired,
		mqtt.OnPublish,
		mqtt.OnWill,
		mqtt.OnPacketEncode,
	}, []byte{b})
}

// OnPacketEncode keeps server DISCONNECT packets from MQTT 3.1.1 clients,
// where the protocol defines none (3.1.1 §3.14: only a client sends
// DISCONNECT; a server closes the connection). mochi sends one on a
// session takeover, a refused QoS 1 publish, its shutdown and our
// cut-offs, whatever the client's version. A packet of the reserved type 0
// is one mochi's WritePacket will not encode: it writes nothing, and
// DisconnectClient closes the connection as it would have anyway.
func (h *hook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Disconnect && cl.Properties.ProtocolVersion < 5 {
		pk.FixedHeader.Type = packets.Reserved
	}
	return pk
}

// droppedWillTopic is where OnWill sends a will it drops: a $ topic, which
// no wildcard matches and no network client may subscribe to, published
// without retain, so it reaches no one and stays nowhere.
const droppedWillTopic = "$fleet/dropped-will"

// OnWill drops the wills of the clients a closing broker disconnects. A
// will says that a client went away unannounced; when the broker stops, the
// devices have not gone anywhere (they reconnect to the next one), and
// every subscriber is being disconnected too, so "offline" for the whole
// fleet would only flash on monitors during a hub restart. Publishing them
// also slowed the stop, which a restarted hub waits for: with 10,000
// devices, their wills retained and fanned out on as many goroutines while
// the broker closed the connections, the stop took 0.58-1.67 s (median
// 0.79 s) against 0.48-1.08 s (median 0.55 s) without (BENCHMARKS.md, B4).
// A client that is kicked or drops while the broker runs still has its will
// published.
func (h *hook) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	if !h.b.closed.Load() && h.b.standby.Load() == nil {
		return will, nil
	}
	return mqtt.Will{TopicName: droppedWillTopic}, nil
}

// OnConnectAuthenticate authenticates a network client through the
// Authenticator and records its identity for OnACLCheck. Whether the
// credentials were good is recorded in the attempt OnConnect admitted.
func (h *hook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	b := h.b
	if cl.Net.Inline {
		return true
	}
	attempt := h.attempt(cl)
	username := string(pk.Connect.Username)
	log := b.log.With("client", cl.ID, "remote", cl.Net.Remote, "username", username)
	switch {
	case cl.ID == mqtt.InlineClientId:
		// The in-process client has this ID; a network client with it
		// would take over the hub's session.
		log.Warn("mqtt connection refused: reserved client ID")
		attempt.Failed()
		return false
	case username == "":
		log.Info("mqtt connection refused: anonymous")
		attempt.Failed()
		b.loginRefused(username, cl.Net.Remote, LoginRefused, "no username")
		return false
	case len(pk.Connect.Password) == 0:
		log.Info("mqtt connection refused: no password")
		attempt.Failed()
		b.loginRefused(username, cl.Net.Remote, LoginRefused, "no password")
		return false
	}

	ctx, cancel := context.WithTimeout(b.ctx, b.opts.AuthTimeout)
	id, ok := b.opts.Auth.Authenticate(ctx, username, pk.Connect.Password)
	cancel()
	if !ok {
		log.Info("mqtt connection refused: bad credentials")
		attempt.Failed()
		b.loginRefused(username, cl.Net.Remote, LoginRefused, "bad credentials")
		return false
	}
	attempt.Succeeded()
	switch id.Role {
	case RoleDevice:
		if err := schema.ValidateName(id.Name); err != nil {
			log.Error("mqtt connection refused: authenticator returned an invalid device name", "identity", id.Name, "error", err)
			return false
		}
	case RoleMonitor, RoleHub:
		if id.Name == "" {
			log.Error("mqtt connection refused: authenticator returned an empty identity name")
			return false
		}
	case RoleBootstrap:
		if !h.admitBootstrap(cl, pk, log) {
			return false
		}
		id.Request = cl.ID
	default:
		log.Error("mqtt connection refused: authenticator returned an unknown role", "role", id.Role.String())
		return false
	}
	log = log.With("identity", id.Name, "role", id.Role.String())
	why, renewal := b.clientCertRefusal(cl, id)
	if why != "" {
		log.Info("mqtt connection refused: " + why)
		b.loginRefused(username, cl.Net.Remote, LoginRefused, why)
		return false
	}
	if renewal {
		id.RenewalOnly = true
		log = log.With("renewal_only", true)
		log.Info("mqtt device connected with an expired client certificate: it may only renew it")
	}

	// The broker publishes the will for the client, without an ACL check,
	// so the will topic must be one the client may write.
	if pk.Connect.WillFlag && !Allowed(b.opts.Topics, id, pk.Connect.WillTopic, true) {
		log.Warn("mqtt connection refused: will topic not allowed", "will_topic", pk.Connect.WillTopic)
		return false
	}
	if !h.admitClientID(cl, id, username, log) {
		return false
	}
	b.idents.Store(cl.ID, identEntry{cl: cl, id: id})
	log.Debug("mqtt client authenticated")
	return true
}

// admitClientID tells whether the authenticated client id may use its
// client ID: a device only its own, and nobody another identity's
// session (a device takes its own back).
func (h *hook) admitClientID(cl *mqtt.Client, id Identity, username string, log *slog.Logger) bool {
	b := h.b
	if id.Role == RoleDevice && !DeviceClientID(id.Name, cl.ID) {
		why := fmt.Sprintf("client ID %q is not the device's own (its name, or its name, '-' and 16 hex digits)", schema.Truncate(cl.ID, 80, "…"))
		log.Warn("mqtt connection refused: " + why)
		b.loginRefused(username, cl.Net.Remote, LoginRefused, why)
		return false
	}
	// mochi hands an existing session, with its queued messages, to any
	// client presenting the same client ID. Never across identities: a
	// device takes its own client ID back from whoever holds it (only a
	// monitor, the hub or a bootstrap client can, devices being held to
	// their own); anyone else is refused and told why.
	if existing, ok := b.server.Clients.Get(cl.ID); ok && existing != cl && string(existing.Properties.Username) != username {
		holder := string(existing.Properties.Username)
		if id.Role != RoleDevice {
			why := "client ID is held by another identity's session"
			log.Warn("mqtt connection refused: "+why, "holder", holder)
			b.loginRefused(username, cl.Net.Remote, LoginRefused, why)
			return false
		}
		log.Warn("mqtt client ID held by another identity's session: its device takes it back", "holder", holder)
		// Nothing of the holder's session passes to the device; mochi's
		// own take-over then disconnects it and marks it taken over.
		b.forgetSession(existing)
	}
	return true
}

// DeviceClientID reports whether clientID is one the device named name may
// connect with: its name, or its name, '-' and 16 lower-case hex digits
// (the agent's own, edgeagent/state.Dir.ClientID). No other device's
// client ID has that shape, so a device cannot hold another's session.
func DeviceClientID(name, clientID string) bool {
	if clientID == name {
		return true
	}
	suffix, ok := strings.CutPrefix(clientID, name+"-")
	if !ok || len(suffix) != 16 {
		return false
	}
	for i := range len(suffix) {
		if c := suffix[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// admitBootstrap checks what a bootstrap client's connection must be: its
// client ID is its enrollment request ID, so it must be a valid one, held
// by no other client or session (it would inherit that client's answer),
// with a clean session and no will.
func (h *hook) admitBootstrap(cl *mqtt.Client, pk packets.Packet, log *slog.Logger) bool {
	switch {
	case schema.ValidateRequestID(cl.ID) != nil:
		log.Info("mqtt connection refused: a bootstrap client's client ID must be its enrollment request ID (req_ and 16-64 letters, digits, '-', '_')")
		return false
	case !pk.Connect.Clean:
		log.Info("mqtt connection refused: a bootstrap client must use a clean session")
		return false
	case pk.Connect.WillFlag:
		log.Info("mqtt connection refused: a bootstrap client may not set a will")
		return false
	}
	if existing, ok := h.b.server.Clients.Get(cl.ID); ok && existing != cl {
		log.Warn("mqtt connection refused: the enrollment request ID is held by another client")
		return false
	}
	if v, ok := h.b.idents.Load(cl.ID); ok && v.(identEntry).cl != cl {
		log.Warn("mqtt connection refused: the enrollment request ID is held by another client")
		return false
	}
	return true
}

// OnPublish credits a device's publish buckets for what the hub sends it
// (publishLimits.credit), and drops the retain flag of a bootstrap
// client's publish: an enrollment request is for the hub, now, never for
// later subscribers.
//
// It also gives a retained publish from the network a topic name of its
// own: mochi decodes the name in place from the packet's read buffer,
// and the retained copy it keeps shares that name, so each device's
// retained status would hold its whole last packet (topic and payload,
// ~1.3 KB) beside the payload mochi copied (BENCHMARKS.md, issue 45).
func (h *hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		h.b.limits.credit(h.b.opts.Topics, pk.TopicName)
		return pk, nil
	}
	if pk.FixedHeader.Retain {
		pk.TopicName = strings.Clone(pk.TopicName)
	}
	v, ok := h.b.idents.Load(cl.ID)
	if !ok {
		return pk, nil
	}
	switch v.(identEntry).id.Role {
	case RoleHub:
		h.b.limits.credit(h.b.opts.Topics, pk.TopicName)
	case RoleBootstrap:
		pk.FixedHeader.Retain = false
	}
	return pk, nil
}

// OnACLCheck applies Allowed: with the subscription filter on SUBSCRIBE,
// with the topic on PUBLISH and on every delivery.
func (h *hook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	v, ok := h.b.idents.Load(cl.ID)
	if !ok || v.(identEntry).cl != cl {
		return false
	}
	id := v.(identEntry).id
	if !write {
		// A shared subscription ($share/{group}/{filter}: consumers that
		// split a stream between them, as Telegraf or Node-RED instances
		// do) reads what its filter reads.
		if f, ok := sharedFilter(topic); ok {
			topic = f
		} else if strings.HasPrefix(topic, "$share/") {
			return false
		}
	}
	if Allowed(h.b.opts.Topics, id, topic, write) {
		return true
	}
	h.b.log.Debug("mqtt access denied", "client", cl.ID, "identity", id.Name, "role", id.Role.String(), "topic", topic, "write", write)
	return false
}

// sharedFilter returns the filter of a well-formed shared subscription
// filter, $share/{group}/{filter}: a group name without wildcards and a
// filter that is not empty.
func sharedFilter(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, "$share/")
	if !ok {
		return "", false
	}
	group, filter, ok := strings.Cut(rest, "/")
	if !ok || group == "" || strings.ContainsAny(group, "+#") || filter == "" {
		return "", false
	}
	return filter, true
}

// OnDisconnect forgets the identity of a client whose session ends with the
// connection.
func (h *hook) OnDisconnect(cl *mqtt.Client, err error, expire bool) {
	h.b.log.Debug("mqtt client disconnected", "client", cl.ID, "username", string(cl.Properties.Username), "error", err, "session_ends", expire)
	h.noteDisconnect(cl, err)
	if expire {
		h.forget(cl)
	}
}

// OnClientExpired forgets an expired persistent session. mochi removes the
// client but leaves its subscriptions in the topic index; drop them too.
func (h *hook) OnClientExpired(cl *mqtt.Client) {
	h.forget(cl)
	h.b.server.UnsubscribeClient(cl)
	cl.ClearInflights()
}

func (h *hook) forget(cl *mqtt.Client) {
	if v, ok := h.b.idents.Load(cl.ID); ok && v.(identEntry).cl == cl {
		h.b.idents.CompareAndDelete(cl.ID, v)
	}
}
