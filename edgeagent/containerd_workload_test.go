package edgeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/reconcile"
	"github.com/fleetmq/fleet/edgeagent/runtime/containerd"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/testimage"
)

// wlEnv is one agent on a private containerd, for the workload tests:
// its logs are kept to check that no secret value reaches them.
type wlEnv struct {
	t        *testing.T
	d        *containerdtest.Daemon
	ns       string
	ctx      context.Context // carries ns
	ref      string
	rt       *containerd.Runtime
	b        *testBroker
	stateDir string
	key      *devicekey.Key
	logs     *lockedBuf
	stop     func()
	gen      int64
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newWLEnv(t *testing.T, ns string) *wlEnv {
	t.Helper()
	d := containerdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	e := &wlEnv{t: t, d: d, ns: ns, ctx: namespaces.WithNamespace(ctx, ns), stateDir: t.TempDir(), logs: &lockedBuf{}}
	tarPath, ref := testimage.Build(t, testimage.Options{})
	if _, err := testimage.Import(e.ctx, d.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	e.ref = ref
	rt, err := containerd.New(ctx, containerd.Options{
		Socket: d.Socket(), Namespace: ns,
		Logger:   slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registry: containerd.RegistryConfig{Mirrors: map[string][]string{"fleet.test": {"http://127.0.0.1:1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	e.rt = rt
	if e.key, err = devicekey.LoadOrCreate(e.stateDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// What the agent mounted for pods still running at the end.
		b, _ := os.ReadFile("/proc/self/mountinfo")
		var points []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], e.stateDir+"/") {
				points = append(points, f[4])
			}
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	})
	e.b = startBroker(t, nil)
	e.b.addDevice("pi-1", "token-pi-1")
	e.start()
	return e
}

func (e *wlEnv) start() {
	o := fastOptions(e.t, "pi-1", "tcp://"+e.b.addr, e.rt, e.stateDir)
	o.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.StopTimeout = 10 * time.Second
	_, e.stop = runAgent(e.t, o)
}

// publish publishes the next generation of the desired state.
func (e *wlEnv) publish(ds schema.DesiredState) int64 {
	e.t.Helper()
	e.gen++
	ds.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState}
	ds.Device, ds.Store, ds.Generation = "pi-1", "s1", e.gen
	if ds.Pods == nil {
		ds.Pods = []schema.Pod{}
	}
	b, err := json.Marshal(ds)
	if err != nil {
		e.t.Fatal(err)
	}
	e.b.publishDesired("pi-1", b)
	return e.gen
}

func (e *wlEnv) seal(name, typ string, data map[string]string) schema.SealedSecret {
	e.t.Helper()
	s := schema.SealedSecret{Name: name, Type: typ, Version: "1", KeyID: e.key.ID(), Data: map[string][]byte{}}
	for k, v := range data {
		b, err := devicekey.Seal(e.key.PublicKey(), []byte(v), rand.Reader)
		if err != nil {
			e.t.Fatal(err)
		}
		s.Data[k] = b
	}
	return s
}

// awaitLog waits until the container log of pod (container "app")
// contains every want.
func (e *wlEnv) awaitLog(pod string, want ...string) string {
	e.t.Helper()
	path := filepath.Join(e.stateDir, "logs", pod, "app.log")
	var out string
	e.b.await(fmt.Sprintf("%s's log to say %q", pod, want), func() bool {
		b, _ := os.ReadFile(path)
		out = string(b)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	})
	return out
}

// pod returns the status of pod in the last status.
func (e *wlEnv) pod(name string) (schema.PodStatus, bool) {
	st, _ := e.b.lastStatus("pi-1")
	for _, p := range st.Pods {
		if p.Name == name {
			return p, true
		}
	}
	return schema.PodStatus{}, false
}

func (e *wlEnv) pid(id string) uint32 {
	c, err := e.d.Client().LoadContainer(e.ctx, id)
	if err != nil {
		return 0
	}
	task, err := c.Task(e.ctx, nil)
	if err != nil {
		return 0
	}
	return task.Pid()
}

func (e *wlEnv) app(name string, args ...string) schema.Container {
	return schema.Container{Name: "app", Image: e.ref, Args: args}
}

func ptr[T any](v T) *T { return &v }

// mknod makes a character device under /dev with /dev/null's numbers,
// removed at cleanup.
func mknod(t *testing.T, path string) {
	t.Helper()
	const major, minor = 1, 3
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, major<<8|minor); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}

func randomName(prefix string) string {
	return prefix + strings.ToLower(rand.Text()[:10])
}

// ownCapEff is this (root) process's effective capabilities.
func ownCapEff(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapEff")
	return ""
}

// TestContainerdWorkloadHardware: on a real containerd, a mapped device
// node is in the container (same type and numbers, the cgroup rule with
// the permissions) and can be read and written; a privileged container
// sees the host's devices and has every capability; capabilities add and
// drop show in CapEff; runAsUser/runAsGroup are the process's IDs;
// readOnlyRootFilesystem refuses writes outside volumes; a device node
// that does not exist holds its pod back (CreateContainerConfigError
// naming it, an event) without holding the others, until it appears.
func TestContainerdWorkloadHardware(t *testing.T) {
	e := newWLEnv(t, "fleet-wl-hw")
	node := randomName("/dev/fleet-test-")
	mknod(t, node)
	missing := randomName("/dev/fleet-test-missing-")

	dev := schema.Pod{Name: "dev", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app",
		"stat", "/dev/sensor0", "write", "/dev/sensor0", "hello", "read", "/dev/sensor0", "echo", "dev-ok", "sleep", "forever")}}}
	dev.Spec.Containers[0].Devices = []schema.DeviceMapping{{HostPath: node, ContainerPath: "/dev/sensor0", Permissions: "rw"}}
	priv := schema.Pod{Name: "priv", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app", "caps", "stat", node, "sleep", "forever")}}}
	priv.Spec.Containers[0].SecurityContext = &schema.SecurityContext{Privileged: ptr(true)}
	caps := schema.Pod{Name: "caps", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app", "caps", "stat", node, "sleep", "forever")}}}
	caps.Spec.Containers[0].SecurityContext = &schema.SecurityContext{Capabilities: &schema.Capabilities{Drop: []string{"ALL"}, Add: []string{"net_admin", "CAP_SYS_TIME"}}}
	user := schema.Pod{Name: "user", Spec: schema.PodSpec{
		Volumes:    []schema.Volume{{Name: "scratch", EmptyDir: &schema.EmptyDirVolume{}}},
		Containers: []schema.Container{e.app("app", "id", "write-fail", "/rootfs-file", "write", "/scratch/f", "ok", "echo", "user-ok", "sleep", "forever")},
	}}
	user.Spec.Containers[0].SecurityContext = &schema.SecurityContext{RunAsUser: ptr(int64(1234)), RunAsGroup: ptr(int64(5678)), ReadOnlyRootFilesystem: ptr(true)}
	user.Spec.Containers[0].VolumeMounts = []schema.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	waits := schema.Pod{Name: "waits", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app", "stat", "/dev/late", "sleep", "forever")}}}
	waits.Spec.Containers[0].Devices = []schema.DeviceMapping{{HostPath: missing, ContainerPath: "/dev/late"}}

	gen := e.publish(schema.DesiredState{Pods: []schema.Pod{dev, priv, caps, user, waits}})
	e.b.await("every pod but waits running, waits refused", func() bool {
		st, _ := e.b.lastStatus("pi-1")
		if st.ObservedGeneration != gen || len(st.Pods) != 5 {
			return false
		}
		for _, p := range st.Pods[:4] {
			if !p.Ready {
				return false
			}
		}
		w := st.Pods[4]
		return w.Containers[0].Reason == reconcile.ReasonConfigError && strings.Contains(w.Message, missing)
	})
	if !slices.Contains(e.b.eventReasons("pi-1"), reconcile.ReasonConfigError) {
		t.Errorf("no %s event: %v", reconcile.ReasonConfigError, e.b.eventReasons("pi-1"))
	}

	e.awaitLog("dev", "stat /dev/sensor0: char 1:3", "wrote /dev/sensor0", "read: \n", "dev-ok")
	ctr, err := e.d.Client().LoadContainer(e.ctx, containerID(dev, 0))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ctr.Spec(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rule := slices.ContainsFunc(spec.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
		return r.Allow && r.Type == "c" && r.Major != nil && *r.Major == 1 && r.Minor != nil && *r.Minor == 3 && r.Access == "rw"
	})
	if !rule {
		t.Errorf("no cgroup rule c 1:3 rw in %+v", spec.Linux.Resources.Devices)
	}

	e.awaitLog("priv", "caps: CapEff="+ownCapEff(t), "stat "+node+": char 1:3")
	out := e.awaitLog("caps", "caps: CapEff=")
	const netAdmin, sysTime = 12, 25
	if want := fmt.Sprintf("caps: CapEff=%016x", uint64(1)<<netAdmin|uint64(1)<<sysTime); !strings.Contains(out, want) {
		t.Errorf("caps log %q, want %q", out, want)
	}
	if !strings.Contains(out, "stat-error") {
		t.Errorf("an unprivileged container sees a host device it was not given: %q", out)
	}
	out = e.awaitLog("user", "id: uid=1234 gid=5678", "user-ok")
	if !strings.Contains(out, "write refused") {
		t.Errorf("the read-only root took a write: %q", out)
	}

	// The node appears: the pod starts without anything else changing.
	mknod(t, missing)
	e.b.await("waits running once its node exists", func() bool {
		p, ok := e.pod("waits")
		return ok && p.Ready
	})
	e.awaitLog("waits", "stat /dev/late: char 1:3")
}

// TestContainerdWorkloadConfig: env from a ConfigMap and from a Secret
// sealed to the device key, files from both (the Secret's in a tmpfs,
// 0400); a ConfigMap change replaces the container that takes env from it
// (same ID, new process) and changes the file in place in the one that
// mounts it (same process); a Secret sealed to another key holds its pod
// back with a message naming it; the status carries the device's public
// key; no secret value reaches the agent's logs or its status.
func TestContainerdWorkloadConfig(t *testing.T) {
	e := newWLEnv(t, "fleet-wl-cfg")
	const password = "pa55w0rd-0f-the-test"
	cm := func(level string) schema.ConfigMapData {
		return schema.ConfigMapData{Name: "app-config", Version: level, Data: map[string]string{"level": level, "app.ini": "level=" + level}}
	}
	secret := e.seal("db", "", map[string]string{"password": password})

	envPod := schema.Pod{Name: "envpod", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app", "env", "LEVEL", "env", "DB_PASSWORD", "env", "CFG_level", "sleep", "forever")}}}
	envPod.Spec.Containers[0].Env = []schema.EnvVar{
		{Name: "LEVEL", ValueFrom: &schema.EnvVarSource{ConfigMapKeyRef: &schema.KeySelector{Name: "app-config", Key: "level"}}},
		{Name: "DB_PASSWORD", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "db", Key: "password"}}},
	}
	envPod.Spec.Containers[0].EnvFrom = []schema.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &schema.ObjectRef{Name: "app-config"}}}
	files := schema.Pod{Name: "files", Spec: schema.PodSpec{
		Volumes: []schema.Volume{
			{Name: "config", ConfigMap: &schema.ConfigMapVolume{Name: "app-config", Items: []schema.KeyToPath{{Key: "app.ini", Path: "app.ini"}}}},
			{Name: "creds", Secret: &schema.SecretVolume{SecretName: "db"}},
		},
		Containers: []schema.Container{e.app("app", "read", "/creds/password", "statfs", "/creds", "stat", "/creds/..data/password", "watch", "/config/app.ini")},
	}}
	files.Spec.Containers[0].VolumeMounts = []schema.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "creds", MountPath: "/creds"}}
	gen := e.publish(schema.DesiredState{Pods: []schema.Pod{envPod, files}, ConfigMaps: []schema.ConfigMapData{cm("debug")}, Secrets: []schema.SealedSecret{secret}})
	st := e.b.awaitApplied("pi-1", gen, 2, schema.PhaseRunning)
	if st.PublicKey != e.key.PublicKey() {
		t.Errorf("status publicKey %q, want %q", st.PublicKey, e.key.PublicKey())
	}
	e.awaitLog("envpod", "LEVEL=debug", "DB_PASSWORD="+password, "CFG_level=debug")
	const tmpfsMagic = "0x1021994"
	e.awaitLog("files", "read: "+password, "statfs /creds: type="+tmpfsMagic, "watch: level=debug")
	secretFile := filepath.Join(e.stateDir, "pods", "files", schema.PodHash(files), "volumes", "creds", "password")
	if fi, err := os.Stat(secretFile); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("secret file on the device: %v %v", fi, err)
	}
	envID, filesID := containerID(envPod, 0), containerID(files, 0)
	envPID, filesPID := e.pid(envID), e.pid(filesID)

	// The ConfigMap changes.
	e.publish(schema.DesiredState{Pods: []schema.Pod{envPod, files}, ConfigMaps: []schema.ConfigMapData{cm("trace")}, Secrets: []schema.SealedSecret{secret}})
	e.awaitLog("files", "watch: level=trace")
	e.awaitLog("envpod", "LEVEL=trace", "CFG_level=trace")
	if got := e.pid(filesID); got != filesPID {
		t.Errorf("the container mounting the ConfigMap was restarted: pid %d -> %d", filesPID, got)
	}
	if got := e.pid(envID); got == envPID || got == 0 {
		t.Errorf("the container taking env from the ConfigMap was not replaced: pid %d -> %d", envPID, got)
	}
	if p, _ := e.pod("envpod"); p.Hash != schema.PodHash(envPod) {
		t.Errorf("envpod's hash %s, want the template's %s", p.Hash, schema.PodHash(envPod))
	}

	// A restarted agent finds the same env and files: it replaces nothing.
	envPID, filesPID = e.pid(envID), e.pid(filesID)
	n := func() int { e.b.mu.Lock(); defer e.b.mu.Unlock(); return e.b.nstatus["pi-1"] }
	seen := n()
	e.stop()
	e.start()
	e.b.await("a status of the restarted agent", func() bool {
		p, ok := e.pod("files")
		return n() > seen+1 && ok && p.Ready
	})
	if e.pid(envID) != envPID || e.pid(filesID) != filesPID {
		t.Errorf("the restarted agent replaced containers: env %d -> %d, files %d -> %d", envPID, e.pid(envID), filesPID, e.pid(filesID))
	}

	// A Secret sealed to another device's key.
	other, err := devicekey.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	foreign := schema.Pod{Name: "foreign", Spec: schema.PodSpec{Containers: []schema.Container{e.app("app", "sleep", "forever")}}}
	foreign.Spec.Containers[0].Env = []schema.EnvVar{{Name: "T", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "elsewhere", Key: "token"}}}}
	elsewhere := schema.SealedSecret{Name: "elsewhere", Version: "1", KeyID: other.ID(), Data: map[string][]byte{"token": []byte("x")}}
	e.publish(schema.DesiredState{Pods: []schema.Pod{envPod, files, foreign}, ConfigMaps: []schema.ConfigMapData{cm("trace")}, Secrets: []schema.SealedSecret{secret, elsewhere}})
	e.b.await("foreign refused", func() bool {
		p, ok := e.pod("foreign")
		return ok && p.Containers[0].Reason == reconcile.ReasonConfigError && strings.Contains(p.Message, `secret "elsewhere"`) && strings.Contains(p.Message, other.ID())
	})

	if strings.Contains(e.logs.String(), password) {
		t.Error("the agent logged the secret value")
	}
	st, _ = e.b.lastStatus("pi-1")
	if b, _ := json.Marshal(st); bytes.Contains(b, []byte(password)) {
		t.Error("the status carries the secret value")
	}
}

