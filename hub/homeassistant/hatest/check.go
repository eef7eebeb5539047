package hatest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// idPattern is what Home Assistant allows in a discovery topic's node_id
// and object_id.
var idPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Keys Home Assistant documents for the components Fleet publishes
// (full names; any other key, an abbreviation included, is refused).
var (
	commonKeys = set("availability", "availability_mode", "availability_template", "availability_topic",
		"default_entity_id", "device", "device_class", "enabled_by_default", "encoding", "entity_category",
		"entity_picture", "expire_after", "force_update", "icon", "json_attributes_template",
		"json_attributes_topic", "name", "object_id", "origin", "payload_available",
		"payload_not_available", "platform", "qos", "state_topic", "unique_id", "value_template")
	componentKeys = map[string]map[string]bool{
		"sensor": set("last_reset_value_template", "options", "state_class", "suggested_display_precision",
			"unit_of_measurement"),
		"binary_sensor": set("off_delay", "payload_off", "payload_on"),
	}
	deviceKeys = set("configuration_url", "connections", "hw_version", "identifiers", "manufacturer",
		"model", "model_id", "name", "serial_number", "suggested_area", "sw_version", "via_device")
	originKeys       = set("name", "sw_version", "support_url")
	availabilityKeys = set("topic", "payload_available", "payload_not_available", "value_template")
	deviceClasses    = map[string]map[string]bool{
		"sensor":        set("data_size", "temperature", "duration", "timestamp"),
		"binary_sensor": set("connectivity", "problem", "running", "update"),
	}
	stateClasses     = set("measurement", "total", "total_increasing")
	entityCategories = set("config", "diagnostic")
)

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// Config is a checked discovery config.
type Config struct {
	Component, NodeID, ObjectID string
	// Payload is the config as decoded JSON.
	Payload map[string]any
}

// String returns the config's value for key, "" if absent or not a string.
func (c Config) String(key string) string {
	s, _ := c.Payload[key].(string)
	return s
}

// AvailabilityTopics returns the topics of the availability list.
func (c Config) AvailabilityTopics() []string {
	var out []string
	list, _ := c.Payload["availability"].([]any)
	for _, a := range list {
		if m, ok := a.(map[string]any); ok {
			s, _ := m["topic"].(string)
			out = append(out, s)
		}
	}
	return out
}

// Check parses a retained discovery message under prefix and applies
// Home Assistant's schema rules to it.
func Check(prefix, topic string, payload []byte) (Config, error) {
	var c Config
	rest, ok := strings.CutPrefix(topic, prefix+"/")
	levels := strings.Split(rest, "/")
	if !ok || len(levels) != 4 || levels[3] != "config" {
		return c, fmt.Errorf("topic %q: want %s/<component>/<node_id>/<object_id>/config", topic, prefix)
	}
	c.Component, c.NodeID, c.ObjectID = levels[0], levels[1], levels[2]
	ck, ok := componentKeys[c.Component]
	if !ok {
		return c, fmt.Errorf("topic %q: component %q is not one Fleet publishes", topic, c.Component)
	}
	if !idPattern.MatchString(c.NodeID) || !idPattern.MatchString(c.ObjectID) {
		return c, fmt.Errorf("topic %q: node_id and object_id must match %s", topic, idPattern)
	}
	if err := json.Unmarshal(payload, &c.Payload); err != nil {
		return c, fmt.Errorf("topic %q: payload is not a JSON object: %w", topic, err)
	}
	for k := range c.Payload {
		if !commonKeys[k] && !ck[k] {
			return c, fmt.Errorf("topic %q: key %q is not a documented %s key (full names only)", topic, k, c.Component)
		}
	}
	for _, k := range []string{"name", "unique_id", "state_topic", "device", "origin", "availability"} {
		if _, ok := c.Payload[k]; !ok {
			return c, fmt.Errorf("topic %q: required key %q missing", topic, k)
		}
	}
	for _, k := range []string{"name", "unique_id", "state_topic"} {
		if c.String(k) == "" {
			return c, fmt.Errorf("topic %q: %s must be a non-empty string", topic, k)
		}
	}
	if err := checkBlocks(c); err != nil {
		return c, fmt.Errorf("topic %q: %w", topic, err)
	}
	if err := checkClasses(c); err != nil {
		return c, fmt.Errorf("topic %q: %w", topic, err)
	}
	return c, nil
}

