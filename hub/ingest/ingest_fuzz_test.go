package ingest

import (
	"bytes"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// FuzzHandleTopic: whatever the topic a message arrives on, it changes
// nothing of a device unless it is exactly one of that device's own
// status, online, events or crashreports topics: a device (which the broker lets
// publish only on its own topics, and the hub trusts the topic, not the
// payload) can never report for another. pi2 stands for the other
// device; messages on its own topics are not sent.
func FuzzHandleTopic(f *testing.F) {
	for _, s := range [][2]string{
		{topicPrefix + "pi/status", statusJSON("pi2", 3, "arm64")},
		{topicPrefix + "pi/online", "online"},
		{topicPrefix + "pi/events", `{"device":"pi2","type":"Warning","reason":"BackOff","pod":"web","time":"2024-01-01T00:00:00Z"}`},
		{topicPrefix + "pi/crashreports", `{"device":"pi2","pod":"web","container":"app","time":"2024-01-01T00:00:00Z","reason":"Exited","logTail":"boom\n"}`},
		{topicPrefix + "pi2/status/x", statusJSON("pi2", 3, "arm64")},
		{topicPrefix + "pi2//status", "online"},
		{topicPrefix + "+/online", "online"},
		{topicPrefix + "pi2/desired", "online"},
		{"fleet/v1/devices/pi2", "online"},
		{"fleet/v2/devices/pi2/online", "online"},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	fx := newFixture(f, "pi", "pi2")
	before := fx.fm.DeviceInfoJSON("pi2", "")
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		if d, _, err := (schema.Topics{}).ParseDevice(topic); err == nil && d == "pi2" {
			return
		}
		fx.in.Handle(topic, payload)
		if after := fx.fm.DeviceInfoJSON("pi2", ""); !bytes.Equal(after, before) {
			t.Fatalf("a message on %q changed pi2:\n%s\n%s", topic, before, after)
		}
		if st, _ := fx.fm.DeviceState("pi2", ""); st != nil {
			t.Fatalf("a message on %q gave pi2 a report", topic)
		}
		if evs := fx.fm.Events("pi2", ""); len(evs) != 0 {
			t.Fatalf("a message on %q gave pi2 events: %+v", topic, evs)
		}
		if crs := fx.fm.CrashReports("pi2", ""); len(crs) != 0 {
			t.Fatalf("a message on %q gave pi2 crash reports: %+v", topic, crs)
		}
	})
}
