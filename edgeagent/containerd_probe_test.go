package edgeagent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// newContainerdRuntime starts a private containerd (skipping the test
// without one, see containerdtest), imports the test image into ns and
// returns a runtime on it with the image's reference.
func newContainerdRuntime(t *testing.T, ns string) (*containerd.Runtime, string) {
	t.Helper()
	d := containerdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	tarPath, ref := testimage.Build(t, testimage.Options{})
	if _, err := testimage.Import(namespaces.WithNamespace(ctx, ns), d.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	rt, err := containerd.New(ctx, containerd.Options{
		Socket: d.Socket(), Namespace: ns,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Registry: containerd.RegistryConfig{Mirrors: map[string][]string{"fleet.test": {"http://127.0.0.1:1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt, ref
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on (pods
// use the device's network, so a container may take it).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func podStatusOf(st schema.DeviceStatus, name string) (schema.PodStatus, bool) {
	for _, p := range st.Pods {
		if p.Name == name {
			return p, true
		}
	}
	return schema.PodStatus{}, false
}

func (b *testBroker) eventsOf(device, reason string) []schema.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []schema.Event
	for _, e := range b.events[device] {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// TestContainerdAgentProbes runs probes against real containers: a
// liveness exec probe that starts failing gets its container restarted
// (RESTARTS grows, events name the probe); a readiness tcpSocket probe
// on a port nobody listens on keeps its pod Running but not ready; an
// httpGet readiness probe on a named port the container serves makes its
// pod ready.
func TestContainerdAgentProbes(t *testing.T) {
	rt, ref := newContainerdRuntime(t, "fleet-agent-probes")
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	_, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, t.TempDir()))
	defer stop()

	closed, served := freePort(t), freePort(t)
	live := schema.Pod{Name: "live", Spec: schema.PodSpec{Containers: []schema.Container{{
		Name: "app", Image: ref,
		// Healthy for two seconds, then not.
		Args: []string{"write", "/healthy", "ok", "sleep", "2s", "rm", "/healthy", "sleep", "forever"},
		LivenessProbe: &schema.Probe{
			Exec:          &schema.ExecAction{Command: []string{"/app", "read", "/healthy"}},
			PeriodSeconds: 1, FailureThreshold: 2,
		},
	}}}}
	deaf := schema.Pod{Name: "deaf", Spec: schema.PodSpec{Containers: []schema.Container{{
		Name: "app", Image: ref, Args: []string{"sleep", "forever"},
		ReadinessProbe: &schema.Probe{
			TCPSocket:     &schema.TCPSocketAction{Port: schema.PortRef(strconv.Itoa(closed))},
			PeriodSeconds: 1, FailureThreshold: 1,
		},
	}}}}
	web := schema.Pod{Name: "web", Spec: schema.PodSpec{Containers: []schema.Container{{
		Name: "app", Image: ref, Args: []string{"serve", "127.0.0.1:" + strconv.Itoa(served)},
		Ports: []schema.ContainerPort{{Name: "http", ContainerPort: int32(served)}},
		ReadinessProbe: &schema.Probe{
			HTTPGet:       &schema.HTTPGetAction{Path: "/", Port: "http"},
			PeriodSeconds: 1, FailureThreshold: 1,
		},
	}}}}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, live, deaf, web))

	wantNotReady := "app: readiness probe failed: tcp 127.0.0.1:" + strconv.Itoa(closed) + ": connect: connection refused"
	b.await("deaf running but not ready, web ready", func() bool {
		st, _ := b.lastStatus("pi-1")
		d, ok1 := podStatusOf(st, "deaf")
		w, ok2 := podStatusOf(st, "web")
		return ok1 && ok2 && d.Phase == schema.PhaseRunning && !d.Ready && d.Message == wantNotReady &&
			w.Phase == schema.PhaseRunning && w.Ready
	})
	b.await("live restarted twice by its liveness probe", func() bool {
		st, _ := b.lastStatus("pi-1")
		p, ok := podStatusOf(st, "live")
		return ok && p.Restarts >= 2
	})
	want := "liveness probe failed: exec [/app read /healthy]: exit code 12"
	var unhealthy []string
	for _, e := range b.eventsOf("pi-1", "Unhealthy") {
		if e.Pod == "live" {
			unhealthy = append(unhealthy, e.Message)
		}
	}
	if len(unhealthy) == 0 || unhealthy[0] != want {
		t.Errorf("Unhealthy events of live = %q, want %q first", unhealthy, want)
	}
	if k := b.eventsOf("pi-1", "Killing"); len(k) == 0 || k[0].Pod != "live" || !strings.Contains(k[0].Message, want) {
		t.Errorf("Killing events = %+v", k)
	}
	// deaf and web were never restarted: readiness does not restart.
	st, _ := b.lastStatus("pi-1")
	for _, name := range []string{"deaf", "web"} {
		if p, _ := podStatusOf(st, name); p.Restarts != 0 {
			t.Errorf("%s restarted %d times", name, p.Restarts)
		}
	}
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		t.Errorf("status invalid: %v", err)
	}
}

// TestContainerdAgentInitContainers: init containers run one at a time,
// in order, each to completion, before the app container (each reads
// what the one before wrote in a shared directory); a failing init
// container holds its app back with a clear status, and under
// restartPolicy Never fails the pod.
func TestContainerdAgentInitContainers(t *testing.T) {
	rt, ref := newContainerdRuntime(t, "fleet-agent-init")
	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	stateDir := t.TempDir()
	_, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, rt, stateDir))
	defer stop()
	shared := t.TempDir()
	mount := []schema.Mount{{HostPath: shared, MountPath: "/shared"}}

	ordered := schema.Pod{Name: "ordered", Spec: schema.PodSpec{
		InitContainers: []schema.Container{
			{Name: "first", Image: ref, Mounts: mount, Args: []string{"write", "/shared/first", "1"}},
			{Name: "second", Image: ref, Mounts: mount, Args: []string{"read", "/shared/first", "write", "/shared/second", "2"}},
		},
		Containers: []schema.Container{
			{Name: "app", Image: ref, Mounts: mount, Args: []string{"read", "/shared/second", "sleep", "forever"}},
		},
	}}
	stuck := schema.Pod{Name: "stuck", Spec: schema.PodSpec{
		InitContainers: []schema.Container{{Name: "prepare", Image: ref, Args: []string{"echo", "failing", "exit", "1"}}},
		Containers:     []schema.Container{{Name: "app", Image: ref, Args: []string{"sleep", "forever"}}},
	}}
	never := schema.Pod{Name: "never", Spec: schema.PodSpec{
		RestartPolicy:  schema.RestartNever,
		InitContainers: []schema.Container{{Name: "prepare", Image: ref, Args: []string{"exit", "3"}}},
		Containers:     []schema.Container{{Name: "app", Image: ref, Args: []string{"sleep", "forever"}}},
	}}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, ordered, stuck, never))

	b.await("ordered running, stuck held back, never failed", func() bool {
		st, _ := b.lastStatus("pi-1")
		o, _ := podStatusOf(st, "ordered")
		s, _ := podStatusOf(st, "stuck")
		n, _ := podStatusOf(st, "never")
		return o.Phase == schema.PhaseRunning && o.Ready &&
			s.Phase == schema.PhasePending && s.Restarts >= 2 && strings.HasPrefix(s.Containers[0].Reason, "Init:") &&
			strings.HasPrefix(s.Message, "init container prepare failed (exit code 1); retrying ") &&
			n.Phase == schema.PhaseFailed && n.Containers[0].Reason == "Init:Error" &&
			n.Message == "init container prepare failed (exit code 3); restart policy Never"
	})
	if got, _ := os.ReadFile(filepath.Join(shared, "second")); string(got) != "2" {
		t.Errorf("second init container wrote %q", got)
	}
	cs, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]runtime.Container{}
	for _, c := range cs {
		byName[c.Pod+"/"+c.Name] = c
	}
	first, second, app := byName["ordered/first"], byName["ordered/second"], byName["ordered/app"]
	if first.State != runtime.StateExited || first.ExitCode != 0 || second.State != runtime.StateExited || second.ExitCode != 0 {
		t.Fatalf("init containers: %+v %+v", first, second)
	}
	if second.StartedAt.Before(first.FinishedAt) || app.StartedAt.Before(second.FinishedAt) {
		t.Errorf("out of order: first %v-%v, second %v-%v, app from %v",
			first.StartedAt, first.FinishedAt, second.StartedAt, second.FinishedAt, app.StartedAt)
	}
	for _, name := range []string{"stuck/app", "never/app"} {
		if c, ok := byName[name]; ok {
			t.Errorf("%s was created behind a failing init container: %+v", name, c)
		}
	}
	if log, _ := os.ReadFile(filepath.Join(stateDir, "logs", "stuck", "prepare.log")); !strings.Contains(string(log), "failing") {
		t.Errorf("init container log: %q", log)
	}
	if !slices.ContainsFunc(b.eventsOf("pi-1", "Exited"), func(e schema.Event) bool { return e.Pod == "stuck" && e.Container == "prepare" }) {
		t.Error("no Exited event for the failing init container")
	}
}
