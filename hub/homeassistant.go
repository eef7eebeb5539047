package hub

import (
	"context"

	"github.com/fleetmq/fleet/hub/homeassistant"
	"github.com/fleetmq/fleet/schema"
)

// newHomeAssistant creates the Home Assistant discovery publisher when
// HomeAssistantDiscovery is on: it reads the fleet model's device set and
// publishes through the hub's MQTT connection.
func (h *Hub) newHomeAssistant() error {
	if !h.opts.HomeAssistantDiscovery {
		return nil
	}
	p, err := homeassistant.NewPublisher(homeassistant.PublisherOptions{
		Conn:    h.conn,
		Devices: h.homeAssistantDevices,
		Configs: homeassistant.Options{Topics: h.opts.Topics, Version: h.opts.Version},
		Logger:  h.log.With("component", "homeassistant"),
	})
	if err != nil {
		return err
	}
	h.ha = p
	return nil
}

// homeAssistantDevices is the device set with each device's last report.
func (h *Hub) homeAssistantDevices() []homeassistant.Device {
	refs := h.model.Devices(schema.LabelSelector{})
	out := make([]homeassistant.Device, 0, len(refs))
	for _, ref := range refs {
		st, _ := h.model.DeviceState(ref.Name, ref.UID)
		out = append(out, homeassistant.DeviceFromStatus(ref.Name, ref.UID, st))
	}
	return out
}

// runHomeAssistant runs the publisher until ctx ends, once the controller
// has published every desired state (discovery can wait; devices first).
func (h *Hub) runHomeAssistant(ctx context.Context) {
	select {
	case <-h.ctrl.Ready():
	case <-ctx.Done():
		return
	}
	if err := h.ha.Run(ctx); err != nil {
		h.log.Error("home assistant discovery stopped", "err", err)
	}
}
