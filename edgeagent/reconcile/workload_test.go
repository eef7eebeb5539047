package reconcile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/edgeagent/desired"
	"github.com/fleetmq/fleet/edgeagent/devicekey"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/edgeagent/volumes"
	"github.com/fleetmq/fleet/schema"
)

// wlHarness is the harness with a device key, a volumes.Manager over a
// fake mounter, and every event message and log line kept (to check that
// no secret value reaches them).
type wlHarness struct {
	*harness
	key     *devicekey.Key
	mounter *recMounter
	vols    *volumes.Manager

	mu   sync.Mutex
	msgs []string
	logs bytes.Buffer
}

func newWLHarness(t *testing.T) *wlHarness {
	t.Helper()
	h := &wlHarness{harness: newHarness(t, "", nil, nil), mounter: &recMounter{points: map[string]bool{}}}
	var err error
	if h.key, err = devicekey.Generate(rand.Reader); err != nil {
		t.Fatal(err)
	}
	if h.vols, err = volumes.New(volumes.Options{StateDir: h.dir.Root(), Mounter: h.mounter}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *wlHarness) Record(typ, reason, pod, container, msg string) {
	h.harness.Record(typ, reason, pod, container, msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, reason+" "+pod+"/"+container+": "+msg)
}

func (h *wlHarness) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.Write(p)
}

func (h *wlHarness) start() {
	h.t.Helper()
	ds, err := h.dir.LoadDesired()
	if err != nil {
		h.t.Fatal(err)
	}
	ag, err := h.dir.LoadAgent()
	if err != nil {
		h.t.Fatal(err)
	}
	h.inbox = desired.New("dev1", ds)
	h.rec, err = New(Options{
		Runtime: h.run, State: h.dir, Inbox: h.inbox, Desired: ds, Agent: ag,
		Clock: h.clk, Events: h, OnStatus: func(s Status) { h.harness.mu.Lock(); h.status = s; h.harness.mu.Unlock() },
		Logger: slog.New(slog.NewTextHandler(h, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Retry:  backoff.Policy{Initial: 5 * time.Second, Max: time.Minute},
		Seed:   1, DeviceKey: h.key, Volumes: h.vols, StopTimeout: 10 * time.Second,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.rec.Run(ctx) }()
	synctest.Wait()
}

// offerState offers a desired state with ConfigMaps and Secrets.
func (h *wlHarness) offerState(ds schema.DesiredState) {
	h.t.Helper()
	ds.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState}
	ds.Device, ds.Store = "dev1", "s1"
	b, err := json.Marshal(ds)
	if err != nil {
		h.t.Fatal(err)
	}
	if out, _, err := h.inbox.Offer(b); out != desired.Accepted {
		h.t.Fatalf("offer gen %d: %v %v", ds.Generation, out, err)
	}
	synctest.Wait()
}

func (h *wlHarness) seal(name, typ string, data map[string]string) schema.SealedSecret {
	h.t.Helper()
	s := schema.SealedSecret{Name: name, Type: typ, Version: "1", KeyID: h.key.ID(), Data: map[string][]byte{}}
	for k, v := range data {
		b, err := devicekey.Seal(h.key.PublicKey(), []byte(v), rand.Reader)
		if err != nil {
			h.t.Fatal(err)
		}
		s.Data[k] = b
	}
	return s
}

// leaks fails the test if value shows in an event, a log line or a status.
func (h *wlHarness) leaks(value string) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.Contains(m, value) {
			h.t.Errorf("event carries the secret: %s", m)
		}
	}
	if strings.Contains(h.logs.String(), value) {
		h.t.Errorf("log carries the secret")
	}
	st, _ := json.Marshal(h.getStatus())
	if strings.Contains(string(st), value) {
		h.t.Errorf("status carries the secret: %s", st)
	}
}

func (h *wlHarness) event(reason string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.HasPrefix(m, reason+" ") {
			return m
		}
	}
	return ""
}

// lastCreated returns the spec of the last created container id.
func (h *wlHarness) lastCreated(id string) runtime.ContainerSpec {
	h.t.Helper()
	created := h.rt.Created()
	for i := len(created) - 1; i >= 0; i-- {
		if created[i].ID == id {
			return created[i]
		}
	}
	h.t.Fatalf("%s was never created", id)
	return runtime.ContainerSpec{}
}

// recMounter records mounts without mounting.
type recMounter struct {
	mu     sync.Mutex
	points map[string]bool
}

