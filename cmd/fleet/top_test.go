package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func ptr[T any](v T) *T { return &v }

// topFixture: pi-1 measured 5s ago (a Pi, throttled now), pi-2 stale from
// 10 minutes ago, pi-3 never measured.
func topFixture(t *testing.T) (*env, *remoteHub, time.Time) {
	e, rh := newRemoteEnv(t)
	threeDevices(e)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	e.now = func() time.Time { return now }
	rh.top["pi-1"] = schema.TopReport{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"},
		Device:   "pi-1", Time: now.Add(-5 * time.Second),
		Node: schema.NodeMetrics{
			Load1: 0.52, Load5: 0.4, Load15: 0.25, CPUs: 4,
			MemoryTotalBytes: 4 << 30, MemoryAvailableBytes: 3 << 30,
			StateDisk:          &schema.DiskMetrics{Path: "/var/lib/fleet", TotalBytes: 32 << 30, FreeBytes: 8 << 30},
			ImageDisk:          &schema.DiskMetrics{Path: "/var/lib/containerd", TotalBytes: 32 << 30, FreeBytes: 8 << 30},
			UptimeSeconds:      3600,
			TemperatureCelsius: ptr(48.25),
			Throttled:          "0x50005", ThrottledFlags: []string{"under-voltage-now", "throttled-now", "under-voltage-occurred", "throttled-occurred"},
		},
		Containers: []schema.ContainerMetrics{
			{Pod: "web", Container: "web", CPUUsageNanos: 2_500_000_000, CPUMillicores: ptr(int64(12)), MemoryBytes: 30 << 20, MemoryWorkingSetBytes: 23 << 20, MemoryLimitBytes: 64 << 20, PIDs: 3},
			{Pod: "db", Container: "db", CPUUsageNanos: 1, MemoryWorkingSetBytes: 512 << 10},
		},
	}
	rh.top["pi-2"] = schema.TopReport{
		Device: "pi-2", Time: now.Add(-10 * time.Minute), Stale: true,
		Node:       schema.NodeMetrics{Load1: 1.5, MemoryTotalBytes: 1 << 30, MemoryAvailableBytes: 1 << 29},
		Containers: []schema.ContainerMetrics{{Pod: "web", Container: "web", CPUMillicores: ptr(int64(250)), MemoryWorkingSetBytes: 100 << 20}},
	}
	return e, rh, now
}

func TestTopDevices(t *testing.T) {
	e, _, _ := topFixture(t)
	r := e.run("", "top", "devices")
	want := `NAME   CPU(load1)   MEMORY%   DISK-FREE   TEMP     THROTTLED   AGE
pi-1   0.52         25%       8Gi (25%)  48.2°C   yes         5s
pi-2   1.50         50%       <none>      <none>   <none>      10m (stale)
`
	if r.code != 0 || !sameColumns(r.stdout, want) {
		t.Errorf("top devices:\n%s\nwant\n%s", r.stdout, want)
	}
	if !strings.Contains(r.stderr, "(stale): the device did not answer") {
		t.Errorf("stale note missing: %q", r.stderr)
	}
	r = e.run("", "top", "devices", "-l", "site=lab", "-o", "wide")
	if r.code != 0 || !strings.Contains(r.stdout, "LOAD5") || !strings.Contains(r.stdout, "under-voltage-now,throttled-now") || !strings.Contains(r.stdout, "3Gi/4Gi") || !strings.Contains(r.stdout, "60m") {
		t.Errorf("wide:\n%+v", r)
	}
	r = e.run("", "top", "device", "pi-1", "-o", "json")
	var l schema.TopReportList
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || r.code != 0 || l.Kind != "schema.TopReportList" || len(l.Items) != 1 || l.Items[0].Node.Load1 != 0.52 {
		t.Errorf("json: %+v (%v)", r, err)
	}
	r = e.run("", "top", "devices", "pi-3")
	if r.code != 1 || !strings.Contains(r.stderr, "never been measured") {
		t.Errorf("never measured: %+v", r)
	}
	if r := e.run("", "top", "devices", "-o", "name"); r.code != 1 {
		t.Errorf("-o name: %+v", r)
	}
}

func TestTopPods(t *testing.T) {
	e, _, _ := topFixture(t)
	r := e.run("", "top", "pods")
	want := `DEVICE   POD   CONTAINER   CPU(cores)   MEMORY(bytes)   LIMIT    AGE
pi-1     web   web         12m          23Mi            64Mi     5s
pi-1     db    db          <unknown>    512Ki           <none>   5s
pi-2     web   web         250m         100Mi           <none>   10m (stale)
`
	if r.code != 0 || !sameColumns(r.stdout, want) {
		t.Errorf("top pods:\n%s\nwant\n%s", r.stdout, want)
	}
	r = e.run("", "top", "pods", "pi-1/web", "-o", "wide", "--no-headers")
	if r.code != 0 || !sameColumns(r.stdout, "pi-1 web web 12m 23Mi 64Mi 5s 30Mi 2.5s 3\n") {
		t.Errorf("one pod, wide:\n%s", r.stdout)
	}
	if r := e.run("", "top", "pods", "pi-1/nope"); r.code != 0 || !strings.Contains(r.stderr, "No figures found") {
		t.Errorf("no such pod: %+v", r)
	}
}

