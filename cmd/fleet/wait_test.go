package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client/fakehubtest"
	"github.com/fleetmq/fleet/schema"
)

// labDevices are pi-1 and pi-2 at site lab, pi-3 in the hall.
var labDevices = deviceYAML + "---\n" + strings.ReplaceAll(deviceYAML, "pi-1", "pi-2") + "---\n" +
	strings.ReplaceAll(strings.ReplaceAll(deviceYAML, "pi-1", "pi-3"), "site: lab", "site: hall")

func setDevice(t *testing.T, e *env, name string, st *schema.DeviceObservedInfo) {
	t.Helper()
	if err := e.hub.SetDeviceStatus(name, st); err != nil {
		t.Fatal(err)
	}
}

// exitWithin returns the exit code of a background run, failing the test if
// it does not end in time.
func exitWithin(t *testing.T, done <-chan int, out *syncBuffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting after 10s:\n%s", out)
		return -1
	}
}

// stillRunning fails the test if a background run has ended.
func stillRunning(t *testing.T, done <-chan int, out *syncBuffer) {
	t.Helper()
	select {
	case code := <-done:
		t.Fatalf("exited %d before every condition was met:\n%s", code, out)
	default:
	}
}

// watching waits until n watches of kind have been opened.
func watching(t *testing.T, count func() int, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches opened within 10s, want %d", count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) watches(kind string) func() int {
	return func() int {
		n := 0
		for _, r := range e.hub.Requests() {
			if strings.HasPrefix(r, "GET /v1/"+kind+"?") && strings.Contains(r, "watch=true") {
				n++
			}
		}
		return n
	}
}