// TestContainerdWorkloadVolumes: an emptyDir of medium Memory is a tmpfs
// of its sizeLimit; a persistent volume's files (through a subPath)
// survive an update of the pod and a restart of the agent, and go with
// the pod unless reclaimPolicy is Retain; a removal runs the preStop hook
// and kills a container that ignores SIGTERM after the pod's
// terminationGracePeriodSeconds, not the agent's 10 s.
func TestContainerdWorkloadVolumes(t *testing.T) {
	e := newWLEnv(t, "fleet-wl-vol")
	hook := t.TempDir()
	mk := func(version string, script ...string) schema.Pod {
		args := append([]string{"echo", version, "statfs", "/ram"}, script...)
		args = append(args, "write", "/data/rows", version, "write", "/kept/k", "kept", "ignore-term", "sleep", "forever")
		p := schema.Pod{Name: "db", Spec: schema.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Volumes: []schema.Volume{
				{Name: "ram", EmptyDir: &schema.EmptyDirVolume{Medium: "Memory", SizeLimit: "8Mi"}},
				{Name: "data", Persistent: &schema.PersistentVolume{}},
				{Name: "kept", Persistent: &schema.PersistentVolume{ReclaimPolicy: schema.ReclaimRetain}},
				{Name: "hook", HostPath: &schema.HostPathVolume{Path: hook}},
			},
			Containers: []schema.Container{e.app("app", args...)},
		}}
		c := &p.Spec.Containers[0]
		c.VolumeMounts = []schema.VolumeMount{
			{Name: "ram", MountPath: "/ram"}, {Name: "data", MountPath: "/data", SubPath: "db/v1"},
			{Name: "kept", MountPath: "/kept"}, {Name: "hook", MountPath: "/hook"},
		}
		c.Lifecycle = &schema.Lifecycle{PreStop: &schema.LifecycleHandler{Exec: &schema.ExecAction{Command: []string{"/app", "write", "/hook/prestop", "ran-" + version}}}}
		return p
	}
	v1, v2 := mk("v1"), mk("v2", "read", "/data/rows")
	gen := e.publish(schema.DesiredState{Pods: []schema.Pod{v1}})
	e.b.awaitApplied("pi-1", gen, 1, schema.PhaseRunning)
	e.awaitLog("db", "v1", "statfs /ram: type=0x1021994 bytes=8388608", "wrote /data/rows")
	rows := filepath.Join(e.stateDir, "volumes", "db", "data", "db", "v1", "rows")
	if b, err := os.ReadFile(rows); err != nil || string(b) != "v1" {
		t.Fatalf("persistent file on the device: %q %v", b, err)
	}

	// An update: v1 gets its preStop and is killed after 1 s; v2 reads
	// what v1 wrote.
	gen = e.publish(schema.DesiredState{Pods: []schema.Pod{v2}})
	start := time.Now()
	e.b.awaitApplied("pi-1", gen, 1, schema.PhaseRunning)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the update took %v: the 1 s grace period was not used", took)
	}
	if b, _ := os.ReadFile(filepath.Join(hook, "prestop")); string(b) != "ran-v1" {
		t.Errorf("preStop hook output %q", b)
	}
	e.awaitLog("db", "read: v1", "v2")

	// The agent restarts: the volume is still there, the pod untouched.
	pid := e.pid(containerID(v2, 0))
	e.stop()
	e.start()
	e.b.await("the restarted agent reports", func() bool {
		p, ok := e.pod("db")
		return ok && p.Ready
	})
	if got := e.pid(containerID(v2, 0)); got != pid {
		t.Errorf("agent restart restarted db: pid %d -> %d", pid, got)
	}
	if b, err := os.ReadFile(rows); err != nil || string(b) != "v2" {
		t.Fatalf("persistent file after the restart: %q %v", b, err)
	}

	// The pod goes: data goes, kept stays, no mount is left.
	gen = e.publish(schema.DesiredState{})
	e.b.await("db removed and its volume with it", func() bool {
		st, _ := e.b.lastStatus("pi-1")
		_, err := os.Stat(filepath.Join(e.stateDir, "volumes", "db", "data"))
		return st.ObservedGeneration == gen && os.IsNotExist(err)
	})
	if b, err := os.ReadFile(filepath.Join(e.stateDir, "volumes", "db", "kept", "k")); err != nil || string(b) != "kept" {
		t.Errorf("retained volume: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(hook, "prestop")); string(b) != "ran-v2" {
		t.Errorf("preStop hook output %q", b)
	}
	e.b.await("no mount left under the state dir", func() bool {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		return !strings.Contains(string(b), e.stateDir+"/")
	})
	if l, err := e.rt.List(e.ctx); err != nil || len(l) != 0 {
		t.Errorf("containers left: %v %v", l, err)
	}
}

