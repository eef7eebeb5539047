package edgeagent

import (
	"context"
	"log/slog"
	"os"
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

// TestContainerdAgent runs the whole agent against a real, private
// containerd (needs root, containerd and runc; FLEET_REQUIRE_CONTAINERD=1
// turns their absence into a failure): desired state over a real MQTT
// broker, containers created and started, logs written, a crashing
// container restarted per policy, a restarted agent adopting running
// tasks without restarting them, a spec change replacing a container and
// an empty desired state removing everything.
func TestContainerdAgent(t *testing.T) {
	d := containerdtest.Start(t)
	const ns = "fleet-agent-e2e"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tarPath, ref := testimage.Build(t, testimage.Options{})
	if _, err := testimage.Import(namespaces.WithNamespace(ctx, ns), d.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	newRuntime := func() *containerd.Runtime {
		rt, err := containerd.New(ctx, containerd.Options{
			Socket:    d.Socket(),
			Namespace: ns,
			Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			// Nothing here may reach a registry: the image is imported.
			Registry: containerd.RegistryConfig{Mirrors: map[string][]string{"fleet.test": {"http://127.0.0.1:1"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		return rt
	}
	pidOf := func(id string) uint32 {
		c, err := d.Client().LoadContainer(namespaces.WithNamespace(ctx, ns), id)
		if err != nil {
			return 0
		}
		task, err := c.Task(namespaces.WithNamespace(ctx, ns), nil)
		if err != nil {
			return 0
		}
		return task.Pid()
	}

	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	stateDir := t.TempDir()

	web := schema.Pod{Name: "web", Spec: schema.PodSpec{RestartPolicy: schema.RestartAlways, Containers: []schema.Container{{
		Name: "app", Image: ref, Args: []string{"env", "GREETING", "echo", "up", "sleep", "forever"},
		Env:       []schema.EnvVar{{Name: "GREETING", Value: "hello-fleet"}},
		Resources: schema.Resources{Limits: schema.ResourceList{Memory: "32Mi", CPU: "250m"}},
	}}}}
	crash := schema.Pod{Name: "crash", Spec: schema.PodSpec{RestartPolicy: schema.RestartOnFailure, Containers: []schema.Container{{
		Name: "app", Image: ref, Args: []string{"echo", "crashing", "exit", "3"},
	}}}}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, web, crash))

	_, stop := runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, newRuntime(), stateDir))
	b.await("web running and crash restarted twice", func() bool {
		st, ok := b.lastStatus("pi-1")
		return ok && st.ObservedGeneration == 1 && len(st.Pods) == 2 &&
			st.Pods[0].Phase == schema.PhaseRunning && st.Pods[0].Ready && st.Pods[1].Restarts >= 2
	})
	logPath := stateDir + "/logs/web/app.log"
	b.await("web's log", func() bool {
		out, _ := os.ReadFile(logPath)
		return strings.Contains(string(out), "GREETING=hello-fleet") && strings.Contains(string(out), "up")
	})
	webID := containerID(web, 0)
	pid := pidOf(webID)
	if pid == 0 {
		t.Fatal("web has no task")
	}

	// Stopping the agent leaves the task running; a new agent with a new
	// containerd client adopts it without restarting it.
	stop()
	if got := pidOf(webID); got != pid {
		t.Fatalf("agent shutdown changed web's task: pid %d -> %d", pid, got)
	}
	b.mu.Lock()
	n := b.nstatus["pi-1"]
	b.mu.Unlock()
	_, stop = runAgent(t, fastOptions(t, "pi-1", "tcp://"+b.addr, newRuntime(), stateDir))
	b.await("a status from the new agent", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		st := b.status["pi-1"]
		return b.nstatus["pi-1"] > n && len(st.Pods) == 2 && st.Pods[0].Phase == schema.PhaseRunning
	})
	if got := pidOf(webID); got != pid {
		t.Fatalf("restarted agent restarted a healthy container: pid %d -> %d", pid, got)
	}
	if st, _ := b.lastStatus("pi-1"); st.Pods[0].Restarts != 0 {
		t.Fatalf("web restarts = %d", st.Pods[0].Restarts)
	}

	// A spec change replaces web; the crash pod goes away.
	web2 := web
	web2.Spec.Containers = []schema.Container{web.Spec.Containers[0]}
	web2.Spec.Containers[0].Env = []schema.EnvVar{{Name: "GREETING", Value: "v2"}}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 2, web2))
	b.awaitApplied("pi-1", 2, 1, schema.PhaseRunning)
	rt := newRuntime()
	list := func() []runtime.Container {
		l, err := rt.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := list(); len(l) != 1 || l[0].ID != containerID(web2, 0) || l[0].State != runtime.StateRunning {
		t.Fatalf("after the spec change: %+v", l)
	}

	// An empty desired state removes everything.
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 3))
	b.await("all containers removed", func() bool {
		st, _ := b.lastStatus("pi-1")
		return st.ObservedGeneration == 3 && len(list()) == 0
	})
	stop()
}