// checkBlocks checks the device, origin and availability blocks.
func checkBlocks(c Config) error {
	dev, ok := c.Payload["device"].(map[string]any)
	if !ok {
		return fmt.Errorf("device must be an object")
	}
	if err := onlyKeys("device", dev, deviceKeys); err != nil {
		return err
	}
	ids, _ := dev["identifiers"].([]any)
	if len(ids) == 0 {
		return fmt.Errorf("device.identifiers must be a non-empty list")
	}
	for _, id := range ids {
		if s, ok := id.(string); !ok || s == "" {
			return fmt.Errorf("device.identifiers: %v is not a non-empty string", id)
		}
	}
	if s, _ := dev["name"].(string); s == "" {
		return fmt.Errorf("device.name missing")
	}
	origin, ok := c.Payload["origin"].(map[string]any)
	if !ok {
		return fmt.Errorf("origin must be an object")
	}
	if err := onlyKeys("origin", origin, originKeys); err != nil {
		return err
	}
	if s, _ := origin["name"].(string); s == "" {
		return fmt.Errorf("origin.name is required")
	}
	avail, ok := c.Payload["availability"].([]any)
	if !ok || len(avail) == 0 {
		return fmt.Errorf("availability must be a non-empty list")
	}
	if _, ok := c.Payload["availability_topic"]; ok {
		return fmt.Errorf("availability and availability_topic must not be used together")
	}
	for i, a := range avail {
		m, ok := a.(map[string]any)
		if !ok {
			return fmt.Errorf("availability[%d] must be an object", i)
		}
		if err := onlyKeys(fmt.Sprintf("availability[%d]", i), m, availabilityKeys); err != nil {
			return err
		}
		if s, _ := m["topic"].(string); s == "" {
			return fmt.Errorf("availability[%d].topic is required", i)
		}
	}
	return nil
}

// checkClasses checks device_class, state_class, entity_category and qos.
func checkClasses(c Config) error {
	if dc, ok := c.Payload["device_class"]; ok {
		if s, _ := dc.(string); !deviceClasses[c.Component][s] {
			return fmt.Errorf("device_class %v is not a %s device class Fleet uses", dc, c.Component)
		}
	}
	if sc, ok := c.Payload["state_class"]; ok {
		if s, _ := sc.(string); !stateClasses[s] {
			return fmt.Errorf("state_class %v is not measurement, total or total_increasing", sc)
		}
	}
	if ec, ok := c.Payload["entity_category"]; ok {
		if s, _ := ec.(string); !entityCategories[s] {
			return fmt.Errorf("entity_category %v is not config or diagnostic", ec)
		}
	}
	if q, ok := c.Payload["qos"]; ok {
		if f, _ := q.(float64); f != 0 && f != 1 && f != 2 {
			return fmt.Errorf("qos %v is not 0, 1 or 2", q)
		}
	}
	if c.Component == "binary_sensor" {
		on, off := c.String("payload_on"), c.String("payload_off")
		if (on == "") != (off == "") || on != "" && on == off {
			return fmt.Errorf("payload_on %q and payload_off %q: give both, different", on, off)
		}
	}
	return nil
}

func onlyKeys(what string, m map[string]any, allowed map[string]bool) error {
	for k := range m {
		if !allowed[k] {
			return fmt.Errorf("%s: key %q is not documented (full names only)", what, k)
		}
	}
	return nil
}
