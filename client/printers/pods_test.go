package printers

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fleetmq/fleet/schema"
)

// podDevices: a healthy device with two pods, one in a crash loop and one
// waiting for its image; a device that went offline; one never seen.
func podDevices() []*schema.Device {
	running := func(name, image string, since time.Duration) schema.ContainerStatus {
		return schema.ContainerStatus{Name: name, Image: image, State: schema.ContainerRunning, StartedAt: ago(since)}
	}
	return []*schema.Device{
		device("pi-kitchen", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(5 * time.Second), Pods: []schema.PodStatus{
			{Name: "web", Phase: schema.PhaseRunning, Ready: true, Containers: []schema.ContainerStatus{
				running("web", "nginx:1.25", 2*time.Hour), running("log", "busybox", 90*time.Minute),
			}},
			{Name: "mqtt", Phase: schema.PhaseRunning, Restarts: 4, Message: `container "mqtt": back-off 2m40s restarting failed container`,
				Containers: []schema.ContainerStatus{{Name: "mqtt", Image: "eclipse-mosquitto:2", State: schema.ContainerWaiting, Reason: "CrashLoopBackOff", ExitCode: 1, StartedAt: ago(3 * time.Minute)}}},
			{Name: "cam", Phase: schema.PhasePending, Message: `container "cam": pull failed`,
				Containers: []schema.ContainerStatus{{Name: "cam", Image: "cam:bad", State: schema.ContainerWaiting, Reason: "ImagePullBackOff"}}},
		}}),
		device("pi-shed", &schema.DeviceObservedInfo{Online: false, LastSeen: ago(time.Hour), Pods: []schema.PodStatus{
			{Name: "web", Phase: schema.PhaseRunning, Ready: true, Containers: []schema.ContainerStatus{running("web", "nginx:1.25", 26*time.Hour)}},
		}}),
		device("pi-new", nil),
	}
}

func allPods(names ...string) []DevicePod {
	var out []DevicePod
	for _, d := range podDevices() {
		out = append(out, PodsOf(d, names)...)
	}
	return out
}

func TestPodTables(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		pods   []DevicePod
		want   string
	}{
		{"table", Table, allPods(), `
DEVICE       POD    READY   STATUS             RESTARTS   AGE
pi-kitchen   cam    0/1     ImagePullBackOff   0          <unknown>
pi-kitchen   mqtt   0/1     CrashLoopBackOff   4          3m
pi-kitchen   web    2/2     Running            0          120m
pi-shed      web    0/1     Unknown            0          26h
`},
		{"wide, one pod name", Wide, allPods("web"), `
DEVICE       POD   READY   STATUS    RESTARTS   AGE    IMAGES               FAILED REVISION   MESSAGE
pi-kitchen   web   2/2     Running   0          120m   nginx:1.25,busybox   <none>            <none>
pi-shed      web   0/1     Unknown   0          26h    nginx:1.25           <none>            device offline; last report 60m ago: Running, 1/1 ready
`},
		{"names", Name, allPods("web", "mqtt"), `
pod/pi-kitchen/mqtt
pod/pi-kitchen/web
pod/pi-shed/web
`},
		{"no pods: nothing", Table, nil, "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: tt.format, Now: func() time.Time { return now }}
			if err := p.PrintPods(tt.pods); err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tt.want, "\n"); b.String() != want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
			}
		})
	}
}

func TestPodStatusText(t *testing.T) {
	for _, tt := range []struct {
		pod  DevicePod
		want string
	}{
		{DevicePod{Reachable: true, PodStatus: schema.PodStatus{Phase: schema.PhaseSucceeded, Containers: []schema.ContainerStatus{{State: schema.ContainerExited, Reason: "Completed"}}}}, "Completed"},
		{DevicePod{Reachable: true, PodStatus: schema.PodStatus{Phase: schema.PhaseFailed, Containers: []schema.ContainerStatus{{State: schema.ContainerExited, Reason: "Error", ExitCode: 2}}}}, "Error"},
		{DevicePod{Reachable: true, PodStatus: schema.PodStatus{Phase: schema.PhasePending, Containers: []schema.ContainerStatus{{State: schema.ContainerWaiting, Reason: "ContainerCreating"}}}}, "ContainerCreating"},
		{DevicePod{Reachable: true, PodStatus: schema.PodStatus{Phase: schema.PhasePending}}, "Pending"},
		{DevicePod{Reachable: true}, "Unknown"},
		{DevicePod{Reachable: false, PodStatus: schema.PodStatus{Phase: schema.PhaseRunning}}, "Unknown"},
		{DevicePod{Reachable: true, Deleted: true, PodStatus: schema.PodStatus{Phase: schema.PhaseRunning}}, "Deleted"},
	} {
		if got := PodStatusText(tt.pod); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.pod, got, tt.want)
		}
	}
	stale := device("pi", &schema.DeviceObservedInfo{Online: true, Stale: true, Pods: []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning}}})
	if p := PodsOf(stale, nil); len(p) != 1 || p[0].Reachable {
		t.Errorf("a stale device's pod counts as reachable: %+v", p)
	}
}

