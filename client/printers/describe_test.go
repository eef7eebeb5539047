package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func TestDescribeDeployment(t *testing.T) {
	d := deployment("web", &schema.DeploymentStatus{ObservedGeneration: 3, Targeted: 2, Updated: 2, Ready: 1, Pending: 1})
	c := &d.Spec.Template.Spec.Containers[0]
	c.Command = []string{"/bin/sh", "-c", "echo hi"}
	c.Env = []schema.EnvVar{{Name: "MODE", Value: "prod"}}
	c.Mounts = []schema.Mount{{HostPath: "/var/lib/web", MountPath: "/data", ReadOnly: true}}
	c.Resources.Limits = schema.ResourceList{Memory: "64Mi", CPU: "500m"}
	shed := device("pi-shed", &schema.DeviceObservedInfo{Online: false, LastSeen: ago(90 * time.Second), Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true,
		Containers: []schema.ContainerStatus{{Name: "web", State: schema.ContainerRunning}}}}})
	devs := []schema.Device{*seenDevice(), *device("pi-new", nil), *shed}
	var b bytes.Buffer
	if err := DescribeDeployment(&b, d, devs, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Name:", "web",
		"Selector:", "app=web,site=lab",
		"Strategy:", "RollingUpdate (max unavailable 1)",
		"Image:", "nginx:1.25", "busybox",
		`Command:            /bin/sh -c "echo hi"`,
		"MODE:  prod",
		"/data from /var/lib/web (ro)",
		"memory:  64Mi", "cpu:     500m",
		"2 targeted, 2 updated, 1 ready, 1 pending, 0 failed",
		"pi-kitchen   true     Running", "pi-new       false    <not reported>",
		"pi-shed      false    Unknown          false   0          device offline; last report 90s ago: Running, 1/1 ready\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestDescribeSelectorExpressions: a selector with matchExpressions is
// shown in kubectl's -l form, in describe and in the wide table.
func TestDescribeSelectorExpressions(t *testing.T) {
	d := deployment("web", nil)
	d.Spec.Selector.MatchExpressions = []schema.LabelSelectorRequirement{
		{Key: "tier", Operator: schema.LabelSelectorOpIn, Values: []string{"edge", "core"}},
		{Key: "gpu", Operator: schema.LabelSelectorOpDoesNotExist},
	}
	want := "app=web,site=lab,tier in (edge,core),!gpu"
	var b bytes.Buffer
	if err := DescribeDeployment(&b, d, nil, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Selector:          "+want+"\n") {
		t.Errorf("describe: missing the selector %q in\n%s", want, b.String())
	}
	if row := Row(d, true, now); row[7] != want {
		t.Errorf("wide SELECTOR = %q, want %q", row[7], want)
	}
	d.Spec.Selector = schema.LabelSelector{}
	b.Reset()
	if err := DescribeDeployment(&b, d, nil, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "<none> (every device)") {
		t.Errorf("describe of an empty selector:\n%s", b.String())
	}
}

func TestDescribeDevice(t *testing.T) {
	dev := seenDevice()
	dev.Status.Pods[0].Containers = []schema.ContainerStatus{{Name: "web", Image: "nginx:1.25", State: schema.ContainerExited, ExitCode: 137, Reason: "OOMKilled"}}
	dev.Status.Node = &schema.NodeInfo{Hostname: "kitchen", MemoryTotalBytes: 1 << 30, MemoryAvailBytes: 512 << 20}
	web, other := deployment("web", nil), deployment("other", nil)
	web.Spec.Selector.MatchLabels = map[string]string{"site": "lab"}
	deps := []schema.Deployment{*web, *other}
	var b bytes.Buffer
	evTime := now.Add(-90 * time.Second)
	events := []schema.Event{
		{Time: evTime, Type: schema.EventNormal, Reason: "Pulled", Pod: "web", Container: "web", Message: "image nginx:1.25 is present"},
		{Time: evTime, Type: schema.EventWarning, Reason: "BackOff", Pod: "web", Message: "back-off 20s\nrestarting"},
		{Time: evTime, Type: schema.EventWarning, Reason: "RuntimeUnavailable", Message: "containerd is not running"},
	}
	if err := DescribeDevice(&b, dev, deps, events, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Online:", "true", "observed 4, desired 4", "v0.3.1 (linux/arm64)",
		"Memory:", "512.0MiB available of 1.0GiB",
		"Deployments:   web\n",
		"web:", "Phase:", "Running", "exited (exit code 137): OOMKilled",
		"mqtt:", "Pending",
		"Events:\n  TYPE      REASON               AGE   FROM      MESSAGE\n",
		"  Normal    Pulled               90s   web/web   image nginx:1.25 is present\n",
		"  Warning   BackOff              90s   web       back-off 20s restarting\n",
		"  Warning   RuntimeUnavailable   90s   agent     containerd is not running\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	b.Reset()
	DescribeDevice(&b, device("pi-new", nil), nil, []schema.Event{}, now)
	if !strings.Contains(b.String(), "<never>") || !strings.Contains(b.String(), "Pods:         <none>") || !strings.HasSuffix(b.String(), "\nEvents:  <none>\n") {
		t.Errorf("never-seen device:\n%s", b.String())
	}
}