func (m *recMounter) MountTmpfs(dir string, _ int64, _ fs.FileMode) error { return m.add(dir) }
func (m *recMounter) Bind(_, target string) error                         { return m.add(target) }
func (m *recMounter) add(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.points[p] = true
	return nil
}

func (m *recMounter) Unmount(target string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.points, target)
	return nil
}

func (m *recMounter) MountsUnder(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

func ptrTo[T any](v T) *T { return &v }

func envFromPod(name string) schema.Pod {
	p := pod(name, schema.RestartAlways, "app:1")
	p.Spec.Containers[0].Env = []schema.EnvVar{
		{Name: "LEVEL", ValueFrom: &schema.EnvVarSource{ConfigMapKeyRef: &schema.KeySelector{Name: "cfg", Key: "level"}}},
		{Name: "DB_PASSWORD", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "db", Key: "password"}}},
	}
	p.Spec.Containers[0].EnvFrom = []schema.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &schema.ObjectRef{Name: "cfg"}}}
	return p
}

// TestWorkloadEnvFromConfigMapsAndSecrets: env valueFrom and envFrom are
// resolved from the desired state, the Secret unsealed with the device
// key; a ConfigMap change replaces the container (same ID, same pod hash,
// a ConfigChanged removal) and the pod's status hash stays the
// template's; no value reaches events, logs or status.
func TestWorkloadEnvFromConfigMapsAndSecrets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		web := envFromPod("web")
		other := pod("other", schema.RestartAlways, "app:1")
		cm := func(level, version string) schema.ConfigMapData {
			return schema.ConfigMapData{Name: "cfg", Version: version, Data: map[string]string{"level": level}}
		}
		secret := h.seal("db", "", map[string]string{"password": "hunter2-s3cret"})
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{web, other}, ConfigMaps: []schema.ConfigMapData{cm("debug", "1")}, Secrets: []schema.SealedSecret{secret}})

		id := idOf(web, "c0")
		if got := h.state(id); got != runtime.StateRunning {
			t.Fatalf("web is %s; status %+v", got, h.getStatus())
		}
		spec := h.lastCreated(id)
		if want := []string{"CFG_level=debug", "LEVEL=debug", "DB_PASSWORD=hunter2-s3cret"}; !slices.Equal(spec.Env, want) {
			t.Fatalf("env = %q, want %q", spec.Env, want)
		}
		digest := spec.Labels[LabelConfigDigest]
		if digest == "" || strings.Contains(digest, "hunter2") {
			t.Fatalf("digest label %q", digest)
		}
		otherID := idOf(other, "c0")
		if _, ok := h.lastCreated(otherID).Labels[LabelConfigDigest]; ok {
			t.Error("a pod without config refs got a digest label")
		}

		// The ConfigMap changes: the container is replaced, under the same
		// ID and pod hash; the other pod is untouched.
		h.offerState(schema.DesiredState{Generation: 2, Pods: []schema.Pod{web, other}, ConfigMaps: []schema.ConfigMapData{cm("trace", "2")}, Secrets: []schema.SealedSecret{secret}})
		h.advance(time.Second) // the replacement is prepared first, then made
		spec = h.lastCreated(id)
		if !slices.Contains(spec.Env, "LEVEL=trace") || spec.Labels[LabelConfigDigest] == digest {
			t.Fatalf("after the ConfigMap change: env %q, digest %q (was %q)", spec.Env, spec.Labels[LabelConfigDigest], digest)
		}
		if got := h.state(id); got != runtime.StateRunning {
			t.Fatalf("web is %s after the change", got)
		}
		if ev := h.event("Removed"); !strings.Contains(ev, "web/c0") || !strings.Contains(ev, ReasonConfigChanged) {
			t.Errorf("no ConfigChanged removal event: %v", h.msgs)
		}
		st := h.getStatus()
		if st.ObservedGeneration != 2 || st.Pods[0].Hash != schema.PodHash(web) || !st.Pods[0].Ready {
			t.Errorf("status %+v", st)
		}
		if n := strings.Count(strings.Join(h.rt.Ops(), "\n"), "create "+otherID); n != 1 {
			t.Errorf("other pod created %d times", n)
		}
		// A pass with nothing new changes nothing.
		creates := h.rt.Calls().Create
		h.advance(time.Minute)
		if h.rt.Calls().Create != creates {
			t.Errorf("steady state re-created containers: %v", h.rt.Ops())
		}
		h.leaks("hunter2-s3cret")
	})
}

