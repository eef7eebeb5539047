package edgeagent

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/edgeagent/state"
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

// awaitSteady waits until the agent's persisted state says pod runs
// revision hash steadily.
func awaitSteady(b *testBroker, stateDir, pod, hash string) {
	b.t.Helper()
	b.await("pod "+pod+" steady at "+hash, func() bool {
		_, ag, err := state.Inspect(stateDir)
		r := ag.Rollouts[pod]
		return err == nil && r.Steady != nil && r.Steady.Pod.Hash == hash
	})
}

// TestContainerdAgentGoesBackToSteadyRevision: v1 runs steadily; v2,
// whose command exits 1 at once, replaces it and fails to start three
// times; the agent runs v1 again and says so in status; a fixed v3 then
// replaces v1.
func TestContainerdAgentGoesBackToSteadyRevision(t *testing.T) {
	d := containerdtest.Start(t)
	const ns = "fleet-agent-rollback"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
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
	list := func() []runtime.Container {
		l, err := rt.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	stateDir := t.TempDir()
	o := fastOptions(t, "pi-1", "tcp://"+b.addr, rt, stateDir)
	o.SteadyAfter = time.Second
	_, stop := runAgent(t, o)
	defer stop()

	web := func(args ...string) schema.Pod {
		return schema.Pod{Name: "web", Spec: schema.PodSpec{RestartPolicy: schema.RestartAlways, Containers: []schema.Container{{
			Name: "app", Image: ref, Args: args,
		}}}}
	}
	v1 := web("echo", "v1", "sleep", "forever")
	v2 := web("echo", "v2", "exit", "1")
	v3 := web("echo", "v3", "sleep", "forever")
	h1, h2, h3 := schema.PodSpecHash(v1.Spec), schema.PodSpecHash(v2.Spec), schema.PodSpecHash(v3.Spec)

	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 1, v1))
	b.awaitApplied("pi-1", 1, 1, schema.PhaseRunning)
	awaitSteady(b, stateDir, "web", h1)

	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 2, v2))
	want := "revision " + h2[:8] + " failed to start (container app: exit code 1, 3 times); the previous version runs again"
	var st schema.DeviceStatus
	b.await("v2 reported failed, v1 running again", func() bool {
		st, _ = b.lastStatus("pi-1")
		return st.ObservedGeneration == 2 && len(st.Pods) == 1 && st.Pods[0].Hash == h1 && st.Pods[0].Phase == schema.PhaseRunning &&
			st.Pods[0].Ready && st.Pods[0].Message == want
	})
	if c := st.Pods[0].Containers; len(c) != 1 || c[0].State != schema.ContainerRunning || c[0].Image != v1.Spec.Containers[0].Image {
		t.Errorf("container status = %+v; want v1's, running", c)
	}
	if fr := st.Pods[0].FailedRevision; fr == nil || fr.Hash != h2 || fr.Reason != "CrashLoopBackOff" || fr.ExitCode != 1 || fr.Container != "app" {
		t.Errorf("failedRevision = %+v; want v2 (%s), app CrashLoopBackOff, exit code 1", fr, h2)
	}
	if l := list(); len(l) != 1 || l[0].ID != containerID(v1, 0) || l[0].State != runtime.StateRunning {
		t.Fatalf("containers after going back: %+v, want v1 running", l)
	}
	// The event travels in its own message, which may land after the
	// status that already shows v1 again.
	b.await("the RolledBack event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "RolledBack") })
	if err := schema.ValidateDeviceStatus(&st); err != nil {
		t.Errorf("status invalid: %v", err)
	}

	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 3, v3))
	st = b.awaitApplied("pi-1", 3, 1, schema.PhaseRunning)
	if st.Pods[0].Hash != h3 || st.Pods[0].Message != "" {
		t.Fatalf("v3 status = %+v", st.Pods[0])
	}
	if l := list(); len(l) != 1 || l[0].ID != containerID(v3, 0) || l[0].State != runtime.StateRunning {
		t.Fatalf("containers after v3: %+v", l)
	}
}

// testRegistry serves the test image in three versions (distinct
// configurations, so distinct digests) as HOST/fleet/app:v1..v3 over
// plain HTTP, as the in-process go-containerregistry registry.
func testRegistry(t *testing.T) (host string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host = srv.Listener.Addr().String()
	tarPath, _ := testimage.Build(t, testimage.Options{})
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2", "v3"} {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.Config.Env = append(cf.Config.Env, "IMAGE_VERSION="+v)
		vi, err := mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(host+"/fleet/app:"+v, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, vi); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	return host
}

// TestContainerdAgentImageGC: after v1, v2 and v3 of a pod (each pulled
// from a registry) have run steadily in turn, v1's image is deleted (no
// longer referenced), v2's is kept (the previous revision: an undo needs
// no pull), and an image the agent did not pull is kept though no pod
// uses it any more.
func TestContainerdAgentImageGC(t *testing.T) {
	d := containerdtest.Start(t)
	const ns = "fleet-agent-gc"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nctx := namespaces.WithNamespace(ctx, ns)
	host := testRegistry(t)
	tarPath, imported := testimage.Build(t, testimage.Options{})
	if _, err := testimage.Import(nctx, d.Client(), tarPath, ""); err != nil {
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
	present := func(ref string) bool {
		n, err := runtime.ImageName(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Client().GetImage(nctx, n)
		return err == nil
	}

	b := startBroker(t, nil)
	b.addDevice("pi-1", "token-pi-1")
	stateDir := t.TempDir()
	o := fastOptions(t, "pi-1", "tcp://"+b.addr, rt, stateDir)
	o.SteadyAfter = 500 * time.Millisecond
	_, stop := runAgent(t, o)
	defer stop()

	web := func(v string) schema.Pod {
		return schema.Pod{Name: "web", Spec: schema.PodSpec{RestartPolicy: schema.RestartAlways, Containers: []schema.Container{{
			Name: "app", Image: host + "/fleet/app:" + v, Args: []string{"sleep", "forever"},
		}}}}
	}
	base := schema.Pod{Name: "base", Spec: schema.PodSpec{RestartPolicy: schema.RestartAlways, Containers: []schema.Container{{
		Name: "app", Image: imported, Args: []string{"sleep", "forever"},
	}}}}
	for gen, v := range []string{"v1", "v2", "v3"} {
		pods := []schema.Pod{web(v)}
		if v == "v1" {
			pods = append(pods, base) // then removed: its image stays
		}
		b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", int64(gen+1), pods...))
		b.awaitApplied("pi-1", int64(gen+1), len(pods), schema.PhaseRunning)
		awaitSteady(b, stateDir, "web", schema.PodSpecHash(web(v).Spec))
	}
	b.await("v1's image deleted", func() bool { return !present(host + "/fleet/app:v1") })
	if !present(host+"/fleet/app:v2") || !present(host+"/fleet/app:v3") {
		t.Fatal("the previous (v2) or current (v3) image was deleted")
	}
	if !present(imported) {
		t.Fatal("an image the agent did not pull was deleted")
	}
	b.await("an ImageGC event", func() bool { return slices.Contains(b.eventReasons("pi-1"), "ImageGC") })

	// An undo to v2 needs no registry.
	pulled, err := rt.PulledImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.publishDesired("pi-1", desiredJSON(t, "pi-1", "s1", 4, web("v2")))
	b.awaitApplied("pi-1", 4, 1, schema.PhaseRunning)
	after, err := rt.PulledImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pulled, after) {
		t.Errorf("pulled images changed by the undo: %v -> %v", pulled, after)
	}
}
