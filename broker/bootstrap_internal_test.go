package broker

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestOnPublishDropsBootstrapRetain: a bootstrap client's request is never
// kept as a retained message; other clients' retain flags are untouched.
func TestOnPublishDropsBootstrapRetain(t *testing.T) {
	b := &Broker{}
	h := &hook{b: b}
	boot := &mqtt.Client{ID: "req_0123456789abcdef"}
	dev := &mqtt.Client{ID: "pi-1"}
	b.idents.Store(boot.ID, identEntry{cl: boot, id: Identity{Name: "bootstrap.abcdef", Role: RoleBootstrap, Request: boot.ID}})
	b.idents.Store(dev.ID, identEntry{cl: dev, id: Identity{Name: "pi-1", Role: RoleDevice}})
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: "t"}

	got, err := h.OnPublish(boot, pk)
	if err != nil || got.FixedHeader.Retain {
		t.Errorf("bootstrap publish: retain=%v err=%v, want false, nil", got.FixedHeader.Retain, err)
	}
	got, err = h.OnPublish(dev, pk)
	if err != nil || !got.FixedHeader.Retain {
		t.Errorf("device publish: retain=%v err=%v, want true, nil", got.FixedHeader.Retain, err)
	}
}