// TestWorkloadMissingConfigWaits: a pod whose Secret is missing, sealed to
// another key, or whose ConfigMap key is missing waits with
// CreateContainerConfigError naming the object and key (never a value);
// other pods run; once the object arrives the pod starts.
func TestWorkloadMissingConfigWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		web := envFromPod("web")
		other := pod("other", schema.RestartAlways, "app:1")
		cfg := schema.ConfigMapData{Name: "cfg", Version: "1", Data: map[string]string{"level": "debug"}}
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{web, other}, ConfigMaps: []schema.ConfigMapData{cfg}})
		check := func(want ...string) {
			t.Helper()
			st := h.getStatus()
			if len(st.Pods) != 2 || st.Pods[0].Containers[0].Reason != ReasonConfigError || st.Pods[1].Phase != schema.PhaseRunning {
				t.Fatalf("status %+v", st)
			}
			for _, w := range want {
				if !strings.Contains(st.Pods[0].Message, w) {
					t.Errorf("message %q does not say %q", st.Pods[0].Message, w)
				}
			}
		}
		check(`secret "db"`, "not found")
		if ev := h.event(ReasonConfigError); !strings.Contains(ev, `secret "db"`) {
			t.Errorf("event %q", ev)
		}

		other2, err := devicekey.Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		wrong := h.seal("db", "", map[string]string{"password": "hunter2-s3cret"})
		wrong.KeyID = other2.ID()
		h.offerState(schema.DesiredState{Generation: 2, Pods: []schema.Pod{web, other}, ConfigMaps: []schema.ConfigMapData{cfg}, Secrets: []schema.SealedSecret{wrong}})
		h.advance(time.Minute)
		check(`secret "db"`, other2.ID(), h.key.ID())

		right := h.seal("db", "", map[string]string{"password": "hunter2-s3cret"})
		h.offerState(schema.DesiredState{Generation: 3, Pods: []schema.Pod{web, other}, ConfigMaps: []schema.ConfigMapData{cfg}, Secrets: []schema.SealedSecret{right}})
		h.advance(2 * time.Minute)
		if got := h.state(idOf(web, "c0")); got != runtime.StateRunning {
			t.Fatalf("web is %s once its Secret came: %+v", got, h.getStatus())
		}
		h.leaks("hunter2-s3cret")
	})
}

// TestWorkloadDevices: a device node that does not exist refuses the pod
// (CreateContainerConfigError naming the path, an event), other pods run,
// and the pod starts once the node appears; devices and the security
// context reach the runtime's spec.
func TestWorkloadDevices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		// A link to /dev/null, made later (as root only).
		node := "/dev/fleet-unit-" + strings.ToLower(rand.Text()[:12])
		p := pod("serial", schema.RestartAlways, "app:1")
		p.Spec.Containers[0].Devices = []schema.DeviceMapping{{HostPath: node, ContainerPath: "/dev/ttyS9", Permissions: "rw"}}
		p.Spec.Containers[0].SecurityContext = &schema.SecurityContext{
			RunAsUser: ptrTo(int64(1000)), RunAsGroup: ptrTo(int64(20)), ReadOnlyRootFilesystem: ptrTo(true),
			Capabilities: &schema.Capabilities{Add: []string{"sys_rawio", "CAP_NET_ADMIN"}, Drop: []string{"all"}},
		}
		other := pod("other", schema.RestartAlways, "app:1")
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{p, other}})
		st := h.getStatus()
		if st.Pods[0].Containers[0].Reason != ReasonConfigError || !strings.Contains(st.Pods[0].Message, node) || st.Pods[1].Phase != schema.PhaseRunning {
			t.Fatalf("status %+v", st)
		}
		if ev := h.event(ReasonConfigError); !strings.Contains(ev, node) {
			t.Errorf("event %q", ev)
		}
		if os.Geteuid() != 0 {
			if os.Getenv("FLEET_REQUIRE_CONTAINERD") == "1" {
				t.Fatal("making a device node under /dev needs root, and FLEET_REQUIRE_CONTAINERD=1 asks for every root test")
			}
			t.Skip("making a device node under /dev needs root")
		}
		if err := os.Symlink("/dev/null", node); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(node)
		h.advance(time.Minute)
		id := idOf(p, "c0")
		if got := h.state(id); got != runtime.StateRunning {
			t.Fatalf("serial is %s after its node appeared: %+v", got, h.getStatus())
		}
		spec := h.lastCreated(id)
		if len(spec.Devices) != 1 || spec.Devices[0] != (runtime.Device{HostPath: node, ContainerPath: "/dev/ttyS9", Permissions: "rw"}) {
			t.Errorf("devices %+v", spec.Devices)
		}
		if !slices.Equal(spec.CapDrop, []string{"ALL"}) || !slices.Equal(spec.CapAdd, []string{"CAP_SYS_RAWIO", "CAP_NET_ADMIN"}) ||
			*spec.RunAsUser != 1000 || *spec.RunAsGroup != 20 || !spec.ReadOnlyRootFS || spec.Privileged {
			t.Errorf("security: %+v", spec)
		}
	})
}

