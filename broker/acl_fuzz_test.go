package broker

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// FuzzAllowed: the policy never grants an identity a topic outside its
// role's own. A device reads only its own desired and requests topics and
// writes only its own status, online, events and responses topics, never
// another device's; a bootstrap client only its own enrollment topics; a
// monitor writes nothing and reads no desired, requests or enrollment
// topic, whatever it substitutes for the wildcards of an allowed filter.
func FuzzAllowed(f *testing.F) {
	const req = "req_0123456789abcdef"
	for _, s := range []struct {
		role            uint8
		name, request   string
		topic           string
		write, altTopic bool
	}{
		{1, "pi", "", "fleet/v1/devices/pi/desired", false, false},
		{1, "pi", "", "fleet/v1/devices/pi/status", true, false},
		{1, "pi", "", "fleet/v1/devices/pi2/desired", false, false},
		{1, "pi", "", "fleet/v1/devices/+/desired", false, false},
		{1, "pi/x", "", "fleet/v1/devices/pi/x/desired", false, false},
		{1, "pi", "", "acme/fleet/devices/pi/responses", true, true},
		{2, "mon", "", "fleet/v1/devices/+/status", false, false},
		{2, "mon", "", "fleet/v1/devices/#", false, false},
		{2, "mon", "", "fleet/v1/deployments/+/status", false, true},
		{2, "mon", "", "fleet/v1/+/+/status", false, false},
		{3, "hub", "", "fleet/v1/devices/pi/desired", true, false},
		{4, "bootstrap.abcdef", req, "fleet/v1/enroll/" + req + "/request", true, false},
		{4, "bootstrap.abcdef", req, "fleet/v1/enroll/" + req + "/response", false, false},
		{4, "bootstrap.abcdef", "req_+", "fleet/v1/enroll/req_+/response", false, false},
		{0, "x", "", "fleet/v1/devices/x/status", true, false},
	} {
		f.Add(s.role, s.name, s.request, s.topic, s.write, s.altTopic)
	}
	f.Fuzz(func(t *testing.T, role uint8, name, request, topic string, write, altPrefix bool) {
		topics := schema.Topics{}
		if altPrefix {
			topics.Prefix = "acme/fleet"
		}
		id := Identity{Name: name, Role: Role(role % 6), Request: request}
		if !Allowed(topics, id, topic, write) {
			return
		}
		switch id.Role {
		case RoleHub:
			return
		case RoleDevice:
			d, kind, err := topics.ParseDevice(topic)
			if err != nil || d != id.Name {
				t.Fatalf("device %q may %s %q, not one of its own topics (%q, %v)", id.Name, verb(write), topic, d, err)
			}
			own := []string{schema.TopicDesired, schema.TopicRequests}
			if write {
				own = []string{schema.TopicStatus, schema.TopicOnline, schema.TopicEvents, schema.TopicResponses}
			}
			if !contains(own, kind) {
				t.Fatalf("device %q may %s its own %s topic", id.Name, verb(write), kind)
			}
		case RoleBootstrap:
			r, kind, err := topics.ParseEnroll(topic)
			want := schema.TopicEnrollResponse
			if write {
				want = schema.TopicEnrollRequest
			}
			if err != nil || r != id.Request || kind != want {
				t.Fatalf("bootstrap client %q may %s %q (%q, %q, %v)", id.Request, verb(write), topic, r, kind, err)
			}
		case RoleMonitor:
			if write {
				t.Fatalf("monitor may publish to %q", topic)
			}
			// Every topic the filter matches, with the identity's name
			// (or "x") for each wildcard.
			level := "x"
			if name != "" && !strings.ContainsAny(name, "/+#") {
				level = name
			}
			for _, last := range []string{schema.TopicDesired, schema.TopicRequests, schema.TopicStatus, "x/y"} {
				levels := strings.Split(topic, "/")
				for i, l := range levels {
					switch l {
					case "+":
						levels[i] = level
					case "#":
						levels[i] = last
					}
				}
				concrete := strings.Join(levels, "/")
				if _, kind, err := topics.ParseDevice(concrete); err == nil && kind != schema.TopicStatus && kind != schema.TopicOnline && kind != schema.TopicEvents {
					t.Fatalf("monitor may subscribe to %q, which matches %q", topic, concrete)
				}
				if _, _, err := topics.ParseEnroll(concrete); err == nil {
					t.Fatalf("monitor may subscribe to %q, which matches %q", topic, concrete)
				}
			}
		default:
			t.Fatalf("role %v is allowed %q", id.Role, topic)
		}
	})
}