func TestPodListJSONAndYAML(t *testing.T) {
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			var b bytes.Buffer
			p := &Printer{Out: &b, Format: f}
			if err := p.PrintPods(allPods("mqtt")); err != nil {
				t.Fatal(err)
			}
			raw := b.Bytes()
			if f == YAML {
				var err error
				if raw, err = yaml.YAMLToJSON(raw); err != nil {
					t.Fatal(err)
				}
			}
			var l DevicePodList
			if err := json.Unmarshal(raw, &l); err != nil {
				t.Fatalf("%v in\n%s", err, b.String())
			}
			if l.APIVersion != schema.APIVersion || l.Kind != "PodList" || len(l.Items) != 1 {
				t.Fatalf("list: %+v", l)
			}
			it := l.Items[0]
			if it.Device != "pi-kitchen" || it.Name != "mqtt" || !it.Reachable || it.Restarts != 4 || it.Containers[0].Reason != "CrashLoopBackOff" {
				t.Fatalf("item: %+v", it)
			}
		})
	}
	// No pods: an empty list, not null.
	var b bytes.Buffer
	if err := (&Printer{Out: &b, Format: JSON}).PrintPods(nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"items": []`) {
		t.Fatalf("empty list: %s", b.String())
	}
}

func TestPodWatch(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: Table, Now: func() time.Time { return now }}
	w := p.NewPodWatch(nil)
	devs := podDevices()
	if err := w.List(devs); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != 5 {
		t.Fatalf("start: %d lines, want the header and 4 pods:\n%s", n, b.String())
	}
	// The same report again, only later: nothing to print.
	b.Reset()
	if err := w.Device(devs[0], false); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("unchanged device printed:\n%s", b.String())
	}
	// The crash loop ends and the camera pod is removed: one line each.
	d := podDevices()[0]
	d.Status.Pods[1].Containers[0] = schema.ContainerStatus{Name: "mqtt", Image: "eclipse-mosquitto:2", State: schema.ContainerRunning, StartedAt: ago(time.Second)}
	d.Status.Pods = d.Status.Pods[:2]
	if err := w.Device(d, false); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"pi-kitchen   cam    0/1     Deleted            0          <unknown>\n" +
		"pi-kitchen   mqtt   1/1     Running            4          1s\n"
	if b.String() != want {
		t.Fatalf("changes:\n%s\nwant\n%s", b.String(), want)
	}
	// The device is deleted: its pods go.
	b.Reset()
	if err := w.Device(podDevices()[1], true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "pi-shed      web    1/1     Deleted") {
		t.Fatalf("deleted device:\n%s", b.String())
	}

	// A watch of nothing still starts with the header.
	b.Reset()
	if err := p.NewPodWatch([]string{"none"}).List(devs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "DEVICE") {
		t.Fatalf("empty watch: %q", b.String())
	}
}

func TestPodWatchJSON(t *testing.T) {
	var b bytes.Buffer
	p := &Printer{Out: &b, Format: JSON, Now: func() time.Time { return now }}
	w := p.NewPodWatch([]string{"web"})
	if err := w.List(podDevices()); err != nil {
		t.Fatal(err)
	}
	d := podDevices()[1]
	d.Status.Online = true
	if err := w.Device(d, false); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&b)
	var got []DevicePod
	for dec.More() {
		var pod DevicePod
		if err := dec.Decode(&pod); err != nil {
			t.Fatal(err)
		}
		got = append(got, pod)
	}
	if len(got) != 3 || got[2].Device != "pi-shed" || !got[2].Reachable {
		t.Fatalf("watch objects: %+v", got)
	}
}

// TestPodRowCountsReadyContainers: READY counts running containers that
// are ready; a running container the agent reports not ready (a failing
// readiness probe) does not count, and one from an agent that says nothing
// of readiness does.
func TestPodRowCountsReadyContainers(t *testing.T) {
	yes, no := true, false
	now := time.Now()
	p := DevicePod{Device: "pi", Reachable: true, PodStatus: schema.PodStatus{Name: "gw", Phase: schema.PhaseRunning, Containers: []schema.ContainerStatus{
		{Name: "a", State: schema.ContainerRunning, Ready: &yes},
		{Name: "b", State: schema.ContainerRunning, Ready: &no},
		{Name: "c", State: schema.ContainerRunning},
	}}}
	if got := PodRow(p, false, now)[2]; got != "2/3" {
		t.Errorf("READY = %q, want 2/3", got)
	}
	p.Reachable = false
	if got := PodRow(p, false, now)[2]; got != "0/3" {
		t.Errorf("READY of an unreachable device's pod = %q, want 0/3 (as Kubernetes counts a lost node's pods)", got)
	}
}

// TestPodRowTruthfulStatus: a pod whose device went back from a failed
// revision shows the images that run, Running and ready, and the failed
// revision in its own column; an unreachable device's pod is Unknown,
// not ready, and says how old its report is, offline or silent.
func TestPodRowTruthfulStatus(t *testing.T) {
	now := time.Now()
	started := now.Add(-10 * time.Minute)
	back := schema.PodStatus{Name: "web", Hash: "1111111111111111", Phase: schema.PhaseRunning, Ready: true, Restarts: 0,
		Message:        "revision 2222222a failed to start (container app: exit code 1, 3 times); the previous version runs again",
		Containers:     []schema.ContainerStatus{{Name: "app", Image: "app:1", State: schema.ContainerRunning, StartedAt: &started}},
		FailedRevision: &schema.FailedRevision{Hash: "2222222ab3c4d5e6", Container: "app", Image: "app:2", Reason: "CrashLoopBackOff", ExitCode: 1, Attempts: 3}}
	seen := now.Add(-42 * time.Second)
	for _, tt := range []struct {
		name string
		pod  DevicePod
		want []string
	}{
		{"went back", DevicePod{Device: "pi", Reachable: true, Presence: PresenceOnline, LastReport: &seen, PodStatus: back},
			[]string{"pi", "web", "1/1", "Running", "0", "10m", "app:1", "2222222a (CrashLoopBackOff)", back.Message}},
		{"offline", DevicePod{Device: "pi", Presence: PresenceOffline, LastReport: &seen, PodStatus: back},
			[]string{"pi", "web", "0/1", "Unknown", "0", "10m", "app:1", "2222222a (CrashLoopBackOff)", "device offline; last report 42s ago: Running, 1/1 ready; " + back.Message}},
		{"silent", DevicePod{Device: "pi", Presence: PresenceStale, LastReport: &seen, PodStatus: schema.PodStatus{Name: "web", Phase: schema.PhaseRunning, Ready: true,
			Containers: []schema.ContainerStatus{{Name: "app", Image: "app:1", State: schema.ContainerRunning, StartedAt: &started}}}},
			[]string{"pi", "web", "0/1", "Unknown", "0", "10m", "app:1", "<none>", "device silent; last report 42s ago: Running, 1/1 ready"}},
	} {
		if got := PodRow(tt.pod, true, now); !slices.Equal(got, tt.want) {
			t.Errorf("%s: row\n%q\nwant\n%q", tt.name, got, tt.want)
		}
	}
	if got := PodHeaders(true); !slices.Equal(got, []string{"DEVICE", "POD", "READY", "STATUS", "RESTARTS", "AGE", "IMAGES", "FAILED REVISION", "MESSAGE"}) {
		t.Errorf("wide headers = %q", got)
	}
	d := device("pi", &schema.DeviceObservedInfo{Online: false, LastSeen: &seen, Pods: []schema.PodStatus{back}})
	if p := PodsOf(d, nil); len(p) != 1 || p[0].Presence != PresenceOffline || p[0].LastReport == nil || !p[0].LastReport.Equal(seen) {
		t.Errorf("PodsOf an offline device = %+v; want presence offline, last report %v", p, seen)
	}
}

// TestPodWatchWideUnreachable: the growing age of an unreachable device's
// last report does not print its pods again.
func TestPodWatchWideUnreachable(t *testing.T) {
	var b bytes.Buffer
	at := now
	p := &Printer{Out: &b, Format: Wide, Now: func() time.Time { return at }}
	w := p.NewPodWatch([]string{"web"})
	shed := podDevices()[1]
	if err := w.List([]*schema.Device{shed}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "device offline; last report 60m ago") {
		t.Fatalf("start:\n%s", b.String())
	}
	b.Reset()
	at = now.Add(time.Minute)
	if err := w.Device(shed, false); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("an older report printed again:\n%s", b.String())
	}
}
