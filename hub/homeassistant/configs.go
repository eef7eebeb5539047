package homeassistant

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/schema"
)

// DefaultPrefix is Home Assistant's default discovery prefix, the one
// the broker's access policy lets a monitor read.
const DefaultPrefix = broker.HomeAssistantPrefix

// Manufacturer is the device block's manufacturer.
const Manufacturer = "Fleet"

// NodeIDPrefix starts the node_id of every Fleet device's discovery topics:
// homeassistant/<component>/fleet_<device>/<object_id>/config.
const NodeIDPrefix = "fleet_"

// Device is what the configs of one device are made from.
type Device struct {
	// Name is the device's name (DNS-1123 label); UID its metadata.uid,
	// which makes the unique_ids (the name when empty).
	Name string
	UID  string
	// AgentVersion, OS and Arch are from the device's last status; ""
	// before the first report.
	AgentVersion string
	OS           string
	Arch         string
	// Node are the JSON keys of the "node" object of the device's last
	// status (memoryAvailableBytes, diskFreeBytes, temperatureCelsius,
	// throttled…): the figures the device reports. A sensor for a figure
	// appears once the device reports it.
	Node map[string]bool
}

// DeviceFromStatus returns the Device of a registered device and its last
// status (nil before the first report).
func DeviceFromStatus(name, uid string, st *schema.DeviceStatus) Device {
	d := Device{Name: name, UID: uid}
	if st == nil {
		return d
	}
	d.AgentVersion, d.OS, d.Arch = st.Agent.Version, st.Agent.OS, st.Agent.Arch
	if st.Node != nil {
		if b, err := json.Marshal(st.Node); err == nil {
			var keys map[string]json.RawMessage
			if json.Unmarshal(b, &keys) == nil && len(keys) > 0 {
				d.Node = make(map[string]bool, len(keys))
				for k := range keys {
					d.Node[k] = true
				}
			}
		}
	}
	return d
}

// Config is one retained discovery message.
type Config struct {
	// Topic is <prefix>/<component>/<node_id>/<object_id>/config.
	Topic string
	// Payload is the config's JSON.
	Payload []byte
}

// Payload is a discovery config as Home Assistant reads it, with full key
// names (no abbreviations).
type Payload struct {
	Name              string         `json:"name"`
	UniqueID          string         `json:"unique_id"`
	Device            PayloadDevice  `json:"device"`
	Origin            PayloadOrigin  `json:"origin"`
	Availability      []Availability `json:"availability"`
	StateTopic        string         `json:"state_topic"`
	ValueTemplate     string         `json:"value_template,omitempty"`
	PayloadOn         string         `json:"payload_on,omitempty"`
	PayloadOff        string         `json:"payload_off,omitempty"`
	DeviceClass       string         `json:"device_class,omitempty"`
	StateClass        string         `json:"state_class,omitempty"`
	UnitOfMeasurement string         `json:"unit_of_measurement,omitempty"`
	EntityCategory    string         `json:"entity_category,omitempty"`
	Icon              string         `json:"icon,omitempty"`
	// QoS of Home Assistant's subscription to the state topic; 0 (left
	// out, Home Assistant's default): the retained state still arrives on
	// subscribe, and the broker sends Home Assistant no QoS 1 deliveries,
	// whose packet identifiers the embedded broker (mochi) shares with the
	// client's own SUBSCRIBEs (one made while many are in flight can be
	// refused with 0x91, identifier in use).
	QoS int `json:"qos,omitempty"`
}

// PayloadDevice is a config's device block: every entity of one Fleet
// device carries the same one, so Home Assistant groups them.
type PayloadDevice struct {
	Identifiers  []string `json:"identifiers"`
	Name         string   `json:"name"`
	Manufacturer string   `json:"manufacturer"`
	Model        string   `json:"model"`
	SWVersion    string   `json:"sw_version,omitempty"`
}

// PayloadOrigin names the application that published the config.
type PayloadOrigin struct {
	Name      string `json:"name"`
	SWVersion string `json:"sw_version,omitempty"`
}

// Availability is one entry of a config's availability list.
type Availability struct {
	Topic               string `json:"topic"`
	PayloadAvailable    string `json:"payload_available"`
	PayloadNotAvailable string `json:"payload_not_available"`
}

// entity is one row of the entity table.
type entity struct {
	component string // sensor or binary_sensor
	objectID  string
	name      string
	// online: the state is the online topic; otherwise the status topic.
	online   bool
	template string
	// needs is the node key the device must report ("" for none).
	needs                   string
	payloadOn, payloadOff   string
	deviceClass, stateClass string
	unit, category, icon    string
}

// Boolean templates render Jinja's True or False.
const (
	renderedTrue  = "True"
	renderedFalse = "False"
)

