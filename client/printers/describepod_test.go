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

// TestDescribePodTruthful: a pod whose device went back from a failed
// revision is described as what runs, with the failed revision apart; a
// pod of an offline device is Unknown, its phase and readiness marked as
// the last report, with its age.
func TestDescribePodTruthful(t *testing.T) {
	started := now.Add(-10 * time.Minute)
	gaveUp := now.Add(-2 * time.Minute)
	yes := true
	st := &schema.PodStatus{Name: "web", Hash: "1111111111111111", Phase: schema.PhaseRunning, Ready: true,
		Message:    "revision 2222222a failed to start (container app: exit code 1, 3 times); the previous version runs again",
		Containers: []schema.ContainerStatus{{Name: "app", Image: "app:1", State: schema.ContainerRunning, StartedAt: &started, Ready: &yes}},
		FailedRevision: &schema.FailedRevision{Hash: "2222222ab3c4d5e6", Container: "app", Image: "app:2", Reason: "CrashLoopBackOff",
			ExitCode: 1, Attempts: 3, Message: "container app: exit code 1, 3 times", Time: &gaveUp}}
	var b bytes.Buffer
	if err := DescribePod(&b, PodDescription{Name: "web", Device: seenDevice(), Desired: true, Status: st}, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Status:           Running\n",
		"Revision:         11111111\n",
		"Phase:            Running\n",
		"Ready:            true\n",
		"Failed Revision:  2222222a (the device went back to the revision above)\n" +
			"  Container:      app (app:2)\n" +
			"  Reason:         CrashLoopBackOff, exit code 1, 3 attempts\n" +
			"  Message:        container app: exit code 1, 3 times\n" +
			"  Given up:       ",
		"(2m ago)\nContainers:\n",
		"  app:\n    Image:     app:1\n    State:     running\n    Ready:     true\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}

	off := device("pi-shed", &schema.DeviceObservedInfo{Online: false, LastSeen: ago(42 * time.Second), Pods: []schema.PodStatus{*st}})
	b.Reset()
	if err := DescribePod(&b, PodDescription{Name: "web", Device: off, Desired: true, Status: st}, now); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{
		"Device:           pi-shed (offline, last seen 42s ago)\n",
		"Status:           Unknown (device offline; last report 42s ago: Running, 1/1 ready)\n",
		"Revision:         11111111 (last reported)\n",
		"Phase:            Running (last reported)\n",
		"Ready:            true (last reported)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("offline: missing %q in\n%s", want, out)
		}
	}
}

// TestDescribeDeviceFailedRevision: describe device names, under a pod,
// the revision its device went back from.
func TestDescribeDeviceFailedRevision(t *testing.T) {
	dev := device("pi", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second), Pods: []schema.PodStatus{{
		Name: "web", Hash: "1111111111111111", Phase: schema.PhaseRunning, Ready: true,
		FailedRevision: &schema.FailedRevision{Hash: "2222222ab3c4d5e6", Reason: "RunContainerError"},
	}}})
	var b bytes.Buffer
	if err := DescribeDevice(&b, dev, nil, nil, now); err != nil {
		t.Fatal(err)
	}
	if want := "Failed Revision:  2222222a (RunContainerError) (the device went back to the spec hash above)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in\n%s", want, b.String())
	}
}
