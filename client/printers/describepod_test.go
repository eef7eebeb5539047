package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestDescribePod(t *testing.T) {
	started := now.Add(-30 * time.Second)
	exit := int32(2)
	p := PodDescription{
		Name:    "web",
		Device:  seenDevice(),
		Desired: true,
		Status: &schema.PodStatus{Name: "web", Phase: schema.PhaseRunning, Restarts: 1, Message: "two\nlines", Containers: []schema.ContainerStatus{
			{Name: "web", Image: "nginx:1.25", State: schema.ContainerRunning, StartedAt: &started, Restarts: 1},
		}},
		Crashes: map[string]schema.CrashReport{
			"web":  {Container: "web", Time: now.Add(-time.Minute), Reason: "Error", ExitCode: &exit, LogTail: "boom\r\n"},
			"gone": {Container: "gone", Time: now.Add(-time.Hour), Reason: "OOMKilled"},
		},
		CrashesForbidden: false,
		Events:           []schema.Event{{Time: now.Add(-time.Minute), Type: schema.EventWarning, Reason: "BackOff", Pod: "web", Container: "web", Message: "back-off"}},
	}
	var b bytes.Buffer
	if err := DescribePod(&b, p, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Name:        web\n",
		"Deployment:  web\n",
		"Message:     two lines\n",
		"Containers:\n  web:\n    Image:       nginx:1.25\n    State:       running\n",
		"    Last crash:  exited 2 (Error) at ",
		"(60s ago)\n      boom\n  gone:\n    State:       <none> (not reported)\n    Last crash:  OOMKilled at ",
		"(60m ago)\n      <no log lines>\nEvents:\n  TYPE      REASON    AGE   FROM      MESSAGE\n  Warning   BackOff   60s   web/web   back-off\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}

	// Nothing reported, crash reports not readable, no events.
	b.Reset()
	if err := DescribePod(&b, PodDescription{Name: "web", Device: device("pi-new", nil), CrashesForbidden: true}, now); err != nil {
		t.Fatal(err)
	}
	want := "Name:           web\n" +
		"Device:         pi-new (offline, never seen)\n" +
		"Deployment:     <none> (no deployment web targets this device: the agent removes the pod)\n" +
		"Status:         <none> (the device has not reported this pod)\n" +
		"Containers:     <none>\n" +
		"Crash Reports:  <an admin credential is needed to read them>\n" +
		"Events:  <none>\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
