package schema

import (
	"strings"
	"testing"
)

// FuzzParseDevice: ParseDevice and Device are inverses. Whatever topic
// ParseDevice accepts is Device(device, kind) under the same prefix, with
// a device and kind that are single, non-empty levels without wildcards;
// and ParseDevice(Device(d, k)) is (d, k) for every such pair.
func FuzzParseDevice(f *testing.F) {
	for _, s := range [][4]string{
		{"", "fleet/v1/devices/pi/status", "pi", "status"},
		{"acme/fleet/", "acme/fleet/devices/pi-01/desired", "pi-01", "desired"},
		{"", "fleet/v1/devices/+/status", "+", "status"},
		{"", "fleet/v1/devices/pi/status/x", "pi", "status/x"},
		{"", "fleet/v1/devices//status", "", "status"},
		{"a/+", "a/+/devices/pi/#", "pi", "#"},
		{"/", "/devices/pi/events", "pi", "events"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, prefix, topic, device, kind string) {
		tp := Topics{Prefix: prefix}
		if d, k, err := tp.ParseDevice(topic); err == nil {
			if !singleLevel(d) || !singleLevel(k) {
				t.Fatalf("ParseDevice(%q) = %q, %q: not single levels", topic, d, k)
			}
			if got := tp.Device(d, k); got != topic {
				t.Fatalf("ParseDevice(%q) = %q, %q, but Device of them is %q", topic, d, k, got)
			}
		}
		if !singleLevel(device) || !singleLevel(kind) {
			return
		}
		topic = tp.Device(device, kind)
		d, k, err := tp.ParseDevice(topic)
		if err != nil || d != device || k != kind {
			t.Fatalf("ParseDevice(Device(%q, %q) = %q) = %q, %q, %v", device, kind, topic, d, k, err)
		}
		// Under another prefix the topic is not a device topic, unless
		// the prefixes name the same levels.
		other := Topics{Prefix: tp.prefix() + "x"}
		if d, k, err := other.ParseDevice(topic); err == nil {
			t.Fatalf("prefix %q parses %q under %q as %q, %q", other.Prefix, topic, tp.prefix(), d, k)
		}
	})
}

// FuzzParseEnroll: whatever topic ParseEnroll accepts is Enroll(id, kind)
// under the same prefix, with a valid request ID and a known kind; and
// ParseEnroll(Enroll(id, kind)) is (id, kind) for every valid pair.
func FuzzParseEnroll(f *testing.F) {
	const id = "req_0123456789abcdef"
	for _, s := range [][4]string{
		{"", "fleet/v1/enroll/" + id + "/request", id, TopicEnrollRequest},
		{"", "fleet/v1/enroll/" + id + "/response", id, TopicEnrollResponse},
		{"x/", "x/enroll/" + id + "/response/x", id, "status"},
		{"", "fleet/v1/enroll/+/request", "+", TopicEnrollRequest},
		{"", "fleet/v1/enroll/req_short/request", "req_short", TopicEnrollRequest},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, prefix, topic, requestID, kind string) {
		tp := Topics{Prefix: prefix}
		if id, k, err := tp.ParseEnroll(topic); err == nil {
			if ValidateRequestID(id) != nil || (k != TopicEnrollRequest && k != TopicEnrollResponse) {
				t.Fatalf("ParseEnroll(%q) = %q, %q", topic, id, k)
			}
			if got := tp.Enroll(id, k); got != topic {
				t.Fatalf("ParseEnroll(%q) = %q, %q, but Enroll of them is %q", topic, id, k, got)
			}
		}
		if ValidateRequestID(requestID) != nil || (kind != TopicEnrollRequest && kind != TopicEnrollResponse) {
			return
		}
		topic = tp.Enroll(requestID, kind)
		id, k, err := tp.ParseEnroll(topic)
		if err != nil || id != requestID || k != kind {
			t.Fatalf("ParseEnroll(Enroll(%q, %q) = %q) = %q, %q, %v", requestID, kind, topic, id, k, err)
		}
		if _, _, err := tp.ParseDevice(topic); err == nil {
			t.Fatalf("an enrollment topic %q parses as a device topic", topic)
		}
	})
}

// singleLevel reports whether s is one non-empty topic level without
// wildcards.
func singleLevel(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/+#")
}
