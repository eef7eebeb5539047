package hub

import (
	"context"

	"github.com/fleetmq/fleet/hub/fleetmodel"
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
		Devices: (&haDevices{model: h.model}).list,
		Configs: homeassistant.Options{Topics: h.opts.Topics, Version: h.opts.Version},
		Logger:  h.log.With("component", "homeassistant"),
	})
	if err != nil {
		return err
	}
	h.ha = p
	return nil
}

// haDevices turns the fleet model's device set into homeassistant
// Devices, reusing the last one of a device whose report (a new pointer
// on every report) did not change: a pass over 10,000 devices then costs
// map lookups, not 10,000 JSON encodings. Only the publisher's goroutine
// calls it.
type haDevices struct {
	model *fleetmodel.Model
	last  map[string]haDevice
}

type haDevice struct {
	uid string
	st  *schema.DeviceStatus
	dev homeassistant.Device
}

func (d *haDevices) list() []homeassistant.Device {
	refs := d.model.Devices(schema.LabelSelector{})
	out := make([]homeassistant.Device, 0, len(refs))
	next := make(map[string]haDevice, len(refs))
	for _, ref := range refs {
		st, _ := d.model.DeviceState(ref.Name, ref.UID)
		e, ok := d.last[ref.Name]
		if !ok || e.uid != ref.UID || e.st != st {
			e = haDevice{uid: ref.UID, st: st, dev: homeassistant.DeviceFromStatus(ref.Name, ref.UID, st)}
		}
		next[ref.Name] = e
		out = append(out, e.dev)
	}
	d.last = next
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
