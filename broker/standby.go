package broker

import (
	"errors"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A standby broker: the embedded broker of a hub that is not its fleet's
// leader (several hubs on one etcd store, hub/leader). It refuses every
// network client, devices, monitors and bootstrap clients alike, so that
// everything MQTT lands on the leader's broker, the only one whose hub
// publishes desired states and ingests reports; the hub's own in-process
// client still works. A refused client gets CONNACK "server unavailable"
// (MQTT 5: 0x88 with the reason as its reason string; 3.1.1: 0x03) and
// moves on to the next broker of its list. Going standby disconnects every
// network client, without publishing their wills: the devices have not
// gone offline, they move to the new leader.

// SetStandby puts the broker on standby with reason (said to every refused
// MQTT 5 client and logged), disconnecting the network clients it has; an
// empty reason makes it accept clients again.
func (b *Broker) SetStandby(reason string) {
	if reason == "" {
		if b.standby.Swap(nil) != nil {
			b.log.Info("mqtt broker active: accepting devices")
		}
		return
	}
	if b.standby.Swap(&reason) != nil {
		return
	}
	n := 0
	for _, cl := range b.server.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() || cl.Net.Conn == nil {
			continue
		}
		n++
		_ = cl.Net.Conn.Close()
	}
	b.log.Info("mqtt broker on standby: refusing devices", "reason", reason, "disconnected", n)
}

// Standby returns the reason the broker is on standby, "" when it is
// active.
func (b *Broker) Standby() string {
	if r := b.standby.Load(); r != nil {
		return *r
	}
	return ""
}

// refuseOnStandby answers a connecting network client of a standby broker
// with CONNACK "server unavailable" and returns the error that ends its
// connection; nil when the broker is active.
func (b *Broker) refuseOnStandby(cl *mqtt.Client) error {
	r := b.standby.Load()
	if r == nil {
		return nil
	}
	code := packets.Code{Code: packets.ErrServerUnavailable.Code, Reason: *r}
	if cl.Properties.ProtocolVersion < 5 {
		code = packets.ErrServerUnavailable // sent as 3.1.1's 0x03
	}
	b.log.Info("mqtt connection refused: standby hub", "client", cl.ID, "remote", cl.Net.Remote, "reason", *r)
	if err := b.server.SendConnack(cl, code, false, nil); err != nil {
		return errors.Join(packets.ErrServerUnavailable, err)
	}
	return packets.ErrServerUnavailable
}