// TestWaitConditions checks each condition once (--timeout=0): met, or not
// met and why.
func TestWaitConditions(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	ago := func(d time.Duration) *time.Time { ts := time.Now().Add(-d); return &ts }
	crashing := []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Containers: []schema.ContainerStatus{
		{Name: "web", State: "waiting", Reason: "CrashLoopBackOff"},
	}}}
	ready := []schema.PodStatus{{Name: "web", Phase: schema.PhaseRunning, Ready: true}}
	for _, tc := range []struct {
		name   string
		device *schema.DeviceObservedInfo
		dep    *schema.DeploymentStatus
		args   []string
		want   string // stdout when met, else the error
	}{
		{"online: never reported", nil, nil, []string{"device/pi-1", "--for=condition=Online"},
			"error: condition=Online is not met on device/pi-1: its agent has never reported"},
		{"online: offline", &schema.DeviceObservedInfo{LastSeen: ago(20 * time.Minute)}, nil, []string{"device/pi-1", "--for=condition=Online"},
			"error: condition=Online is not met on device/pi-1: offline, last seen 20m ago"},
		{"online: stale", &schema.DeviceObservedInfo{Online: true, Stale: true, LastSeen: ago(30 * time.Minute)}, nil, []string{"device/pi-1", "--for=condition=Online"},
			"error: condition=Online is not met on device/pi-1: stale: nothing heard from it, last seen 30m ago"},
		{"online", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second)}, nil, []string{"device", "pi-1", "--for", "condition=online"},
			"device/pi-1 condition met"},
		{"online=false while online", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second)}, nil, []string{"dev/pi-1", "--for=condition=Online=false"},
			"error: condition=Online=false is not met on device/pi-1: Online is still true"},
		{"online=false", &schema.DeviceObservedInfo{LastSeen: ago(time.Hour)}, nil, []string{"dev/pi-1", "--for=condition=Online=False"},
			"device/pi-1 condition met"},
		{"converged: an older generation", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second), DesiredGeneration: 2, ObservedGeneration: 1, Pods: ready},
			nil, []string{"device/pi-1", "--for=condition=Converged"},
			"error: condition=Converged is not met on device/pi-1: has applied generation 1 of 2"},
		{"converged: a pod not ready, offline", &schema.DeviceObservedInfo{LastSeen: ago(15 * time.Minute), DesiredGeneration: 2, ObservedGeneration: 2, Pods: crashing},
			nil, []string{"device/pi-1", "--for=condition=Converged"},
			"error: condition=Converged is not met on device/pi-1: pods not ready: web (Unknown) (offline, last seen 15m ago)"},
		{"converged: a pod not ready", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second), DesiredGeneration: 2, ObservedGeneration: 2, Pods: crashing},
			nil, []string{"device/pi-1", "--for=condition=Converged"},
			"error: condition=Converged is not met on device/pi-1: pods not ready: web (CrashLoopBackOff)"},
		{"converged", &schema.DeviceObservedInfo{Online: true, LastSeen: ago(time.Second), DesiredGeneration: 2, ObservedGeneration: 2, Converged: true, Pods: ready},
			nil, []string{"device/pi-1", "--for=condition=Converged"}, "device/pi-1 condition met"},
		{"available: not observed", nil, nil, []string{"deployment/web", "--for=condition=Available"},
			"error: condition=Available is not met on deployment/web: the hub has not yet observed generation 1"},
		{"complete: partly", nil, &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 1, Ready: 1, Pending: 1},
			[]string{"deploy/web", "--for=condition=Complete"},
			"error: condition=Complete is not met on deployment/web: 1 of 2 devices ready, 1 pending (fleet get devices -l site=lab shows which)"},
		{"available", nil, &schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 2, Ready: 2},
			[]string{"deployment/web", "--for=condition=available"}, "deployment/web condition met"},
		{"jsonpath: a bool", &schema.DeviceObservedInfo{Online: true}, nil, []string{"device/pi-1", "--for=jsonpath={.status.online}=true"},
			"device/pi-1 condition met"},
		{"jsonpath: another value", &schema.DeviceObservedInfo{}, nil, []string{"device/pi-1", "--for=jsonpath={.status.online}=true"},
			"error: jsonpath={.status.online}=true is not met on device/pi-1: .status.online is false"},
		{"jsonpath: a list index and no braces", &schema.DeviceObservedInfo{Pods: ready}, nil, []string{"device/pi-1", "--for=jsonpath=.status.pods[0].name=web"},
			"device/pi-1 condition met"},
		{"jsonpath: a label, set", nil, nil, []string{"deployment/web", "--for=jsonpath={.metadata.labels.app}"}, "deployment/web condition met"},
		{"jsonpath: not set", nil, nil, []string{"deployment/web", "--for=jsonpath={.metadata.labels.tier}"},
			"error: jsonpath={.metadata.labels.tier} is not met on deployment/web: .metadata.labels.tier is not set"},
		{"jsonpath: a number", nil, nil, []string{"deployment/web", "--for=jsonpath={.metadata.generation}=1"}, "deployment/web condition met"},
		{"delete: never existed", nil, nil, []string{"device/ghost", "--for=delete"}, "device/ghost condition met"},
		{"delete: still there", nil, nil, []string{"device/pi-1", "--for=delete"}, "error: delete is not met on device/pi-1: still exists"},
		{"two kinds", &schema.DeviceObservedInfo{Online: true}, nil, []string{"device/pi-1", "deployment/web", "--for=jsonpath={.metadata.name}"},
			"device/pi-1 condition met\ndeployment/web condition met"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setDevice(t, e, "pi-1", tc.device)
			if err := e.hub.SetDeploymentStatus("web", tc.dep); err != nil {
				t.Fatal(err)
			}
			r := e.run("", append([]string{"wait", "--timeout=0"}, tc.args...)...)
			got, code := strings.TrimSpace(r.stdout), 0
			if strings.HasPrefix(tc.want, "error: ") {
				got, code = strings.TrimSpace(r.stderr), 1
			}
			if r.code != code || got != tc.want {
				t.Fatalf("exit %d (want %d)\ngot  %q\nwant %q\nstdout %q\nstderr %q", r.code, code, got, tc.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestWaitSelectorFollowsTheWatch: wait prints each object as it meets the
// condition, ignores objects the selector did not match at the start, and
// exits 0 once all are met.
func TestWaitSelectorFollowsTheWatch(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", labDevices))
	out, done := e.background(t.Context(), "wait", "devices", "-l", "site=lab", "--for=condition=Online", "--timeout=1m")
	watching(t, e.watches("devices"), 1)
	stillRunning(t, done, out)
	setDevice(t, e, "pi-1", &schema.DeviceObservedInfo{Online: true})
	waitFor(t, out, "device/pi-1 condition met")
	setDevice(t, e, "pi-3", &schema.DeviceObservedInfo{Online: true}) // not selected
	stillRunning(t, done, out)
	setDevice(t, e, "pi-2", &schema.DeviceObservedInfo{Online: true})
	if code := exitWithin(t, done, out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got, want := out.String(), "device/pi-1 condition met\ndevice/pi-2 condition met\n"; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
}

// TestWaitDeploymentRollsOut: Available is met when the rollout finishes,
// as rollout status says.
func TestWaitDeploymentRollsOut(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	gen := e.hub.Deployment("web").Metadata.Generation
	set := func(st schema.DeploymentStatus) {
		t.Helper()
		if err := e.hub.SetDeploymentStatus("web", &st); err != nil {
			t.Fatal(err)
		}
	}
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Pending: 2})
	out, done := e.background(t.Context(), "wait", "deployment/web", "--for=condition=Available", "--timeout=1m")
	watching(t, e.watches("deployments"), 1)
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 2, Ready: 1, Pending: 1})
	stillRunning(t, done, out)
	set(schema.DeploymentStatus{ObservedGeneration: gen, Targeted: 2, Updated: 2, Ready: 2})
	if code := exitWithin(t, done, out); code != 0 || out.String() != "deployment/web condition met\n" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestWaitTimeout: the error names every object not met and why; the ones
// met were printed.
func TestWaitTimeout(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", labDevices))
	lastSeen := time.Now().Add(-20 * time.Minute)
	setDevice(t, e, "pi-1", &schema.DeviceObservedInfo{Online: true, LastSeen: &lastSeen})
	setDevice(t, e, "pi-2", &schema.DeviceObservedInfo{LastSeen: &lastSeen})
	r := e.run("", "wait", "device/pi-1", "device/pi-2", "device/pi-3", "--for=condition=Online", "--timeout=1500ms")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if r.stdout != "device/pi-1 condition met\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	want := "error: timed out after 1.5s waiting for condition=Online on device/pi-2: offline, last seen 20m ago\n" +
		"error: timed out after 1.5s waiting for condition=Online on device/pi-3: its agent has never reported\n"
	if r.stderr != want {
		t.Errorf("stderr\n%s\nwant\n%s", r.stderr, want)
	}
}

// watchProxy serves a fake hub whose watch streams a test can end, hold
// back, or strip of MODIFIED events (as the real hub sends none for a
// status change).
type watchProxy struct {
	hub          *fakehubtest.Hub
	dropModified bool
	// down makes every request fail as a hub shutting down does.
	down atomic.Bool

	mu      sync.Mutex
	watches []string // the query of every watch request
	end     chan struct{}
	hold    chan struct{}
}

func newWatchProxy(t *testing.T, e *env) *watchProxy {
	p := &watchProxy{hub: e.hub, end: make(chan struct{})}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	e.vars["FLEET_HUB"] = srv.URL
	return p
}

func (p *watchProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"kind":"Status","apiVersion":"fleet/v1","code":503,"reason":"ServiceUnavailable","message":"the hub is shutting down"}`))
		return
	}
	if r.URL.Query().Get("watch") != "true" {
		p.hub.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.watches = append(p.watches, r.URL.RawQuery)
	end, hold := p.end, p.hold
	p.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-end:
			cancel()
		case <-ctx.Done():
		}
	}()
	if p.dropModified {
		w = dropModified{w}
	}
	p.hub.ServeHTTP(w, r.WithContext(ctx))
}

func (p *watchProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// endWatches ends the streams open now, and holds new ones back until
// release is called.
func (p *watchProxy) endWatches() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.end)
	p.end = make(chan struct{})
	hold := make(chan struct{})
	p.hold = hold
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.hold = nil
		close(hold)
	}
}

// dropModified leaves MODIFIED events out of a watch stream: the fake hub
// writes one event per Write.
type dropModified struct{ http.ResponseWriter }

func (d dropModified) Write(b []byte) (int, error) {
	if strings.Contains(string(b), `"type":"MODIFIED"`) {
		return len(b), nil
	}
	return d.ResponseWriter.Write(b)
}

func (d dropModified) Flush() { d.ResponseWriter.(http.Flusher).Flush() }

// TestWaitSeesStatusTheWatchDoesNotCarry: the real hub sends no watch event
// for a status change; wait still sees a device come online.
func TestWaitSeesStatusTheWatchDoesNotCarry(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", labDevices))
	p := newWatchProxy(t, e)
	p.dropModified = true
	out, done := e.background(t.Context(), "wait", "device/pi-1", "device/pi-2", "--for=condition=Online", "--timeout=1m")
	watching(t, p.count, 1)
	setDevice(t, e, "pi-1", &schema.DeviceObservedInfo{Online: true})
	setDevice(t, e, "pi-2", &schema.DeviceObservedInfo{Online: true})
	if code := exitWithin(t, done, out); code != 0 || out.String() != "device/pi-1 condition met\ndevice/pi-2 condition met\n" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestWaitSurvivesAWatchReconnect: the stream ends; what happens before the
// watch is back (a deletion) is not lost, since the new watch resumes from
// the last resourceVersion seen.
func TestWaitSurvivesAWatchReconnect(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML))
	p := newWatchProxy(t, e)
	out, done := e.background(t.Context(), "wait", "deployment/web", "--for=delete", "--timeout=1m")
	watching(t, p.count, 1)
	release := p.endWatches()
	watching(t, p.count, 2) // the new watch, held back
	e.ok("", "delete", "deployment", "web")
	stillRunning(t, done, out)
	release()
	if code := exitWithin(t, done, out); code != 0 || out.String() != "deployment/web condition met\n" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	p.mu.Lock()
	second := p.watches[1]
	p.mu.Unlock()
	if !strings.Contains(second, "resourceVersion=") {
		t.Errorf("the second watch did not resume from a resourceVersion: %q", second)
	}
}

// TestWaitRidesOutAHubRestart: the hub goes away for longer than the
// watch's own retries; wait warns once, and meets the condition when the
// hub is back.
func TestWaitRidesOutAHubRestart(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", deviceYAML))
	p := newWatchProxy(t, e)
	out, done := e.background(t.Context(), "wait", "device/pi-1", "--for=condition=Online", "--timeout=1m")
	watching(t, p.count, 1)
	p.down.Store(true)
	p.endWatches()()
	waitFor(t, out, "warning: cannot reach the hub, retrying until the timeout: ")
	setDevice(t, e, "pi-1", &schema.DeviceObservedInfo{Online: true})
	stillRunning(t, done, out)
	p.down.Store(false)
	if code := exitWithin(t, done, out); code != 0 || !strings.HasSuffix(out.String(), "\ndevice/pi-1 condition met\n") || strings.Count(out.String(), "warning:") != 1 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestWaitObjectDeleted: a deletion while waiting for a condition fails the
// wait at once.
func TestWaitObjectDeleted(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", labDevices))
	out, done := e.background(t.Context(), "wait", "devices", "-l", "site=lab", "--for=condition=Online", "--timeout=1m")
	watching(t, e.watches("devices"), 1)
	e.ok("", "delete", "device", "pi-2")
	if code := exitWithin(t, done, out); code != 1 || out.String() != "error: device/pi-2 was deleted while waiting for condition=Online\n" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestWaitInterrupted(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("devices.yaml", deviceYAML))
	ctx, cancel := context.WithCancel(t.Context())
	out, done := e.background(ctx, "wait", "device/pi-1", "--for=condition=Online", "--timeout=-1s")
	watching(t, e.watches("devices"), 1)
	cancel()
	if code := exitWithin(t, done, out); code != 130 || out.String() != "" {
		t.Fatalf("interrupted wait: exit %d, want 130 and nothing printed:\n%s", code, out)
	}
}

func TestWaitRefusals(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("app.yaml", webYAML+"---\n"+deviceYAML))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "device/pi-1"}, "--for is required: want condition=NAME[=true|false], delete or jsonpath='{.path}'=VALUE"},
		{[]string{"wait", "device/pi-1", "--for=ready"}, `--for "ready": want condition=NAME`},
		{[]string{"wait", "device/pi-1", "--for=condition=Available"}, `--for "condition=Available": devices have no condition "Available"; theirs are Online, Converged`},
		{[]string{"wait", "deployment/web", "device/pi-1", "--for=condition=Online"}, `deployments have no condition "Online"; theirs are Available, Complete`},
		{[]string{"wait", "device/pi-1", "--for=condition=Online=maybe"}, "the value of a condition is true or false"},
		{[]string{"wait", "device/pi-1", "--for=delete=now"}, "delete takes no value"},
		{[]string{"wait", "device/pi-1", "--for=jsonpath={status.online}=true"}, "want dotted field names"},
		{[]string{"wait", "device/pi-1", "--for=jsonpath={.status.online"}, "no } closes the path"},
		{[]string{"wait", "device/pi-1", "--for=jsonpath={.status.pods[x]}"}, "an index is a number"},
		{[]string{"wait", "devices", "--for=delete"}, "name the devices to wait for, or select them with -l key=value or --all"},
		{[]string{"wait", "device/pi-1", "-l", "site=lab", "--for=delete"}, "not both"},
		{[]string{"wait", "devices", "-l", "site=nowhere", "--for=condition=Online"}, "no devices match the selector site=nowhere"},
		{[]string{"wait", "device/pi-9", "--for=condition=Online"}, `device "pi-9" not found`},
		{[]string{"wait", "widgets/x", "--for=delete"}, `unknown resource type "widgets"`},
	} {
		r := e.run("", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("fleet %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	// Mistakes in the arguments are found before any request. A hub of
	// its own: a watch the waits above cancelled may still reach e.hub.
	fresh := newEnv(t)
	fresh.run("", "wait", "device/pi-1", "--for=bogus")
	if reqs := fresh.hub.Requests(); len(reqs) != 0 {
		t.Errorf("a bad --for made requests: %v", reqs)
	}
}