// TestWorkloadVolumes: a pod's volumes become bind mounts; a persistent
// volume keeps its files across an update of the pod and goes when the
// pod goes, unless it is Retain; a configMap volume is updated in place,
// without restarting the container.
func TestWorkloadVolumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		mk := func(image string) schema.Pod {
			p := pod("db", schema.RestartAlways, image)
			p.Spec.Volumes = []schema.Volume{
				{Name: "data", Persistent: &schema.PersistentVolume{}},
				{Name: "keep", Persistent: &schema.PersistentVolume{ReclaimPolicy: schema.ReclaimRetain}},
				{Name: "tmp", EmptyDir: &schema.EmptyDirVolume{Medium: "Memory", SizeLimit: "4Mi"}},
				{Name: "cfg", ConfigMap: &schema.ConfigMapVolume{Name: "cfg"}},
			}
			p.Spec.Containers[0].VolumeMounts = []schema.VolumeMount{
				{Name: "data", MountPath: "/data"}, {Name: "keep", MountPath: "/keep"},
				{Name: "tmp", MountPath: "/tmp"}, {Name: "cfg", MountPath: "/etc/db"},
			}
			grace := int64(3)
			p.Spec.TerminationGracePeriodSeconds = &grace
			return p
		}
		cm := func(v string) []schema.ConfigMapData {
			return []schema.ConfigMapData{{Name: "cfg", Version: v, Data: map[string]string{"db.ini": "v=" + v}}}
		}
		v1 := mk("db:1")
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{v1}, ConfigMaps: cm("1")})
		id1 := idOf(v1, "c0")
		if got := h.state(id1); got != runtime.StateRunning {
			t.Fatalf("db is %s: %+v", got, h.getStatus())
		}
		spec := h.lastCreated(id1)
		data := h.vols.PersistentDir("db", "data")
		if len(spec.Mounts) != 4 || spec.Mounts[0] != (schema.Mount{HostPath: data, MountPath: "/data"}) || !spec.Mounts[3].ReadOnly {
			t.Fatalf("mounts %+v", spec.Mounts)
		}
		if spec.Labels[LabelGracePeriod] != "3" {
			t.Errorf("grace label %q", spec.Labels[LabelGracePeriod])
		}
		if err := os.WriteFile(filepath.Join(data, "rows"), []byte("42"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfgFile := filepath.Join(spec.Mounts[3].HostPath, "db.ini")
		if b, _ := os.ReadFile(cfgFile); string(b) != "v=1" {
			t.Fatalf("config file %q", b)
		}

		// The ConfigMap changes: the file changes in place, no restart.
		creates := h.rt.Calls().Create
		h.offerState(schema.DesiredState{Generation: 2, Pods: []schema.Pod{v1}, ConfigMaps: cm("2")})
		if b, _ := os.ReadFile(cfgFile); string(b) != "v=2" {
			t.Fatalf("config file after the change %q", b)
		}
		if h.rt.Calls().Create != creates || h.state(id1) != runtime.StateRunning {
			t.Errorf("a configMap volume change restarted the container: %v", h.rt.Ops())
		}
		if h.event("VolumeUpdated") == "" {
			t.Error("no VolumeUpdated event")
		}

		// An update: the new revision finds the persistent files; the old
		// revision's stop waited the pod's grace period.
		v2 := mk("db:2")
		h.offerState(schema.DesiredState{Generation: 3, Pods: []schema.Pod{v2}, ConfigMaps: cm("2")})
		h.advance(time.Second)
		id2 := idOf(v2, "c0")
		if got := h.state(id2); got != runtime.StateRunning {
			t.Fatalf("db v2 is %s", got)
		}
		if d, ok := h.rt.LastStopTimeout(id1); !ok || d != 3*time.Second {
			t.Errorf("stop of v1: %v %v, want the 3 s grace period", d, ok)
		}
		if b, err := os.ReadFile(filepath.Join(h.vols.PersistentDir("db", "data"), "rows")); err != nil || string(b) != "42" {
			t.Fatalf("persistent file after the update: %q %v", b, err)
		}
		if _, err := os.Stat(h.vols.RevisionDir("db", v1Hash(v1))); !os.IsNotExist(err) {
			t.Errorf("v1's revision directory is left: %v", err)
		}
		if h.mounter.points[filepath.Join(h.vols.RevisionDir("db", v1Hash(v1)), "volumes", "tmp")] {
			t.Error("v1's tmpfs is still mounted")
		}

		// The pod goes: its Delete volume goes, its Retain volume stays.
		h.offerState(schema.DesiredState{Generation: 4, Pods: []schema.Pod{}})
		h.advance(time.Second)
		if _, err := os.Stat(h.vols.PersistentDir("db", "data")); !os.IsNotExist(err) {
			t.Errorf("persistent volume data left after the pod went: %v", err)
		}
		if _, err := os.Stat(h.vols.PersistentDir("db", "keep")); err != nil {
			t.Errorf("retained volume: %v", err)
		}
		if h.event("VolumeRemoved") == "" {
			t.Error("no VolumeRemoved event")
		}
		if len(h.mounter.points) != 0 {
			t.Errorf("mounts left: %v", h.mounter.points)
		}
	})
}

