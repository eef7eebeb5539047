package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestEvents(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", deviceYAML+"---\n"+strings.ReplaceAll(deviceYAML, "pi-1", "pi-2")))
	if r := e.run("", "events"); r.code != 0 || r.stdout != "" || r.stderr != "No events found.\n" {
		t.Errorf("no events: %+v", r)
	}
	now := time.Now().UTC().Truncate(time.Second)
	e.now = func() time.Time { return now }
	t0 := now.Add(-10 * time.Minute)
	ev := func(dev string, min int, typ, reason, pod, container, msg string) schema.Event {
		return schema.Event{Device: dev, Time: t0.Add(time.Duration(min) * time.Minute), Type: typ, Reason: reason, Pod: pod, Container: container, Message: msg}
	}
	if err := e.hub.SetDeviceEvents("pi-1", []schema.Event{
		ev("pi-1", 0, schema.EventNormal, "Pulled", "web", "nginx", "image nginx:1.25 is present"),
		ev("pi-1", 5, schema.EventWarning, "BackOff", "web", "nginx", "back-off 40s restarting failed container"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.hub.SetDeviceEvents("pi-2", []schema.Event{
		ev("pi-2", 2, schema.EventWarning, "RuntimeUnavailable", "", "", "containerd: connection refused"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"events"}, "" +
			"LAST-SEEN   TYPE      REASON               OBJECT               MESSAGE\n" +
			"10m         Normal    Pulled               pod/pi-1/web/nginx   image nginx:1.25 is present\n" +
			"8m          Warning   RuntimeUnavailable   device/pi-2          containerd: connection refused\n" +
			"5m          Warning   BackOff              pod/pi-1/web/nginx   back-off 40s restarting failed container\n"},
		{[]string{"events", "--types", "Warning", "--limit", "1", "--no-headers"}, "" +
			"5m    Warning   BackOff   pod/pi-1/web/nginx   back-off 40s restarting failed container\n"},
		{[]string{"events", "--for", "device/pi-2", "-o", "wide"}, "" +
			"LAST-SEEN   TIME                   TYPE      REASON               OBJECT        MESSAGE\n" +
			"8m          " + t0.Add(2*time.Minute).Format(time.RFC3339) + "   Warning   RuntimeUnavailable   device/pi-2   containerd: connection refused\n"},
		{[]string{"events", "--types", "normal,Warning", "-l", "fleet/device=pi-1", "--no-headers"}, "" +
			"10m   Normal    Pulled    pod/pi-1/web/nginx   image nginx:1.25 is present\n" +
			"5m    Warning   BackOff   pod/pi-1/web/nginx   back-off 40s restarting failed container\n"},
	} {
		if out := e.ok("", tt.args...); out != tt.want {
			t.Errorf("fleet %s:\n%s\nwant\n%s", strings.Join(tt.args, " "), out, tt.want)
		}
	}
	var l schema.EventList
	mustJSON(t, e.ok("", "events", "-o", "json", "--types", "Normal"), &l)
	if l.Kind != "EventList" || len(l.Items) != 1 || l.Items[0].Reason != "Pulled" {
		t.Fatalf("json: %+v", l)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "--types", "Loud"}, `unknown type "Loud"`},
		{[]string{"events", "--limit", "-1"}, "--limit -1"},
		{[]string{"events", "--for", "Bad_Name"}, "device name"},
		{[]string{"events", "-o", "name"}, "events have no names"},
		{[]string{"events", "pi-1"}, "unknown command"},
		{[]string{"get", "events"}, "events are listed with fleet events"},
	} {
		r := e.run("", tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want an error with %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
}