// FuzzMatchTopic: matchTopic agrees with a plain reading of MQTT 3.1.1
// section 4.7, and a filter that covers another matches every topic the
// other matches.
func FuzzMatchTopic(f *testing.F) {
	for _, s := range [][2]string{
		{"a/b", "a/b"}, {"a/+", "a/b"}, {"a/#", "a"}, {"#", "a/b/c"}, {"+", "$SYS"}, {"#", "$SYS/x"},
		{"$SYS/#", "$SYS/x"}, {"a/+/c", "a//c"}, {"+/+", "/"}, {"a/b/#", "a/b"}, {"a/b", "a/b/"},
		{"fleet/v1/devices/+/status", "fleet/v1/devices/pi/status"},
	} {
		f.Add(s[0], s[1])
	}
	// Patterns as Allowed uses them: literal prefix levels first (covers
	// need not know that a leading wildcard skips "$" topics).
	patterns := append(MonitorFilters(schema.Topics{}), "fleet/v1/devices/pi/desired", "fleet/+/+")
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if !validFilter(filter) || !validTopicName(topic) {
			return
		}
		got, want := matchTopic(filter, topic), referenceMatch(filter, topic)
		if got != want {
			t.Fatalf("matchTopic(%q, %q) = %v, want %v", filter, topic, got, want)
		}
		if !got {
			return
		}
		for _, p := range patterns {
			if covers(p, filter) && !matchTopic(p, topic) {
				t.Fatalf("%q covers %q, which matches %q, but %q does not", p, filter, topic, p)
			}
		}
	})
}

// referenceMatch is MQTT topic matching written from the specification,
// level by level.
func referenceMatch(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	fl, tl := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, l := range fl {
		if l == "#" {
			return true // the parent level and any below
		}
		if i >= len(tl) || (l != "+" && l != tl[i]) {
			return false
		}
	}
	return len(fl) == len(tl)
}

// FuzzMosquittoACLFile: whatever the account names, the rendered ACL file
// is either refused or made only of the lines Fleet writes, each naming
// the account it is for: a name cannot add a rule of its own (a newline,
// a space, a wildcard).
func FuzzMosquittoACLFile(f *testing.F) {
	for _, s := range []struct {
		name string
		role uint8
	}{{"mon", 2}, {"hub", 3}, {"pi", 1}, {"bootstrap.abcdef", 4}, {"mon\ntopic readwrite #", 2}, {"a b", 3}, {"%u", 2}, {"m+", 2}} {
		f.Add(s.name, s.role, "fleet/v1")
	}
	f.Fuzz(func(t *testing.T, name string, role uint8, prefix string) {
		if prefix != "fleet/v1" && prefix != "acme/fleet" {
			prefix = "fleet/v1"
		}
		topics := schema.Topics{Prefix: prefix}
		b, err := MosquittoACLFile(topics, []Identity{{Name: name, Role: Role(role % 6)}})
		if err != nil {
			return
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		user := ""
		for sc.Scan() {
			line := sc.Text()
			fields := strings.Fields(line)
			switch {
			case line == "" || strings.HasPrefix(line, "# "):
			case len(fields) == 2 && fields[0] == "user":
				if fields[1] != name || line != "user "+name {
					t.Fatalf("user line %q for account %q", line, name)
				}
				user = name
			case len(fields) == 3 && fields[0] == "pattern" && user == "":
			case len(fields) == 3 && fields[0] == "topic" && user != "":
				// Mosquitto substitutes %u and %c in pattern lines only.
				if (fields[1] == "deny") != (fields[2] == topics.Device(name, "#")) {
					t.Fatalf("topic line %q for account %q", line, name)
				}
			default:
				t.Fatalf("unexpected ACL line %q for account %q:\n%s", line, name, b)
			}
		}
	})
}

func verb(write bool) string {
	if write {
		return "publish to"
	}
	return "read"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
