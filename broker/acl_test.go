package broker

import (
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestAllowed(t *testing.T) {
	var topics schema.Topics // fleet/v1
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	mon := Identity{Name: "grafana", Role: RoleMonitor}
	hub := Identity{Name: "hub", Role: RoleHub}
	const (
		read  = false
		write = true
	)
	tests := []struct {
		id    Identity
		topic string
		write bool
		want  bool
	}{
		// Device: reads exactly its own desired topic.
		{dev, "fleet/v1/devices/pi-1/desired", read, true},
		{dev, "fleet/v1/devices/pi-2/desired", read, false},
		{dev, "fleet/v1/devices/+/desired", read, false},
		{dev, "fleet/v1/devices/pi-1/+", read, false},
		{dev, "fleet/v1/devices/pi-1/#", read, false},
		{dev, "fleet/v1/devices/#", read, false},
		{dev, "#", read, false},
		{dev, "+/+/+/+/+", read, false},
		{dev, "fleet/v1/devices/pi-1/status", read, false},
		{dev, "fleet/v1/devices/pi-1/desired/x", read, false},
		{dev, "$share/g/fleet/v1/devices/pi-1/desired", read, false},
		{dev, "$SYS/#", read, false},
		{dev, "", read, false},
		// Device: reads its own requests, never another's, nor responses.
		{dev, "fleet/v1/devices/pi-1/requests", read, true},
		{dev, "fleet/v1/devices/pi-2/requests", read, false},
		{dev, "fleet/v1/devices/+/requests", read, false},
		{dev, "fleet/v1/devices/pi-1/responses", read, false},
		{dev, "fleet/v1/devices/pi-2/responses", read, false},
		{dev, "fleet/v1/devices/+/responses", read, false},
		{dev, "fleet/v1/devices/pi-1/requests", write, false},
		{dev, "fleet/v1/devices/pi-2/requests", write, false},
		// Device: answers on its own responses topic only.
		{dev, "fleet/v1/devices/pi-1/responses", write, true},
		{dev, "fleet/v1/devices/pi-2/responses", write, false},
		// Device: writes its own status, online and events.
		{dev, "fleet/v1/devices/pi-1/status", write, true},
		{dev, "fleet/v1/devices/pi-1/online", write, true},
		{dev, "fleet/v1/devices/pi-1/events", write, true},
		{dev, "fleet/v1/devices/pi-1/desired", write, false},
		{dev, "fleet/v1/devices/pi-2/status", write, false},
		// Device: writes its own crash reports, reads none (not its own,
		// not another's).
		{dev, "fleet/v1/devices/pi-1/crashreports", write, true},
		{dev, "fleet/v1/devices/pi-2/crashreports", write, false},
		{dev, "fleet/v1/devices/pi-1/crashreports", read, false},
		{dev, "fleet/v1/devices/pi-2/crashreports", read, false},
		{dev, "fleet/v1/devices/+/crashreports", read, false},
		{dev, "fleet/v1/devices/pi-1/status/x", write, false},
		{dev, "fleet/v1/deployments/web/status", write, false},
		{dev, "other/devices/pi-1/status", write, false},
		// A device identity with an invalid name gets nothing, so a name
		// such as "+" can never widen the topics above.
		{Identity{Name: "+", Role: RoleDevice}, "fleet/v1/devices/+/desired", read, false},
		{Identity{Name: "+", Role: RoleDevice}, "fleet/v1/devices/+/status", write, false},
		{Identity{Name: "a/b", Role: RoleDevice}, "fleet/v1/devices/a/b/status", write, false},
		{Identity{Name: "", Role: RoleDevice}, "fleet/v1/devices//status", write, false},
		// Monitor: reads status/online/events of any device, deployment status.
		{mon, "fleet/v1/devices/+/status", read, true},
		{mon, "fleet/v1/devices/+/online", read, true},
		{mon, "fleet/v1/devices/+/events", read, true},
		{mon, "fleet/v1/devices/pi-1/status", read, true},
		{mon, "fleet/v1/devices/pi-1/online", read, true},
		{mon, "fleet/v1/devices/pi-1/events", read, true},
		{mon, "fleet/v1/deployments/+/status", read, true},
		{mon, "fleet/v1/deployments/web/status", read, true},
		{mon, "fleet/v1/devices/pi-1/desired", read, false},
		{mon, "fleet/v1/devices/+/desired", read, false},
		{mon, "fleet/v1/devices/+/requests", read, false},
		{mon, "fleet/v1/devices/+/responses", read, false},
		{mon, "fleet/v1/devices/pi-1/responses", read, false},
		// Monitor: never a crash report (a container's log).
		{mon, "fleet/v1/devices/+/crashreports", read, false},
		{mon, "fleet/v1/devices/pi-1/crashreports", read, false},
		{mon, "fleet/v1/devices/pi-1/crashreports", write, false},
		{mon, "fleet/v1/devices/pi-1/requests", write, false},
		{mon, "fleet/v1/devices/pi-1/+", read, false},
		{mon, "fleet/v1/devices/pi-1/#", read, false},
		{mon, "fleet/v1/devices/#", read, false},
		{mon, "fleet/v1/devices/+/#", read, false},
		{mon, "fleet/v1/+/+/status", read, false},
		{mon, "fleet/v1/#", read, false},
		{mon, "#", read, false},
		{mon, "+/v1/devices/+/status", read, false},
		{mon, "fleet/v1/devices/+/status/#", read, false},
		{mon, "fleet/v1/devices/+/status/x", read, false},
		{mon, "fleet/v1/devices/+", read, false},
		{mon, "fleet/v1/deployments/+/+", read, false},
		{mon, "fleet/v1/devices/a+/status", read, false},
		{mon, "$share/g/fleet/v1/devices/+/status", read, false},
		{mon, "fleet/v1/devices/pi-1/status", write, false},
		{mon, "fleet/v1/deployments/web/status", write, false},
		// Hub: anything.
		{hub, "#", read, true},
		{hub, "fleet/v1/devices/pi-1/desired", write, true},
		{hub, "fleet/v1/devices/pi-1/status", read, true},
		{hub, "fleet/v1/devices/+/crashreports", read, true},
		// No role: nothing.
		{Identity{Name: "x"}, "fleet/v1/devices/x/status", write, false},
		{Identity{Name: "x", Role: Role(42)}, "#", read, false},
	}
	for _, tt := range tests {
		if got := Allowed(topics, tt.id, tt.topic, tt.write); got != tt.want {
			t.Errorf("Allowed(%s %q, %q, write=%v) = %v, want %v", tt.id.Role, tt.id.Name, tt.topic, tt.write, got, tt.want)
		}
	}
}

func TestAllowedCustomPrefix(t *testing.T) {
	topics := schema.Topics{Prefix: "acme/fleet/"}
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	mon := Identity{Name: "m", Role: RoleMonitor}
	for _, tt := range []struct {
		id    Identity
		topic string
		write bool
		want  bool
	}{
		{dev, "acme/fleet/devices/pi-1/desired", false, true},
		{dev, "fleet/v1/devices/pi-1/desired", false, false},
		{dev, "acme/fleet/devices/pi-1/status", true, true},
		{mon, "acme/fleet/devices/+/status", false, true},
		{mon, "acme/+/devices/+/status", false, false},
		{mon, "fleet/v1/devices/+/status", false, false},
	} {
		if got := Allowed(topics, tt.id, tt.topic, tt.write); got != tt.want {
			t.Errorf("Allowed(%s, %q, write=%v) = %v, want %v", tt.id.Role, tt.topic, tt.write, got, tt.want)
		}
	}
}

func TestAllowedHomeAssistant(t *testing.T) {
	mon := Identity{Name: "m", Role: RoleMonitor}
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	for _, tt := range []struct {
		topics schema.Topics
		id     Identity
		topic  string
		write  bool
		want   bool
	}{
		{schema.Topics{}, mon, "homeassistant/#", false, true},
		{schema.Topics{}, mon, "homeassistant/+/+/+/config", false, true},
		{schema.Topics{}, mon, "homeassistant/sensor/fleet_pi-1/restarts/config", false, true},
		{schema.Topics{}, mon, "homeassistant/sensor/fleet_pi-1/restarts/config", true, false},
		{schema.Topics{}, mon, "#", false, false},
		{schema.Topics{}, mon, "+/#", false, false},
		{schema.Topics{}, mon, "homeassistant", false, true}, // homeassistant/# matches it
		{schema.Topics{}, dev, "homeassistant/#", false, false},
		{schema.Topics{}, dev, "homeassistant/sensor/fleet_pi-1/restarts/config", true, false},
		// A Fleet prefix under homeassistant/ would open desired states.
		{schema.Topics{Prefix: "homeassistant/fleet"}, mon, "homeassistant/#", false, false},
		{schema.Topics{Prefix: "homeassistant/fleet"}, mon, "homeassistant/fleet/devices/pi-1/desired", false, false},
		{schema.Topics{Prefix: "homeassistant"}, mon, "homeassistant/devices/pi-1/desired", false, false},
		{schema.Topics{Prefix: "homeassistant"}, mon, "homeassistant/devices/pi-1/status", false, true},
	} {
		if got := Allowed(tt.topics, tt.id, tt.topic, tt.write); got != tt.want {
			t.Errorf("prefix %q: Allowed(%s, %q, write=%v) = %v, want %v", tt.topics.Prefix, tt.id.Role, tt.topic, tt.write, got, tt.want)
		}
	}
}

// TestAllowedFilterCoversMatches checks the subscribe rule against the
// delivery rule: whenever a filter is allowed, every topic it matches must be
// allowed too. Filters and topics are built from a small alphabet of levels.
func TestAllowedFilterCoversMatches(t *testing.T) {
	var topics schema.Topics
	levels := []string{"fleet", "v1", "devices", "deployments", "pi-1", "desired", "status", "events", "x", "homeassistant"}
	var names []string // concrete topics of 1 to 5 levels
	var build func(prefix string, depth int)
	build = func(prefix string, depth int) {
		if depth == 0 {
			return
		}
		for _, l := range levels {
			n := l
			if prefix != "" {
				n = prefix + "/" + l
			}
			names = append(names, n)
			build(n, depth-1)
		}
	}
	build("", 5)
	filterLevels := append([]string{"+", "#"}, levels...)
	var filters []string
	var buildF func(prefix string, depth int)
	buildF = func(prefix string, depth int) {
		if depth == 0 || len(filters) > 200000 {
			return
		}
		for _, l := range filterLevels {
			f := l
			if prefix != "" {
				f = prefix + "/" + l
			}
			if validFilter(f) {
				filters = append(filters, f)
			}
			if l != "#" {
				buildF(f, depth-1)
			}
		}
	}
	buildF("", 5)
	mon := Identity{Name: "m", Role: RoleMonitor}
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	allowedFilters := 0
	for _, id := range []Identity{mon, dev} {
		for _, f := range filters {
			if !Allowed(topics, id, f, false) {
				continue
			}
			allowedFilters++
			for _, n := range names {
				if matchTopic(f, n) && !Allowed(topics, id, n, false) {
					t.Fatalf("%s may subscribe to %q but not read %q which it matches", id.Role, f, n)
				}
			}
		}
	}
	if allowedFilters == 0 {
		t.Fatal("no filter allowed at all: test is broken")
	}
}

func TestMatchTopic(t *testing.T) {
	for _, tt := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/+/c", "a//c", true},
		{"+", "", true},
		{"a/b/c", "a/b", false},
		{"a/b", "a/b/c", false},
	} {
		if got := matchTopic(tt.filter, tt.topic); got != tt.want {
			t.Errorf("matchTopic(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
}

func TestValidFilter(t *testing.T) {
	for _, tt := range []struct {
		filter string
		want   bool
	}{
		{"a/b", true}, {"a/+/c", true}, {"a/#", true}, {"#", true}, {"+", true},
		{"", false}, {"a/#/c", false}, {"a+/b", false}, {"a/b#", false}, {"a\x00", false},
	} {
		if got := validFilter(tt.filter); got != tt.want {
			t.Errorf("validFilter(%q) = %v, want %v", tt.filter, got, tt.want)
		}
	}
}

// FuzzAllowedFilters: a subscription filter the policy allows must not
// match any topic the same identity may not read. That is what lets the
// broker check a filter once, at SUBSCRIBE, instead of every delivery.
func FuzzAllowedFilters(f *testing.F) {
	for _, s := range [][2]string{
		{"fleet/v1/devices/+/status", "fleet/v1/devices/pi/status"},
		{"fleet/v1/devices/+/+", "fleet/v1/devices/pi/desired"},
		{"fleet/v1/devices/#", "fleet/v1/devices/pi/desired"},
		{"fleet/v1/+/pi/status", "fleet/v1/enroll/pi/status"},
		{"fleet/v1/deployments/+/status", "fleet/v1/deployments/web/status"},
		{"fleet/v1/devices/pi/desired", "fleet/v1/devices/pi/desired"},
		{"+/v1/devices/pi/desired", "x/v1/devices/pi/desired"},
		{"fleet/v1/enroll/req-1/response", "fleet/v1/enroll/req-1/response"},
		{"fleet/v1/enroll/+/response", "fleet/v1/enroll/req-2/response"},
	} {
		f.Add(s[0], s[1])
	}
	topics := schema.Topics{}
	ids := []Identity{
		{Name: "mon", Role: RoleMonitor},
		{Name: "pi", Role: RoleDevice},
		{Name: "bootstrap.req-1", Role: RoleBootstrap, Request: "req-1"},
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if !validFilter(filter) || !validTopicName(topic) || !matchTopic(filter, topic) {
			return
		}
		for _, id := range ids {
			if Allowed(topics, id, filter, false) && !Allowed(topics, id, topic, false) {
				t.Fatalf("%s (%s) may subscribe to %q, which matches %q, which it may not read", id.Name, id.Role, filter, topic)
			}
		}
	})
}