func v1Hash(p schema.Pod) string { return schema.PodHash(p) }

// TestWorkloadPreStopAndGrace: a removal runs the preStop hook in the
// container first, then stops it with what is left of the grace period.
func TestWorkloadPreStopAndGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		var execs [][]string
		var mu sync.Mutex
		h.rt.SetExecHandler(func(ctx context.Context, id string, cmd []string) (int, []byte, error) {
			mu.Lock()
			execs = append(execs, append([]string{id}, cmd...))
			mu.Unlock()
			return 0, nil, nil
		})
		h.start()
		defer h.stop()
		p := pod("web", schema.RestartAlways, "app:1")
		grace := int64(20)
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Containers[0].Lifecycle = &schema.Lifecycle{PreStop: &schema.LifecycleHandler{Exec: &schema.ExecAction{Command: []string{"/app", "echo", "bye"}}}}
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{p}})
		id := idOf(p, "c0")
		if h.state(id) != runtime.StateRunning {
			t.Fatalf("web: %+v", h.getStatus())
		}
		h.offerState(schema.DesiredState{Generation: 2, Pods: []schema.Pod{}})
		h.advance(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(execs) != 1 || !slices.Equal(execs[0], []string{id, "/app", "echo", "bye"}) {
			t.Fatalf("execs %q", execs)
		}
		if d, ok := h.rt.LastStopTimeout(id); !ok || d != 20*time.Second {
			t.Errorf("stop timeout %v %v, want 20 s", d, ok)
		}
		ops := h.rt.Ops()
		if slices.Index(ops, "stop "+id) < 0 || slices.Index(ops, "remove "+id) < slices.Index(ops, "stop "+id) {
			t.Errorf("ops %v", ops)
		}
	})
}

// TestWorkloadImagePullSecrets: the credentials of a pod's
// kubernetes.io/dockerconfigjson Secret travel with its pulls.
func TestWorkloadImagePullSecrets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newWLHarness(t)
		h.start()
		defer h.stop()
		p := pod("private", schema.RestartAlways, "registry.local:5000/acme/app:1")
		p.Spec.ImagePullSecrets = []schema.LocalObjectReference{{Name: "regcred"}, {Name: "missing"}}
		auth := base64.StdEncoding.EncodeToString([]byte("robot:pa55-s3cret"))
		reg := h.seal("regcred", schema.SecretDockerConfigJSON, map[string]string{
			schema.DockerConfigJSONKey: `{"auths":{"registry.local:5000":{"auth":"` + auth + `"}}}`,
		})
		h.offerState(schema.DesiredState{Generation: 1, Pods: []schema.Pod{p}, Secrets: []schema.SealedSecret{reg}})
		creds, ok := h.rt.LastPullCredentials("registry.local:5000/acme/app:1")
		if !ok || creds["registry.local:5000"] != (runtime.Credential{Username: "robot", Password: "pa55-s3cret"}) {
			t.Fatalf("pull credentials %v %v", creds, ok)
		}
		if ev := h.event("FailedToRetrieveImagePullSecret"); !strings.Contains(ev, `"missing"`) {
			t.Errorf("event %q", ev)
		}
		if h.state(idOf(p, "c0")) != runtime.StateRunning {
			t.Errorf("status %+v", h.getStatus())
		}
		h.leaks("pa55-s3cret")
		h.leaks(auth)
	})
}
