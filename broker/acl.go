package broker

import (
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Allowed reports whether id may read (subscribe to, or receive) or write
// (publish to) topic. It is the whole access policy of the fleet's MQTT
// layer, shared by the embedded broker and the rendered Mosquitto ACL.
//
// topic is a topic name on publish and on delivery, and a subscription filter
// (wildcards included) on subscribe: a filter is allowed only if every topic
// it can match is allowed.
//
//   - RoleHub may do anything.
//   - RoleDevice may subscribe to exactly {prefix}/devices/{self}/desired,
//     {prefix}/devices/{self}/requests and {prefix}/devices/{self}/certificate
//     (no wildcards at all) and publish only to its own status, online,
//     events, crashreports, responses and csr topics. A device whose name is not a valid device name may do
//     nothing. A renewal-only session (Identity.RenewalOnly: its client
//     certificate expired) may only publish its csr topic and read its
//     certificate topic.
//   - RoleMonitor may subscribe to {prefix}/devices/{device|+}/{status|online|events},
//     {prefix}/deployments/{name|+}/status and Home Assistant's discovery
//     topics (homeassistant/#, which the hub publishes with
//     --homeassistant-discovery; not when the Fleet prefix itself lies
//     under homeassistant/), and publishes nothing: never a device's
//     crashreports (container logs), desired state or requests.
//   - RoleBootstrap may publish only to {prefix}/enroll/{request}/request and
//     subscribe only to {prefix}/enroll/{request}/response, where request is
//     id.Request (its client ID): it can send its own enrollment request and
//     read its own answer, nothing else.
//
// Anything else, including an unknown role, is denied.
func Allowed(topics schema.Topics, id Identity, topic string, write bool) bool {
	if topic == "" {
		return false
	}
	switch id.Role {
	case RoleHub:
		return true
	case RoleDevice:
		if schema.ValidateName(id.Name) != nil {
			return false // also keeps '+', '#' and '/' out of the topics below
		}
		if id.RenewalOnly {
			if write {
				return topic == topics.Device(id.Name, schema.TopicCSR)
			}
			return topic == topics.Device(id.Name, schema.TopicCertificate)
		}
		if !write {
			return topic == topics.Device(id.Name, schema.TopicDesired) ||
				topic == topics.Device(id.Name, schema.TopicRequests) ||
				topic == topics.Device(id.Name, schema.TopicCertificate)
		}
		return topic == topics.Device(id.Name, schema.TopicStatus) ||
			topic == topics.Device(id.Name, schema.TopicOnline) ||
			topic == topics.Device(id.Name, schema.TopicEvents) ||
			topic == topics.Device(id.Name, schema.TopicCrashReports) ||
			topic == topics.Device(id.Name, schema.TopicResponses) ||
			topic == topics.Device(id.Name, schema.TopicCSR)
	case RoleBootstrap:
		if schema.ValidateRequestID(id.Request) != nil {
			return false // also keeps wildcards and '/' out of the topics
		}
		if write {
			return topic == topics.Enroll(id.Request, schema.TopicEnrollRequest)
		}
		return topic == topics.Enroll(id.Request, schema.TopicEnrollResponse)
	case RoleMonitor:
		if write {
			return false
		}
		for _, pattern := range MonitorFilters(topics) {
			if covers(pattern, topic) {
				return true
			}
		}
		return false
	default:
		return false
	}
}

// MonitorFilters returns the widest subscription filters RoleMonitor may use:
// every device's status, online and events topics, every deployment's
// status topic and Home Assistant's discovery topics.
func MonitorFilters(topics schema.Topics) []string {
	filters := []string{
		topics.DeviceFilter(schema.TopicStatus),
		topics.DeviceFilter(schema.TopicOnline),
		topics.DeviceFilter(schema.TopicEvents),
		topics.DeploymentStatus("+"),
	}
	if f, ok := HomeAssistantFilter(topics); ok {
		filters = append(filters, f)
	}
	return filters
}

// HomeAssistantPrefix is the discovery prefix under which the hub
// publishes Home Assistant MQTT discovery configs (Home Assistant's
// default).
const HomeAssistantPrefix = "homeassistant"

// HomeAssistantFilter returns the filter of every discovery topic,
// homeassistant/#, and false when the Fleet topic prefix lies under it
// (a monitor must never read desired states through it).
func HomeAssistantFilter(topics schema.Topics) (string, bool) {
	fleet := strings.TrimSuffix(topics.Device("x", "y"), "/devices/x/y")
	if fleet == HomeAssistantPrefix || strings.HasPrefix(fleet, HomeAssistantPrefix+"/") {
		return "", false
	}
	return HomeAssistantPrefix + "/#", true
}

// covers reports whether every topic matched by filter is also matched by
// pattern, where pattern contains only literal and '+' levels, or ends in
// '#' after at least one literal level. Because '+' stands for infinitely
// many values, a filter covered by a union of such patterns is always
// covered by one of them, so checking each pattern alone is exact.
func covers(pattern, filter string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, "/")
		f, frest, fmore := strings.Cut(filter, "/")
		switch {
		case p == "#":
			// Every topic the rest of the filter matches lies below
			// the levels matched so far, all of which '#' matches.
			return true
		case strings.ContainsRune(f, '#'):
			// '#' matches any depth, and patterns have a fixed depth.
			return false
		case p == "+":
			if f != "+" && strings.ContainsRune(f, '+') {
				return false // malformed filter level
			}
		case f != p:
			return false
		}
		if pmore && !fmore && prest == "#" {
			return true // "a/#" also matches "a"
		}
		if pmore != fmore {
			return false
		}
		if !pmore {
			return true
		}
		pattern, filter = prest, frest
	}
}

// matchTopic reports whether the topic name matches the subscription filter,
// following MQTT 3.1.1 section 4.7 (a leading wildcard does not match a topic
// starting with '$').
func matchTopic(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		f, frest, fmore := strings.Cut(filter, "/")
		if f == "#" {
			return true
		}
		t, trest, tmore := strings.Cut(topic, "/")
		if f != "+" && f != t {
			return false
		}
		if !fmore && !tmore {
			return true
		}
		if !tmore {
			// "a/#" also matches "a".
			return fmore && frest == "#"
		}
		if !fmore {
			return false
		}
		filter, topic = frest, trest
	}
}

// validTopicName reports whether s may be published to: non-empty, no
// wildcards, no NUL, at most 65535 bytes (MQTT 3.1.1 section 4.7.3).
func validTopicName(s string) bool {
	return s != "" && len(s) <= 65535 && !strings.ContainsAny(s, "+#\x00")
}

// validFilter reports whether s is a well-formed subscription filter.
func validFilter(s string) bool {
	if s == "" || len(s) > 65535 || strings.ContainsRune(s, 0) {
		return false
	}
	levels := strings.Split(s, "/")
	for i, l := range levels {
		switch {
		case l == "#":
			if i != len(levels)-1 {
				return false
			}
		case l == "+":
		case strings.ContainsAny(l, "+#"):
			return false
		}
	}
	return true
}