// entities is every entity a device may have, in publishing order.
var entities = []entity{
	{component: "binary_sensor", objectID: "online", name: "Online", online: true,
		payloadOn: schema.Online, payloadOff: schema.Offline, deviceClass: "connectivity"},
	{component: "sensor", objectID: "pods_running", name: "Pods running", icon: "mdi:play-circle",
		template:   "{{ value_json.pods | selectattr('phase', 'eq', 'Running') | list | length }}",
		stateClass: "measurement", unit: "pods"},
	{component: "sensor", objectID: "pods_desired", name: "Pods desired", icon: "mdi:format-list-bulleted",
		template:   "{{ value_json.pods | length }}",
		stateClass: "measurement", unit: "pods"},
	{component: "binary_sensor", objectID: "converged", name: "Converged", icon: "mdi:check-circle",
		// Every pod the agent reports is ready, or finished (Succeeded).
		template:  "{{ value_json.pods | rejectattr('ready') | rejectattr('phase', 'eq', 'Succeeded') | list | length == 0 }}",
		payloadOn: renderedTrue, payloadOff: renderedFalse},
	{component: "sensor", objectID: "restarts", name: "Restarts", icon: "mdi:restart",
		template:   "{{ value_json.pods | map(attribute='restarts') | sum }}",
		stateClass: "total_increasing", category: "diagnostic"},
	{component: "sensor", objectID: "memory_available", name: "Memory available", needs: "memoryAvailableBytes",
		template:    "{{ value_json.node.memoryAvailableBytes }}",
		deviceClass: "data_size", stateClass: "measurement", unit: "B", category: "diagnostic"},
	{component: "sensor", objectID: "disk_free", name: "Disk free", needs: "diskFreeBytes",
		template:    "{{ value_json.node.diskFreeBytes }}",
		deviceClass: "data_size", stateClass: "measurement", unit: "B", category: "diagnostic"},
	{component: "sensor", objectID: "temperature", name: "Temperature", needs: "temperatureCelsius",
		template:    "{{ value_json.node.temperatureCelsius }}",
		deviceClass: "temperature", stateClass: "measurement", unit: "°C", category: "diagnostic"},
	{component: "sensor", objectID: "throttled", name: "Throttled", needs: "throttled", icon: "mdi:speedometer-slow",
		// A Raspberry Pi's get_throttled value: "0x0" is never throttled.
		template: "{{ value_json.node.throttled }}", category: "diagnostic"},
}

// Options of Configs; the zero value uses the defaults.
type Options struct {
	// Topics is Fleet's topic layout; default prefix fleet/v1.
	Topics schema.Topics
	// Prefix is Home Assistant's discovery prefix; default DefaultPrefix.
	Prefix string
	// Version is the hub's version, the configs' origin sw_version.
	Version string
}

func (o Options) prefix() string {
	if o.Prefix == "" {
		return DefaultPrefix
	}
	return strings.TrimSuffix(o.Prefix, "/")
}

// NodeID returns the node_id of a device's discovery topics: fleet_ and
// the name with every character Home Assistant does not allow there
// (anything but letters, digits, '_' and '-') replaced by '_'.
func NodeID(device string) string {
	return NodeIDPrefix + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, device)
}

// UniqueID returns the unique_id of one of a device's entities: fleet_,
// the device's uid (its name without one) and the object_id.
func UniqueID(d Device, objectID string) string {
	id := d.UID
	if id == "" {
		id = d.Name
	}
	return NodeIDPrefix + id + "_" + objectID
}

// Configs returns the discovery configs of one device, in a fixed order.
// It fails only on a device name that cannot be part of a topic.
func Configs(opts Options, d Device) ([]Config, error) {
	if err := schema.ValidateName(d.Name); err != nil {
		return nil, fmt.Errorf("home assistant discovery: device name: %w", err)
	}
	avail := []Availability{{
		Topic:               opts.Topics.Device(d.Name, schema.TopicOnline),
		PayloadAvailable:    schema.Online,
		PayloadNotAvailable: schema.Offline,
	}}
	dev := deviceBlock(d)
	origin := PayloadOrigin{Name: Manufacturer, SWVersion: opts.Version}
	out := make([]Config, 0, len(entities))
	for _, e := range entities {
		if e.needs != "" && !d.Node[e.needs] {
			continue
		}
		p := Payload{
			Name: e.name, UniqueID: UniqueID(d, e.objectID),
			Device: dev, Origin: origin, Availability: avail,
			StateTopic:    opts.Topics.Device(d.Name, schema.TopicStatus),
			ValueTemplate: e.template,
			PayloadOn:     e.payloadOn, PayloadOff: e.payloadOff,
			DeviceClass: e.deviceClass, StateClass: e.stateClass,
			UnitOfMeasurement: e.unit, EntityCategory: e.category, Icon: e.icon,
		}
		if e.online {
			p.StateTopic = opts.Topics.Device(d.Name, schema.TopicOnline)
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("home assistant discovery: %s %s: %w", d.Name, e.objectID, err)
		}
		out = append(out, Config{Topic: Topic(opts, e.component, d.Name, e.objectID), Payload: b})
	}
	return out, nil
}

// Topic returns <prefix>/<component>/<node_id>/<object_id>/config.
func Topic(opts Options, component, device, objectID string) string {
	return opts.prefix() + "/" + component + "/" + NodeID(device) + "/" + objectID + "/config"
}

// deviceBlock is the device block of every config of d.
func deviceBlock(d Device) PayloadDevice {
	id := d.UID
	if id == "" {
		id = d.Name
	}
	model := "fleet-agent"
	if d.OS != "" && d.Arch != "" {
		model += " " + d.OS + "/" + d.Arch
	}
	return PayloadDevice{
		Identifiers:  []string{NodeIDPrefix + id},
		Name:         d.Name,
		Manufacturer: Manufacturer,
		Model:        model,
		SWVersion:    d.AgentVersion,
	}
}