// TestContainerdWorkloadPullSecret: a pod's kubernetes.io/dockerconfigjson
// Secret (imagePullSecrets) gives the credentials of a registry that
// requires them; a pod without it cannot pull the same image; neither
// the password nor the auth string reaches the agent's logs.
func TestContainerdWorkloadPullSecret(t *testing.T) {
	e := newWLEnv(t, "fleet-wl-pull")
	const user, password = "robot", "pu11-pa55w0rd"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="fleet-test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()
	tarPath, _ := testimage.Build(t, testimage.Options{})
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/private/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: user, Password: password})); err != nil {
		t.Fatalf("push: %v", err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	regcred := e.seal("regcred", schema.SecretDockerConfigJSON, map[string]string{
		schema.DockerConfigJSONKey: `{"auths":{"` + host + `":{"auth":"` + auth + `"}}}`,
	})
	private := schema.Pod{Name: "private", Spec: schema.PodSpec{
		ImagePullSecrets: []schema.LocalObjectReference{{Name: "regcred"}},
		Containers:       []schema.Container{{Name: "app", Image: ref.String(), Args: []string{"echo", "pulled", "sleep", "forever"}}},
	}}
	anonymous := schema.Pod{Name: "anonymous", Spec: schema.PodSpec{
		Containers: []schema.Container{{Name: "app", Image: host + "/private/app:v1", Args: []string{"sleep", "forever"}}},
	}}
	e.publish(schema.DesiredState{Pods: []schema.Pod{anonymous}, Secrets: []schema.SealedSecret{regcred}})
	e.b.await("the anonymous pull refused", func() bool {
		p, ok := e.pod("anonymous")
		return ok && len(p.Containers) == 1 && (p.Containers[0].Reason == reconcile.ReasonErrImagePull || p.Containers[0].Reason == reconcile.ReasonImagePullBackOff)
	})
	e.publish(schema.DesiredState{Pods: []schema.Pod{private}, Secrets: []schema.SealedSecret{regcred}})
	e.b.await("the private pod running", func() bool {
		p, ok := e.pod("private")
		return ok && p.Ready
	})
	e.awaitLog("private", "pulled")
	for _, s := range []string{password, auth} {
		if strings.Contains(e.logs.String(), s) {
			t.Errorf("the agent logged %q", s)
		}
	}
}