// sameColumns compares tables cell by cell, whatever the padding.
func sameColumns(got, want string) bool {
	g, w := strings.Split(strings.TrimSpace(got), "\n"), strings.Split(strings.TrimSpace(want), "\n")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if strings.Join(strings.Fields(g[i]), " ") != strings.Join(strings.Fields(w[i]), " ") {
			return false
		}
	}
	return true
}

func TestDescribePodWithCrashReport(t *testing.T) {
	e, rh, now := topFixture(t)
	started := now.Add(-30 * time.Second)
	if err := e.hub.SetDeviceStatus("pi-1", &schema.DeviceObservedInfo{Online: true, LastSeen: ptr(now.Add(-3 * time.Second)), Pods: []schema.PodStatus{{
		Name: "web", Phase: "Running", Restarts: 4,
		Containers: []schema.ContainerStatus{{Name: "web", Image: "nginx:1.25", State: schema.ContainerRunning, StartedAt: &started, Restarts: 4, Ready: ptr(true)}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.hub.SetDeviceEvents("pi-1", []schema.Event{
		{Device: "pi-1", Time: now.Add(-2 * time.Minute), Type: schema.EventWarning, Reason: "BackOff", Pod: "web", Container: "web", Message: "back-off 10s restarting failed container", ExitCode: ptr(int32(1))},
		{Device: "pi-1", Time: now.Add(-time.Minute), Type: schema.EventNormal, Reason: "Pulled", Pod: "other", Message: "not about web"},
	}); err != nil {
		t.Fatal(err)
	}
	rh.crashes["pi-1"] = []schema.CrashReport{
		{Device: "pi-1", Pod: "web", Container: "web", Time: now.Add(-2 * time.Minute), Reason: "BackOff", ExitCode: ptr(int32(1)), LogTail: "starting\npanic: config missing\n"},
		{Device: "pi-1", Pod: "web", Container: "web", Time: now.Add(-time.Hour), Reason: "Exited", ExitCode: ptr(int32(2)), LogTail: "older crash\n"},
		{Device: "pi-1", Pod: "other", Container: "x", Time: now, LogTail: "not about web\n"},
	}
	out := e.ok("", "describe", "pod", "pi-1/web")
	for _, w := range []string{
		"Name:        web",
		"Device:      pi-1 (online, last seen 3s ago)",
		"Deployment:  web",
		"Phase:       Running",
		"Restarts:    4",
		"    Image:       nginx:1.25",
		"    State:       running",
		"    Last crash:  exited 1 (BackOff) at ",
		"(2m ago)\n      starting\n      panic: config missing\nEvents:\n",
		"BackOff",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in\n%s", w, out)
		}
	}
	if strings.Contains(out, "older crash") || strings.Contains(out, "not about web") {
		t.Errorf("an older crash or another pod's report or event shown:\n%s", out)
	}
	// A pod the device never reported, of a deployment that does not
	// target it, is not found.
	if r := e.run("", "describe", "pod", "pi-3/nope"); r.code != 1 || !strings.Contains(r.stderr, `pod "nope" not found on device "pi-3"`) {
		t.Errorf("missing pod: %+v", r)
	}
	if r := e.run("", "describe", "pod"); r.code != 1 || !strings.Contains(r.stderr, "DEVICE/POD") {
		t.Errorf("no pod named: %+v", r)
	}

	// describe device gains a Resources block from the last top report,
	// before its events.
	out = e.ok("", "describe", "device", "pi-1")
	res := out[strings.Index(out, "Resources:"):]
	if !strings.Contains(out, "Resources:\n  Measured:     5s ago\n") || !strings.Contains(res, "Temperature:  48.2°C") || !strings.Contains(res, "State Disk:   8Gi free of 32Gi (/var/lib/fleet)") ||
		!strings.Contains(res, "web  ") || strings.Index(out, "Resources:") > strings.Index(out, "\nEvents:") {
		t.Errorf("describe device with figures:\n%s", out)
	}
	// A device never measured is described without them.
	if out := e.ok("", "describe", "device", "pi-3"); strings.Contains(out, "Resources:") {
		t.Errorf("pi-3 has no figures:\n%s", out)
	}
}
